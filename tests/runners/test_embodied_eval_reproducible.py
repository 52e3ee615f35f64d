"""Evaluations that reproduce: for one checkpoint, ``runner.only_eval`` gives the same per-episode
outcomes (``eval/episodes.jsonl``) and success rate whatever the env count per process, pipeline
stages, placement, backend and number of env processes, and the same as the training run's own
evaluation at the step it saved (the resume). The toy task (``toy_ppo_mlp.yaml``) and ManiSkill
PushCube with a state MLP (``maniskill_ppo_mlp_cpu.yaml``), each trained one step once per module;
all runs on the local backend but one Ray run."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import ray.cloudpickle
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rlinf.config.resolvers import register_resolvers
from rlinf.utils.eval_episodes import EpisodeLog
from rlinf.utils.metric_logger import read_metrics

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "examples" / "embodiment" / "config"
EPISODE_KEYS = ("episode", "seed", "task", "success", "return", "length", "ended")


def _compose(name: str, overrides: list[str]) -> dict:
    os.environ.setdefault("REPO_PATH", str(ROOT))
    register_resolvers()
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        return OmegaConf.to_container(compose(name, overrides=overrides), resolve=True)


def _layout(raw: dict, folder: Path, placement: dict, accelerators: int, *, eval_envs: int, stages: int,
            backend: str = "local", resume: Path | None = None, **eval_keys) -> dict:
    """``raw`` in another layout: placement, backend, eval env count, pipeline stages; with
    ``resume`` an only_eval run of that checkpoint, writing under ``folder``."""
    raw = {**raw, "cluster": {"num_nodes": 1, "accelerators_per_node": accelerators, "backend": backend,
                              "component_placement": placement},
           "rollout": {**raw["rollout"], "pipeline_stage_num": stages},
           "env": {**raw["env"], "eval": {**raw["env"]["eval"], "total_num_envs": eval_envs, **eval_keys}}}
    runner = {**raw["runner"], "output_dir": str(folder), "logger": {**raw["runner"]["logger"],
                                                                     "log_path": str(folder / "logs")}}
    if resume is not None:
        runner.update(only_eval=True, resume_dir=str(resume), export_hf=False, plot_curves=False)
    return {**raw, "runner": runner}


def _episodes(folder: Path, step: int) -> list[tuple]:
    lines = [r for r in EpisodeLog(str(folder / "logs")).read() if r["step"] == step]
    return [tuple(r[k] for k in EPISODE_KEYS) for r in lines]


def _trained(raw: dict, folder: Path) -> tuple[Path, list[tuple], dict]:
    """Train one step (evaluating at 0 and 1, saving at 1): the checkpoint, the training run's
    own episodes at step 1 and its step-1 metrics."""
    from rlinf.runners.embodied.recipe import run_embodied

    run_embodied(raw, print_fn=lambda *_: None)
    metrics = {int(m["step"]): m for m in read_metrics(str(folder / "logs" / "metrics.jsonl"))}
    return folder / raw["runner"]["experiment_name"] / "checkpoints" / "global_step_1", _episodes(folder, 1), metrics[1]


def _only_eval(raw: dict) -> tuple[dict, list[tuple]]:
    from rlinf.runners.embodied.recipe import run_embodied

    summary = run_embodied(raw, print_fn=lambda *_: None)
    return summary, _episodes(Path(raw["runner"]["output_dir"]), 1)


# ---- the toy task --------------------------------------------------------------------------------
TOY_OVERRIDES = ["runner.max_steps=1", "runner.val_check_interval=1", "runner.save_interval=1",
                 "env.train.total_num_envs=4", "env.train.max_episode_steps=8", "env.eval.max_episode_steps=12",
                 "+env.eval.num_episodes=10", "actor.global_batch_size=16", "actor.micro_batch_size=8"]


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """``(raw config, checkpoint, training-run episodes at step 1, its metrics)``: toy_ppo_mlp
    trained one step on the local backend (env and rollout apart from the actor, 2 stages, 4 eval
    envs: 10 episodes in 3 rounds)."""
    folder = tmp_path_factory.mktemp("toy_train")
    raw = _compose("toy_ppo_mlp", TOY_OVERRIDES)
    raw = _layout(raw, folder, {"env,rollout": 0, "actor": 1}, 2, eval_envs=4, stages=2)
    return (raw, *_trained(raw, folder))


def test_toy_training_eval_writes_its_episodes_and_the_wilson_interval(toy_run):
    raw, checkpoint, episodes, metrics = toy_run
    assert [e[0] for e in episodes] == list(range(10)) and [e[1] for e in episodes] == list(range(1000, 1010))
    assert {e[2] for e in episodes} == {"reach the target"} and all(e[6] for e in episodes)  # every one ended
    assert len({e[4] for e in episodes}) == 10  # ten different episodes, not one repeated
    wins = sum(e[3] for e in episodes)
    assert metrics["eval/success_rate"] == wins / 10 and metrics["eval/episodes"] == 10
    from rlinf.utils.confidence import wilson_interval

    assert (metrics["eval/success_rate_low"], metrics["eval/success_rate_high"]) == pytest.approx(
        wilson_interval(wins, 10))
    assert metrics["eval/episode_return"] == pytest.approx(sum(e[4] for e in episodes) / 10)
    assert os.path.isfile(checkpoint / "trainer_state.json")


@pytest.mark.parametrize("placement, accelerators, eval_envs, stages", [
    ({"env,rollout,actor": 0}, 1, 3, 1),            # collocated, 3 envs per stage: 4 rounds, 2 padding slots
    ({"env": 0, "rollout": 1, "actor": 2}, 3, 8, 2),  # disaggregated, 2 stages of 4: 2 rounds, 6 padding
    ({"env,rollout": 0, "actor": 1}, 2, 10, 1),     # hybrid, all ten in one round
], ids=["collocated-3envs", "disaggregated-2stages", "hybrid-one-round"])
def test_toy_only_eval_gives_the_training_runs_episodes_in_every_local_layout(
        toy_run, tmp_path, placement, accelerators, eval_envs, stages):
    raw, checkpoint, episodes, metrics = toy_run
    summary, again = _only_eval(_layout(raw, tmp_path, placement, accelerators, eval_envs=eval_envs, stages=stages,
                                        resume=checkpoint))
    assert again == episodes  # per episode: seed, success, return, length, bit for bit
    assert summary["eval/success_rate"] == metrics["eval/success_rate"]
    assert summary["eval/success_rate_low"] == metrics["eval/success_rate_low"]


@pytest.mark.ray
def test_toy_only_eval_on_ray_with_two_env_processes(ray_cluster, toy_run, tmp_path):
    raw, checkpoint, episodes, metrics = toy_run
    summary, again = _only_eval(_layout(raw, tmp_path, {"env": "0-1", "rollout": 0, "actor": 1}, 2, eval_envs=6,
                                        stages=1, backend="ray", resume=checkpoint))
    assert again == episodes and summary["eval/success_rate"] == metrics["eval/success_rate"]


def test_more_episodes_extend_the_set_and_a_new_seed_draws_another(toy_run, tmp_path):
    """With the forward shape held (actor.model.val_micro_batch_size 4: passes of 4 rows whatever
    the episode count), 12 episodes are the 10 of a 10-episode evaluation and two more; seed 2000
    plays other episodes."""
    raw, checkpoint, episodes, _ = toy_run
    raw = {**raw, "actor": {**raw["actor"], "model": {**raw["actor"]["model"], "val_micro_batch_size": 4}}}
    runs = {}
    for name, envs, keys in (("ten", 4, {}), ("twelve", 5, {"num_episodes": 12}), ("other", 5, {"seed": 2000})):
        runs[name] = _only_eval(_layout(raw, tmp_path / name, {"env,rollout,actor": 0}, 1, eval_envs=envs, stages=1,
                                        resume=checkpoint, **keys))[1]
    assert runs["twelve"][:10] == runs["ten"] and [e[1] for e in runs["twelve"][10:]] == [1010, 1011]
    assert [e[1] for e in runs["ten"]] == [e[1] for e in episodes]
    assert [e[1] for e in runs["other"]] == list(range(2000, 2010))
    assert [e[4] for e in runs["other"]] != [e[4] for e in runs["ten"]]


# ---- ManiSkill PushCube, state MLP ---------------------------------------------------------------
PUSHCUBE_OVERRIDES = ["runner.max_steps=1", "runner.val_check_interval=1", "runner.save_interval=1",
                      "env.train.total_num_envs=2", "env.train.max_episode_steps=10",
                      "env.eval.max_episode_steps=10", "+env.eval.num_episodes=6",
                      "actor.model.policy_hidden_sizes=[32,32]", "actor.global_batch_size=20",
                      "actor.micro_batch_size=20", "algorithm.update_epochs=1"]
needs_maniskill = pytest.mark.skipif(importlib.util.find_spec("mani_skill") is None,
                                     reason="mani-skill is not installed")


@pytest.fixture(scope="module")
def pushcube_run(tmp_path_factory):
    """maniskill_ppo_mlp_cpu (state normalisation on) trained one step on the local backend with a
    32x32 MLP: 2 train envs, 6 eval episodes of 10 steps on 2 eval envs (3 rounds)."""
    folder = tmp_path_factory.mktemp("pushcube_train")
    raw = _compose("maniskill_ppo_mlp_cpu", PUSHCUBE_OVERRIDES)
    raw = _layout(raw, folder, {"env": 0, "rollout": 1, "actor": 1}, 2, eval_envs=2, stages=1)
    return (raw, *_trained(raw, folder))


@pytest.mark.slow
@needs_maniskill
def test_pushcube_only_eval_gives_the_training_runs_episodes_in_other_layouts(pushcube_run, tmp_path, monkeypatch):
    raw, checkpoint, episodes, metrics = pushcube_run
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the groups' torch thread count differs from the training run's
    assert [e[1] for e in episodes] == list(range(1000, 1006)) and {e[2] for e in episodes} == {"PushCube-v1"}
    assert len({e[4] for e in episodes}) == 6 and all(e[5] == 10 or e[3] for e in episodes)
    for name, placement, accelerators, eval_envs, stages in [
            ("collocated-3envs", {"env,rollout,actor": 0}, 1, 3, 1),     # 2 rounds
            ("disaggregated-2stages", {"env": 0, "rollout": 1, "actor": 2}, 3, 4, 2)]:  # 2 rounds, 2 padding
        summary, again = _only_eval(_layout(raw, tmp_path / name, placement, accelerators, eval_envs=eval_envs,
                                            stages=stages, resume=checkpoint))
        assert again == episodes, name
        assert summary["eval/success_rate"] == metrics["eval/success_rate"], name


# ---- the off-policy recipe's evaluation -----------------------------------------------------------
def test_offpolicy_only_eval_gives_the_training_runs_episodes_in_other_layouts(tmp_path):
    """SAC on the toy task trained one step (sync, local backend), then evaluated from its
    checkpoint collocated with 3 eval envs and with 2 pipeline stages of 2."""
    from rlinf.runners.embodied_offpolicy.recipe import run_offpolicy

    env = {"env_type": "toy", "total_num_envs": 4, "max_episode_steps": 6, "auto_reset": True}
    raw = {"cluster": {}, "rollout": {}, "runner": {"task_type": "embodied", "max_steps": 1, "val_check_interval": 1,
                                                    "save_interval": 1, "experiment_name": "t", "logger": {},
                                                    "plot_curves": False},
           "algorithm": {"loss_type": "embodied_sac", "update_epoch": 2, "replay_buffer": {"capacity": 100,
                                                                                          "min_buffer_size": 4}},
           "env": {"train": {**env, "max_steps_per_rollout_epoch": 3},
                   "eval": {**env, "auto_reset": False, "seed": 7, "num_episodes": 5}},
           "actor": {"model": {"model_type": "sac_mlp", "action_dim": 2, "policy_hidden_sizes": [16, 16]},
                     "global_batch_size": 8}}
    train = _layout(raw, tmp_path / "train", {"env": 0, "rollout,actor": 1}, 2, eval_envs=4, stages=1)
    run_offpolicy(train, print_fn=lambda *_: None)
    episodes = _episodes(tmp_path / "train", 1)
    assert [e[1] for e in episodes] == [7, 8, 9, 10, 11] and len({e[4] for e in episodes}) == 5
    checkpoint = tmp_path / "train" / "t" / "checkpoints" / "global_step_1"
    for name, placement, accelerators, eval_envs, stages in [
            ("collocated-3envs", {"env,rollout,actor": 0}, 1, 3, 1),
            ("2stages", {"env": 0, "rollout,actor": 1}, 2, 4, 2)]:
        summary = run_offpolicy(_layout(raw, tmp_path / name, placement, accelerators, eval_envs=eval_envs,
                                        stages=stages, resume=checkpoint), print_fn=lambda *_: None)
        assert _episodes(tmp_path / name, 1) == episodes, name
        assert summary["eval/success_rate"] == sum(e[3] for e in episodes) / 5


# ---- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("split, key, value, says", [
    ("eval", "num_episodes", 0, "env.eval.num_episodes: must be >= 1"),
    ("eval", "seed", -1, "env.eval.seed: must be >= 0, got -1"),
    ("train", "num_episodes", 8, "env.train.num_episodes: counts evaluation episodes; only env.eval reads it"),
])
def test_bad_eval_keys_are_one_line_naming_the_key_before_any_worker(tmp_path, split, key, value, says):
    from rlinf.runners.embodied.recipe import run_embodied
    from rlinf.utils.typed_config import ConfigError

    raw = _compose("toy_ppo_mlp", [f"runner.output_dir={tmp_path}"])
    raw["env"][split][key] = value
    with pytest.raises(ConfigError) as err:  # raised by the checks before Ray (recipe.prepare)
        run_embodied(raw, print_fn=lambda *_: None)
    assert str(err.value).startswith(says) and "\n" not in str(err.value)
    assert not (tmp_path / "toy-ppo-mlp").exists()  # nothing started
