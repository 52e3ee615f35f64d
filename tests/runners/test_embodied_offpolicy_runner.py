"""The off-policy recipe (SAC, CrossQ, RLPD) end to end under real Ray with the toy simulator:
two training steps in sync and in async mode, RLPD with a tiny demonstration file in ManiSkill's
format, CrossQ, a resume that continues with the saved buffer, and the bad inputs as one line and
exit code 2 through the entry point, before Ray."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import ray.cloudpickle

from rlinf.utils.metric_logger import read_metrics

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = Path(__file__).resolve().parents[2]
ENVS, T, UPDATES = 4, 3, 4  # train envs, policy steps per collection, updates per training step


def sac_config(tmp_path, mode: str = "sync", **algorithm) -> dict:
    env = {"env_type": "toy", "total_num_envs": ENVS, "max_episode_steps": 5, "auto_reset": True}
    out = str(tmp_path / "out")
    return {
        "cluster": {"num_nodes": 1, "accelerators_per_node": 2,
                    "component_placement": {"env": "0", "rollout": "1", "actor": "1"}},
        "runner": {"task_type": "embodied", "max_steps": 2, "val_check_interval": 2, "save_interval": -1,
                   "output_dir": out, "experiment_name": "t", "logger": {"log_path": out + "/t"},
                   "rollout_mode": mode, "plot_curves": False},
        "algorithm": {"loss_type": "embodied_sac", "update_epoch": UPDATES, "gamma": 0.9,
                      "replay_buffer": {"capacity": 500, "min_buffer_size": 8}, **algorithm},
        "env": {"train": {**env, "max_steps_per_rollout_epoch": T}, "eval": {**env, "auto_reset": False}},
        "actor": {"model": {"model_type": "sac_mlp", "action_dim": 2, "policy_hidden_sizes": [16, 16]},
                  "global_batch_size": 8},
    }


def _metrics(folder) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for m in read_metrics(str(folder / "out" / "t" / "metrics.jsonl")):
        out.setdefault(int(m["step"]), {}).update(m)
    return out


@pytest.fixture(scope="module")
def sync_run(ray_cluster, tmp_path_factory):
    """``(summary, folder, start-up lines)`` of one synchronous SAC run of 2 steps, checkpointed at
    step 2 (shared by the tests reading it and the resume test)."""
    from rlinf.runners.embodied_offpolicy.recipe import run_offpolicy

    folder = tmp_path_factory.mktemp("sac_sync")
    cfg = sac_config(folder, uniform_warmup=True)
    cfg["runner"]["save_interval"] = 2
    lines: list[str] = []
    return run_offpolicy(cfg, print_fn=lambda *a: lines.append(" ".join(map(str, a)))), folder, lines


@pytest.mark.slow
def test_sync_sac_collects_then_updates_and_saves_the_buffer(sync_run):
    summary, folder, lines = sync_run
    assert summary["steps"] == 2 and 0 <= summary["val/last_success_rate"] <= 1
    metrics = _metrics(folder)
    assert sorted(metrics) == [0, 1, 2] and "eval/success_rate" in metrics[0] and "eval/success_rate" in metrics[2]
    for step in (1, 2):
        m = metrics[step]
        assert m["buffer/size"] == step * T * ENVS  # every env step is one transition (n_step 1)
        assert m["actor/updates"] == UPDATES and m["rollout/staleness"] == 0.0  # sync: never behind
        for key in ("actor/critic_loss", "actor/q_mean", "actor/alpha", "actor/entropy", "buffer/memory_mb",
                    "throughput/env_steps_per_s", "throughput/updates_per_s", "replay/utd"):
            assert np.isfinite(m[key]), key
    assert metrics[2]["throughput/env_steps_total"] == 2 * T * ENVS
    assert any(line.startswith("[rlinf] replay buffer: 500 transitions") and "MiB preallocated" in line
               for line in lines), lines
    saved = folder / "out" / "t" / "checkpoints" / "global_step_2" / "actor"
    assert (saved / "replay_buffer.pt").is_file() and (saved / "learner.pt").is_file()
    assert (folder / "out" / "t" / "policy" / "sac_actor.pt").is_file()


@pytest.mark.slow  # the module's Ray SAC run (sync_run, ~30 s) is its set-up: not in the quick tier
def test_a_resume_continues_with_the_saved_buffer(sync_run, tmp_path):
    """The checkpoint of the Ray run above, resumed on the local backend (a Ray launch costs ~20 s
    here; what is tested is the buffer and the counters that come back)."""
    from rlinf.runners.embodied_offpolicy.recipe import run_offpolicy

    _, folder, _ = sync_run
    cfg = sac_config(tmp_path, uniform_warmup=True)
    cfg["cluster"]["backend"] = "local"
    cfg["runner"].update(max_steps=3, val_check_interval=-1,
                         resume_dir=str(folder / "out" / "t" / "checkpoints" / "global_step_2"))
    assert run_offpolicy(cfg, print_fn=lambda *_: None)["steps"] == 3
    (step3,) = [m for m in read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl")) if m["step"] == 3]
    assert step3["buffer/size"] == 3 * T * ENVS           # the saved 2 collections + this one
    assert step3["actor/total_updates"] == 3 * UPDATES
    assert step3["throughput/env_steps_total"] == 3 * T * ENVS


@pytest.mark.slow
def test_async_crossq_keeps_simulating_during_updates_and_logs_staleness(ray_cluster, tmp_path):
    """rollout_mode async with CrossQ heads (no targets, actor every 2nd critic step) and 2-step
    returns: the rollout never waits for the actor, weights arrive on the channel."""
    from rlinf.runners.embodied_offpolicy.recipe import run_offpolicy

    cfg = sac_config(tmp_path, "async", critic_actor_ratio=2, n_step=2)
    cfg["actor"]["model"]["q_head_type"] = "crossq"
    cfg["runner"]["max_steps"] = 3
    assert run_offpolicy(cfg, print_fn=lambda *_: None)["steps"] == 3
    metrics = _metrics(tmp_path)
    train = [metrics[s] for s in (1, 2, 3)]
    assert all("rollout/staleness" in m and m["rollout/staleness_max"] >= 0 for m in train)
    # the actor waits only until it holds what sync would have: never more updates than sync's UTD
    received = [m["replay/received"] for m in train]
    assert all(r >= (i + 1) * T * ENVS - ENVS for i, r in enumerate(received)), received  # n_step 2 lags a step
    assert train[-1]["throughput/env_steps_total"] >= 3 * T * ENVS
    assert train[-1]["actor/version"] >= 3  # pushed every step (weight_sync_interval 1)
    assert np.isfinite(train[-1]["actor/critic_loss"]) and "eval/success_rate" in metrics[2]


def _write_toy_demos(path: Path, episodes: int = 3, obs_dim: int = 4) -> Path:
    from rlinf.data.maniskill_trajectory import TrajectoryWriter

    rng = np.random.default_rng(0)
    with TrajectoryWriter(path, env_id="toy", env_kwargs={"obs_mode": "state"}, max_episode_steps=5) as w:
        for i in range(episodes):
            w.add_episode(obs=rng.normal(size=(6, obs_dim)), actions=rng.uniform(-1, 1, size=(5, 2)),
                          terminated=[False] * 4 + [True], truncated=[False] * 5, success=[False] * 4 + [True],
                          rewards=[100.0] * 5, seed=i)
    return path


def test_rlpd_mixes_a_tiny_demo_file_into_every_batch(tmp_path):
    """On the local backend (the groups in this process; sync and async under Ray are the runs
    above, and a Ray launch costs ~20 s here)."""
    from rlinf.runners.embodied_offpolicy.recipe import run_offpolicy

    demo = _write_toy_demos(tmp_path / "demos" / "trajectory.h5")
    cfg = sac_config(tmp_path, critic_subsample_size=2, actor_agg_q="mean", backup_entropy=False,
                     demo_buffer={"load_path": str(demo)})
    cfg["cluster"]["backend"] = "local"
    cfg["actor"]["model"].update(num_q_heads=4, q_head_type="layernorm")
    cfg["runner"]["max_steps"] = 1
    lines: list[str] = []
    run_offpolicy(cfg, print_fn=lambda *a: lines.append(" ".join(map(str, a))))
    assert any("RLPD" in line and "15 demonstration transitions (3 episodes)" in line for line in lines), lines
    step = _metrics(tmp_path)[1]
    # demo rewards are 100 and the toy's are below 1: half of every batch is demos, so the mean
    # target is near 50 and far above what the online rows alone give
    assert step["actor/target_mean"] > 20, step


def _learning_metrics(folder) -> dict[int, dict]:
    """Every metric of every step but the clock's (``time/*``, rates per second)."""
    return {step: {k: v for k, v in m.items() if not k.startswith("time/") and not k.endswith("_per_s")}
            for step, m in _metrics(folder).items()}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_runner_deterministic_repeats_a_run_exactly_given_its_seed(mode, tmp_path):
    """runner.deterministic: true (async: the lockstep; sync mode is one by construction): two
    runs with one seed log the same losses, returns, buffer, versions and evaluations at every
    step, and another seed does not. Each update k learned from exactly collections 0..k; in the
    async lockstep chunk k+1 acted with the weights of update k-1 (staleness exactly 1). On the
    local backend (a Ray run with two rollout workers repeated exactly too: docs/offpolicy.md)."""
    from rlinf.runners.embodied_offpolicy.recipe import run_offpolicy

    runs = {}
    for name, seed in (("a", 1), ("b", 1)) + ((("c", 2),) if mode == "async" else ()):
        cfg = sac_config(tmp_path / name, mode, uniform_warmup=True, n_step=2)
        cfg["cluster"]["backend"] = "local"
        cfg["runner"].update(max_steps=4, val_check_interval=2, seed=seed, deterministic=True)
        run_offpolicy(cfg, print_fn=lambda *_: None)
        runs[name] = _learning_metrics(tmp_path / name)
    a = runs["a"]
    assert sorted(a) == [0, 1, 2, 3, 4] and all("eval/episode_return" in a[s] for s in (0, 2, 4))
    assert a == runs["b"]
    for step in (1, 2, 3, 4):
        assert a[step]["replay/env_steps"] == step * T * ENVS and a[step]["actor/updates"] == UPDATES
        assert a[step]["rollout/staleness"] == (0.0 if mode == "sync" or step == 1 else 1.0)
    if mode == "async":
        assert a[4]["actor/critic_loss"] != runs["c"][4]["actor/critic_loss"]
        assert a[2]["eval/episode_return"] != runs["c"][2]["eval/episode_return"]


# ---- bad input: one line, exit code 2, before Ray ---------------------------------------------------

def _entry_error(cfg: dict, capsys) -> str:
    from rlinf.runners.embodied_offpolicy.recipe import embodied_recipe_for
    from rlinf.runners.entry import run_entry

    with pytest.raises(SystemExit) as exit_:
        run_entry(embodied_recipe_for(cfg), cfg, print_fn=lambda *_: None)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1, err
    return err[0]


BAD = {
    "min_buffer_size": (lambda c: c["algorithm"]["replay_buffer"].update(min_buffer_size=600),
                        "algorithm.replay_buffer.min_buffer_size: 600 exceeds replay_buffer.capacity (500)"),
    "batch": (lambda c: c["actor"].update(global_batch_size=501),
              "actor.global_batch_size: 501 transitions per batch, but algorithm.replay_buffer.capacity holds at most"),
    "tau": (lambda c: c["algorithm"].update(tau=0.0), "algorithm.tau: must be in (0, 1], got 0.0"),
    "learner_threads": (lambda c: c["runner"].update(learner_threads=0),
                        "runner.learner_threads: must be >= 1 or null (chosen from the mode), got 0"),
    "deterministic_by_the_clock": (lambda c: c["runner"].update(deterministic=True, max_minutes=5),
                                   "runner.max_minutes: 5.0: a wall-time limit stops after however many steps "
                                   "fit, which runner.deterministic: true cannot repeat"),
    "no_q_head": (lambda c: c["actor"]["model"].update(model_type="mlp"),
                  "actor.model.model_type: mlp has no Q head"),
    "vla": (lambda c: c["actor"]["model"].update(model_type="openvla"),
            "actor.model.model_type: openvla has no Q head"),
    "demo_missing": (lambda c: c["algorithm"].update(demo_buffer={"load_path": "/nonexistent/demo.h5"}),
                     "algorithm.demo_buffer.load_path: demo file /nonexistent/demo.h5 does not exist"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_before_ray(case, tmp_path, capsys):
    edit, expected = BAD[case]
    cfg = sac_config(tmp_path)
    edit(cfg)
    line = _entry_error(cfg, capsys)
    assert line.startswith("config error: ") and expected in line, line


def test_a_demo_file_truncated_or_of_another_observation_space_names_the_file(tmp_path, capsys):
    demo = _write_toy_demos(tmp_path / "wide" / "trajectory.h5", obs_dim=7)
    cfg = sac_config(tmp_path, demo_buffer={"load_path": str(demo)})
    line = _entry_error(cfg, capsys)
    assert f"algorithm.demo_buffer.load_path: demo file {demo}: observations have 7 numbers, the env gives 4" in line
    cut = _write_toy_demos(tmp_path / "cut" / "trajectory.h5")
    cut.write_bytes(cut.read_bytes()[:300])
    cfg = sac_config(tmp_path, demo_buffer={"load_path": str(cut)})
    line = _entry_error(cfg, capsys)
    assert f"algorithm.demo_buffer.load_path: demo file {cut}" in line and "truncated" in line, line


@pytest.mark.slow
def test_the_embodied_entry_picks_the_off_policy_recipe_and_refuses_sac_without_q_heads():
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "REPO_PATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "embodiment" / "main_embodied.py"),
                          "--config-name", "maniskill_sac_mlp_cpu", "actor.model.model_type=mlp"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: actor.model.model_type: mlp has no Q head"), lines


def test_learner_threads_take_every_core_in_sync_mode_and_the_slots_share_in_async_mode():
    """Sync: the env and rollout workers wait while the learner updates, so it gets the node's
    cores; async: they simulate meanwhile, so it keeps its slots' share; the key overrides both."""
    from types import SimpleNamespace as NS

    from rlinf.config.embodied_offpolicy import OffPolicyRunnerConfig
    from rlinf.runners.embodied_offpolicy.loop import learner_threads
    from rlinf.scheduler.cluster import NodeInfo
    from rlinf.scheduler.placement import ClusterShape, plan_placement

    node = NodeInfo(0, "n", "127.0.0.1", num_accelerators=4, has_gpus=False, is_head=True, num_cpus=8)
    cluster = NS(backend=NS(in_process=False), node=lambda rank: node)
    plan = plan_placement({"env": "0-2", "rollout": 3, "actor": 3}, ClusterShape(1, 4))
    runner = OffPolicyRunnerConfig(task_type="embodied")
    assert learner_threads(runner, cluster, plan) == 8
    assert learner_threads(dataclasses.replace(runner, rollout_mode="async"), cluster, plan) == 2
    assert learner_threads(dataclasses.replace(runner, learner_threads=3), cluster, plan) == 3
    assert learner_threads(runner, NS(backend=NS(in_process=True)), plan) is None


def test_the_memory_estimate_before_ray_holds_the_replay_buffer(tmp_path):
    """The buffer is preallocated in the actor process: capacity x one row's bytes (two states,
    the action, reward and discount in fp32, the termination flag in one byte)."""
    from rlinf.runners.embodied_offpolicy.recipe import OffPolicyRecipe
    from rlinf.runners.memory_check import check_before_ray

    recipe = OffPolicyRecipe()
    start = recipe.prepare(sac_config(tmp_path))
    obs_dim = start.obs_specs["train"].state_dim
    lines: list[str] = []
    est = check_before_ray(recipe, start.cfg, lines.append, start=start)
    (buffer,) = [i for i in est.components["actor"].items if i.name == "replay buffer"]
    assert buffer.where == "host"
    assert buffer.bytes == 500 * ((2 * obs_dim + 2 + 2) * 4 + 1)
    assert any("replay buffer" in line for line in lines), lines


class _Call:
    """A finished-or-not group call for the async loop's bookkeeping (``_local``: wait_first polls)."""

    _local = True

    def __init__(self, done_when):
        self.done_when = done_when

    def done(self) -> bool:
        return self.done_when()

    def pending_refs(self) -> list:
        return [] if self.done() else [self]

    def wait(self) -> list:
        return [{"actor/version": 1.0}]


def test_async_step_starts_the_next_collection_when_the_last_one_ended_during_the_previous_update():
    """The race behind a hang seen at the 4th async step: the collection in flight ended while
    the previous update was still running, and the actor's next update waits for the rows of the
    collection after it. The step must start that collection, not wait on the update alone."""
    from types import SimpleNamespace as NS

    from rlinf.runners.embodied_offpolicy.loop import OffPolicyRunner

    runner = OffPolicyRunner.__new__(OffPolicyRunner)
    started, polls = [], []

    def update_done() -> bool:  # the actor's update finishes once a new collection has started
        polls.append(1)
        assert len(polls) < 10_000, "waited on the update alone: no collection in flight (deadlock)"
        return bool(started)

    runner.cfg = NS(runner=NS(weight_sync_interval=1), algorithm=NS(update_epoch=4))
    runner.groups = NS(actor=NS(execute=lambda *a, **k: _Call(update_done)))
    runner._segment = (_Call(lambda: True), _Call(lambda: True))  # ended during the last update
    runner._rows_base, runner.step, runner.rows_per_collection = 0, 3, 64
    runner._finish_segment = lambda segment: None
    runner._start_segment = lambda: started.append(1) or (_Call(lambda: False), _Call(lambda: False))
    assert runner._async_update() == {"actor/version": 1.0}
    assert started == [1] and runner._actor_version == 1


def test_async_step_goes_round_when_the_collection_ends_between_its_two_checks():
    """The same deadlock by a narrower race: the collection is still running at the first check
    and done by the time the calls to wait on are listed. Waiting on the update alone then never
    returns; the step must go round, finish the collection and start the next."""
    from types import SimpleNamespace as NS

    from rlinf.runners.embodied_offpolicy.loop import OffPolicyRunner

    runner = OffPolicyRunner.__new__(OffPolicyRunner)
    started, checks = [], []

    def segment_done() -> bool:  # running at the first look, done at every later one
        checks.append(1)
        return len(checks) > 1

    def refuse_to_wait(*_):
        raise AssertionError("waited on the update alone: no collection in flight (deadlock)")

    update = _Call(lambda: bool(started))
    update.backend = NS(wait_any=refuse_to_wait)
    runner.cfg = NS(runner=NS(weight_sync_interval=1), algorithm=NS(update_epoch=4))
    runner.groups = NS(actor=NS(execute=lambda *a, **k: update))
    runner._segment = (_Call(segment_done),)
    runner._rows_base, runner.step, runner.rows_per_collection = 0, 3, 64
    runner._finish_segment = lambda segment: None
    runner._start_segment = lambda: started.append(1) or (_Call(lambda: False),)
    assert runner._async_update() == {"actor/version": 1.0}
    assert started == [1]

