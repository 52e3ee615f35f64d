"""Embodied runs end to end on the fake cluster with the toy simulator: PPO (value head, GAE) and
GRPO (fixed reset states), pipelined stages, placements, videos, checkpoints."""

from __future__ import annotations

import json
import os
import sys

import pytest
import ray.cloudpickle

from rlinf.utils.metric_logger import read_metrics

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray


def toy_config(tmp_path, placement, accelerators, *, adv="gae", stages=2, chunks=1, envs=8,
               group=1, video=False, backend="ray", **runner):
    env = {"env_type": "toy", "total_num_envs": envs, "max_episode_steps": 8, "auto_reset": True,
           "use_fixed_reset_state_ids": adv == "grpo", "group_size": group,
           "video_cfg": {"save_video": video, "video_base_dir": str(tmp_path / "video")},
           "init_params": {"camera_heights": 16, "camera_widths": 16} if video else {}}
    return {
        "cluster": {"num_nodes": 1, "accelerators_per_node": accelerators, "component_placement": placement,
                    "backend": backend},
        "runner": {"task_type": "embodied", "max_steps": 2, "val_check_interval": 2, "save_interval": -1,
                   "output_dir": str(tmp_path / "out"), "experiment_name": "t",
                   "logger": {"log_path": str(tmp_path / "out" / "t")}, **runner},
        "algorithm": {"adv_type": adv, "group_size": group, "gamma": 0.9, "lam": 0.95, "update_epochs": 2,
                      "entropy_bonus": 0.01, "normalize_advantages": True},
        "env": {"train": env, "eval": {**env, "auto_reset": False}},
        "rollout": {"pipeline_stage_num": stages},
        "actor": {"model": {"model_type": "mlp", "action_dim": 2, "num_action_chunks": chunks,
                            "add_value_head": adv == "gae"},
                  "micro_batch_size": 4, "global_batch_size": 16, "optim": {"lr": 3e-3}},
        "critic": {"use_critic_model": adv == "gae"},
    }


@pytest.fixture(scope="module")
def gae_two_stage_run(ray_cluster, tmp_path_factory):
    """``(summary, folder)`` of one synchronous PPO run (GAE, two pipeline stages, hybrid placement,
    videos), launched once for the tests that read different things from it."""
    from rlinf.runners.embodied.recipe import run_embodied

    folder = tmp_path_factory.mktemp("gae_two_stage")
    cfg = toy_config(folder, {"env": "0", "rollout": "1", "actor": "0-1"}, 2, video=True)
    return run_embodied(cfg, print_fn=lambda *_: None), folder


def test_ppo_with_gae_two_stages_hybrid_placement(gae_two_stage_run):
    summary, tmp_path = gae_two_stage_run
    assert summary["steps"] == 2 and 0 <= summary["val/last_success_rate"] <= 1
    metrics = {int(m["step"]): m for m in read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))}
    assert sorted(metrics) == [0, 1, 2]
    for key in ("env/success_rate", "actor/policy_loss", "actor/value_loss", "actor/grad_norm",
                "time/rollout", "throughput/env_steps_per_s"):
        assert key in metrics[1], key
    assert metrics[1]["env/episodes"] == 8  # 8 envs x one 8-step episode each
    videos = os.listdir(tmp_path / "video")
    assert "eval_step0_rank0.mp4" in videos and "eval_step2_rank0.mp4" in videos
    assert "train_step1_rank0.mp4" in videos and "train_step2_rank0.mp4" in videos  # env.train.video_cfg
    assert os.path.isdir(tmp_path / "out" / "t" / "policy")


def test_one_step_ahead_overlaps_the_next_rollout_with_the_update(tmp_path, gae_two_stage_run):
    """max_head_offpolicyness 1: each update after the first learns from the previous policy
    version's rollout; evaluations and checkpoints collect the rollout in flight first. With
    decoupled_ppo the first update's proximal policy is the one that acted (weights pi_prox /
    pi_behav all 1), the later ones' is one version newer (weights away from 1). actor.lr_sched
    decays the rate linearly over the run's optimizer steps.

    On the local backend (calls to different groups overlap on their own threads, as Ray actors
    do; the runner's loop is the same): a Ray launch of the groups costs ~20 s here, and the
    runner under Ray is the shared synchronous run's subject."""
    from rlinf.runners.embodied.recipe import run_embodied

    cfg = toy_config(tmp_path, {"env": "0", "rollout": "1", "actor": "0-1"}, 2, max_steps=4,
                     val_check_interval=2, save_interval=2, video=True, backend="local")
    cfg["algorithm"]["max_head_offpolicyness"] = 1
    cfg["algorithm"]["loss_type"] = "decoupled_ppo"
    # a linear decay to 0 over the run's planned optimizer steps: 4 steps x 2 epochs x (64 / 16)
    cfg["actor"]["lr_sched"] = {"lr_decay_style": "linear"}
    summary = run_embodied(cfg, print_fn=lambda *_: None)
    assert summary["steps"] == 4
    metrics = read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))
    train = [m for m in metrics if "rollout/staleness" in m]
    assert [m["rollout/staleness"] for m in train] == [0.0, 1.0, 1.0, 1.0]
    weights = [(m["actor/behav_imp_weight_mean"], m["actor/behav_imp_weight_max"]) for m in train]
    assert abs(weights[0][0] - 1) < 1e-3 and abs(weights[0][1] - 1) < 1e-3, weights
    assert all(abs(mx - 1) > 1e-3 for _, mx in weights[1:]), weights
    assert all(m["env/episodes"] == 8 for m in train)  # every collected rollout is whole
    assert [m["actor/optimizer_steps"] for m in train] == [8.0] * 4
    assert [m["actor/lr"] for m in train] == pytest.approx([3e-3 * (1 - 8 * k / 32) for k in (1, 2, 3, 4)])
    assert [int(m["step"]) for m in metrics if "eval/success_rate" in m] == [0, 2, 4]
    state = json.loads((tmp_path / "out" / "t" / "checkpoints" / "global_step_4" / "trainer_state.json").read_text())
    assert state["rollouts"] == 4 + 3  # four train rollouts (none left over) and three evaluations
    train_videos = sorted(v for v in os.listdir(tmp_path / "video") if v.startswith("train"))
    assert train_videos == ["train_step1_rank0.mp4", "train_step2_rank0.mp4", "train_step4_rank0.mp4"]
    # the same placement without max_head_offpolicyness (the shared synchronous run): never stale
    sync_folder = gae_two_stage_run[1]
    assert {m.get("rollout/staleness") for m in read_metrics(str(sync_folder / "out" / "t" / "metrics.jsonl"))
            if "actor/grad_norm" in m} == {0.0}


def test_grpo_with_action_chunks_and_fixed_reset_groups(tmp_path):
    """On the local backend (the groups in this process: the loop under test is the same; a Ray
    launch of the three groups costs ~20 s here)."""
    from rlinf.runners.embodied.recipe import run_embodied

    cfg = toy_config(tmp_path, {"env,rollout": "0", "actor": "0"}, 1, adv="grpo", stages=1, chunks=2,
                     group=4, backend="local")
    cfg["actor"]["global_batch_size"] = 8
    summary = run_embodied(cfg, print_fn=lambda *_: None)
    assert summary["steps"] == 2
    first = read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))[1]
    assert first["actor/grad_norm"] > 0 and "actor/value_loss" not in first


def test_tiny_vla_grpo_and_ppo_steps_on_images_and_instructions(ray_cluster, tmp_path):
    """The VLA path: a tiny OpenVLA-OFT checkpoint in the real format (random weights, LoRA)
    acting on the toy task's camera image and instruction, K=2 chunks of A=2 actions, a GRPO step
    (on the local backend: the groups in this process, ~20 s less than a Ray launch) and a PPO
    step (under Ray)."""
    from rlinf.models.embodied.openvla.tiny import TINY_UNNORM_KEY, write_tiny_openvla
    from rlinf.runners.embodied.recipe import run_embodied

    vla = write_tiny_openvla(tmp_path / "vla", action_dim=2, identity_stats=True)
    for adv in ("grpo", "gae"):
        cfg = toy_config(tmp_path / adv, {"env,rollout": "0", "actor": "0"}, 1, adv=adv, stages=1, chunks=2,
                         envs=4, group=2 if adv == "grpo" else 1, video=True,
                         backend="local" if adv == "grpo" else "ray", max_steps=1, val_check_interval=-1)
        for split in ("train", "eval"):
            cfg["env"][split]["init_params"] = {"camera_heights": 32, "camera_widths": 32}
            cfg["env"][split]["max_episode_steps"] = 4
        cfg["actor"]["model"] = {"model_type": "openvla_oft", "model_path": str(vla), "action_dim": 2,
                                 "num_action_chunks": 2, "unnorm_key": TINY_UNNORM_KEY, "image_size": [32, 32],
                                 "is_lora": True, "lora_rank": 4, "add_value_head": adv == "gae",
                                 "value_type": "chunk_level"}
        cfg["actor"].update(micro_batch_size=4, global_batch_size=8)
        assert run_embodied(cfg, print_fn=lambda *_: None)["steps"] == 1
        step = read_metrics(str(tmp_path / adv / "out" / "t" / "metrics.jsonl"))[-1]
        assert step["actor/grad_norm"] > 0, adv


def test_env_worker_dying_mid_rollout_fails_the_rollout_worker_at_once(ray_cluster, tmp_path):
    """Env and rollout workers talk over pipes: a dead env process is an error, not a stall."""
    import time

    import ray

    from rlinf.config.embodied import EmbodiedConfig
    from rlinf.runners.embodied.loop import launch_embodied_groups
    from rlinf.scheduler import PeerDiedError

    cfg = EmbodiedConfig.from_dict(toy_config(tmp_path, {"env": "0-1", "rollout": "2", "actor": "3"}, 4))
    plan = cfg.cluster.plan(ray_cluster.shape)
    groups = launch_embodied_groups(cfg, ray_cluster, plan)
    try:
        # one full rollout works (tag, steps, seed); the second is cut by killing env rank 1
        ok_env = groups.env.execute("run", "train", "a", 4, 0)
        assert groups.rollout.execute("run", "a", 4, 0).wait(timeout=60)[0].num_envs == 8
        ok_env.wait(timeout=60)
        groups.env.execute("run", "train", "b", 10_000, 0)
        serving = groups.rollout.execute("run", "b", 10_000, 0)
        time.sleep(1.0)
        ray.kill(groups.env.actors[1])
        start = time.monotonic()
        # the rollout worker notices on its next receive (closed) or send (broken pipe), by timing
        with pytest.raises(PeerDiedError, match=r"EnvGroup\[1\] on node \d+ is dead .*RolloutGroup\[0\] noticed "
                                                r"it in run\(\): .*(EnvGroup\[1\] closed the connection|"
                                                r"cannot send to EnvGroup\[1\] \(\[Errno 32\] Broken pipe\))"):
            serving.wait(timeout=60)
        assert time.monotonic() - start < 10
    finally:
        groups.shutdown()


def test_a_killed_idle_rollout_worker_is_named_when_the_weight_sync_fails(ray_cluster, tmp_path):
    """kill -9 of an idle rollout worker: the actor's send fails first, the error names the dead one."""
    import os
    import signal

    from rlinf.config.embodied import EmbodiedConfig
    from rlinf.runners.embodied.loop import EmbodiedRunner, launch_embodied_groups
    from rlinf.scheduler import WorkerDiedError

    cfg = EmbodiedConfig.from_dict(toy_config(tmp_path, {"env": "0", "rollout": "1", "actor": "2"}, 3))
    groups = launch_embodied_groups(cfg, ray_cluster, cfg.cluster.plan(ray_cluster.shape))
    try:
        runner = EmbodiedRunner(cfg, groups)  # one weight sync works
        (_, pid), = groups.rollout._execute("_rlinf_ping", _control=True).wait(timeout=30)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match=r"RolloutGroup\[0\] on node \d+ (is dead|died)") as err:
            runner.sync_weights()
        assert err.value.worker == "RolloutGroup[0]"
    finally:
        groups.shutdown()


# offload under Ray; its control (no offload: nothing released) on the local backend, where the
# env group shares the actor's slot as well (the runner and the env worker are the same code)
@pytest.mark.parametrize("offload,backend", [(True, "ray"), (False, "local")])
def test_env_offload_releases_simulators_between_rollouts_when_sharing_the_actor_device(
        request, tmp_path, offload, backend):
    from rlinf.config.embodied import EmbodiedConfig
    from rlinf.runners.embodied.loop import EmbodiedRunner, launch_embodied_groups
    from rlinf.scheduler.local.cluster import LocalCluster

    raw = toy_config(tmp_path, {"env": "0", "rollout": "1", "actor": "0-1"}, 2,  # env shares slot 0
                     backend=backend)
    raw["env"]["enable_offload"] = offload
    cfg = EmbodiedConfig.from_dict(raw)
    cluster = (request.getfixturevalue("ray_cluster") if backend == "ray"
               else LocalCluster.from_config(cfg.cluster))
    groups = launch_embodied_groups(cfg, cluster, cfg.cluster.plan(cluster.shape))
    try:
        runner = EmbodiedRunner(cfg, groups)
        assert runner.offload_env is offload
        built_at_launch = groups.env.simulators_built().wait()[0]  # the obs-spec probe
        for _ in range(2):
            assert runner.train_step()["env/episodes"] == 8
        assert runner.validate()["eval/episodes"] == 8
        built = groups.env.simulators_built().wait()[0] - built_at_launch
        # the first train rollout uses the probe's simulators; with offload they are released after
        # it, so the second train rollout and the eval rebuild; without, only eval builds (once)
        assert built == (2 if offload else 1)
    finally:
        groups.shutdown()


def test_state_normalisation_target_kl_and_minibatch_advantages_on_one_actor_process(tmp_path):
    """On the local backend, as the GRPO test above."""
    import torch

    from rlinf.runners.embodied.recipe import run_embodied

    cfg = toy_config(tmp_path, {"env": "0", "rollout": "1", "actor": "1"}, 2, backend="local")
    cfg["rollout"].update(normalize_states=True, state_norm_clip=5.0)
    # the first minibatch of an update sees the rollout policy itself (KL ~ 0 < 1e-6); after one
    # optimizer step the next minibatch's KL exceeds 1e-6, so every update takes exactly 1 step
    cfg["algorithm"].update(target_kl=1e-6, normalize_minibatch_advantages=True)
    run_embodied(cfg, print_fn=lambda *_: None)
    metrics = {int(m["step"]): m for m in read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))}
    for step in (1, 2):
        assert metrics[step]["actor/optimizer_steps"] == 1.0
        assert metrics[step]["actor/early_stop"] == 1.0
        assert metrics[step]["actor/approx_kl"] > 0
    stats = torch.load(tmp_path / "out" / "t" / "policy" / "state_norm.pt", weights_only=True)
    # 2 train rollouts x 8 envs x (8 steps + the first observation); evaluation does not count
    assert abs(float(stats["count"]) - 2 * 8 * 9) < 1e-3
    assert stats["mean"].shape == stats["var"].shape and bool((stats["var"] > 0).all())
