"""A 2-step PPO run on Meta-World reach-v3 through the embodied recipe (Ray, env worker stepping its
environments itself, MLP actor-critic), and its bad task name refused before Ray."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import ray.cloudpickle

from rlinf.utils.metric_logger import read_metrics
from rlinf.utils.typed_config import ConfigError

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = [pytest.mark.skipif(importlib.util.find_spec("metaworld") is None, reason="metaworld is not installed")]


def reach_config(tmp_path, task: str = "reach-v3") -> dict:
    env = {"env_type": "metaworld", "total_num_envs": 2, "max_episode_steps": 10, "auto_reset": True,
           "sim_in_worker": True, "reward_coef": 0.1, "init_params": {"id": task}}
    return {
        "cluster": {"num_nodes": 1, "accelerators_per_node": 2,
                    "component_placement": {"env": "0", "rollout": "1", "actor": "1"}},
        "runner": {"task_type": "embodied", "max_steps": 2, "val_check_interval": 2, "save_interval": -1,
                   "output_dir": str(tmp_path / "out"), "experiment_name": "mw",
                   "logger": {"log_path": str(tmp_path / "out" / "mw")}},
        "algorithm": {"adv_type": "gae", "gamma": 0.95, "lam": 0.95, "update_epochs": 2, "normalize_advantages": True},
        "env": {"train": env, "eval": {**env, "auto_reset": False}},
        "rollout": {"pipeline_stage_num": 1},
        "actor": {"model": {"model_type": "mlp", "action_dim": 4, "num_action_chunks": 1, "add_value_head": True},
                  "micro_batch_size": 10, "global_batch_size": 20, "optim": {"lr": 1e-3}},
        "critic": {"use_critic_model": True},
    }


def test_ppo_on_metaworld_reach_runs_two_steps(tmp_path):
    """On the local backend (the groups in this process; the env worker's simulators are the same
    as under Ray, which the other embodied runs cover)."""
    from rlinf.runners.embodied.recipe import run_embodied

    cfg = reach_config(tmp_path)
    cfg["cluster"]["backend"] = "local"
    summary = run_embodied(cfg, print_fn=lambda *_: None)
    assert summary["steps"] == 2 and 0.0 <= summary["val/last_success_rate"] <= 1.0
    metrics = {int(m["step"]): m for m in read_metrics(str(tmp_path / "out" / "mw" / "metrics.jsonl"))}
    assert sorted(metrics) == [0, 1, 2]
    step = metrics[1]
    assert step["env/episodes"] == 2  # 2 envs x one 10-step episode
    assert step["actor/grad_norm"] > 0 and "actor/value_loss" in step
    assert 0.0 < step["env/episode_return"] < 10.0  # 10 steps of a 0..10 reward scaled by 0.1


def test_unknown_task_is_refused_before_ray(tmp_path):
    from rlinf.runners.embodied.preflight import prepare_embodied

    with pytest.raises(ConfigError, match="env.train.init_params.id: 'reach-v4' is not a Meta-World v3 task; "
                                          "did you mean reach-v3"):
        prepare_embodied(reach_config(tmp_path, task="reach-v4"))
