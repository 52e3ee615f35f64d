"""LLM PPO with a value model through ``run_math``: collocated (critic on the actor's slots) with
critic warm-up steps, under Ray; disaggregated (critic on its own slot) with checkpoint -> resume,
on the local backend."""

from __future__ import annotations

import sys

import pytest
import ray.cloudpickle

from rlinf.utils.metric_logger import read_metrics

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "workers"))
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from test_generation_worker import tiny_model_with_tokenizer
from test_math_runner_features import base_config, with_dirs

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

PPO = {"algorithm": {"adv_type": "gae", "gamma": 1.0, "lam": 0.95, "overlong_buffer_len": 0},
       "critic": {"use_critic_model": True, "lr": 3e-3, "value_clip": None, "warmup_steps": 2}}


@pytest.mark.ray
def test_ppo_collocated_warms_up_the_critic_and_the_value_loss_falls(ray_cluster, tmp_path):
    from rlinf.runners.math.recipe import run_math

    model = tiny_model_with_tokenizer(tmp_path / "model")
    cfg = base_config(tmp_path, model, {"actor,rollout,reward": "0-1"}, 2, runner={"max_steps": 8, "max_epochs": 2},
                      **PPO)
    summary = run_math(with_dirs(cfg, tmp_path / "a"), print_fn=lambda *_: None)
    assert summary["steps"] == 8
    rows = {int(m["step"]): m for m in read_metrics(str(tmp_path / "a" / "t" / "metrics.jsonl"))}
    steps = sorted(s for s in rows if s >= 1)
    assert steps == list(range(1, 9))
    for s in (1, 2):  # warm-up: the value model trains, the policy does not
        assert "critic/loss" in rows[s] and "actor/policy_loss" not in rows[s]
    for s in range(3, 9):
        assert "critic/loss" in rows[s] and "actor/policy_loss" in rows[s]
    # the zero-initialised head starts at values 0; the fit improves as it trains
    assert abs(rows[1]["critic/values_mean"]) < 1e-6
    first = rows[1]["critic/value_mse"]
    last = min(rows[s]["critic/value_mse"] for s in (7, 8))
    assert last < 0.5 * first, (first, last)


@pytest.mark.slow
def test_ppo_disaggregated_resume_continues_the_critic(tmp_path):
    """On the local backend (one process per group here, so the groups run in this process; two
    Ray launches of four groups cost ~40 s here). The critic as a Ray group of its own processes:
    the collocated run above."""
    from rlinf.runners.math.recipe import run_math

    model = tiny_model_with_tokenizer(tmp_path / "model")
    placement = {"actor": 0, "critic": 1, "rollout,reward": 2}
    cfg = base_config(tmp_path, model, placement, 3, runner={"save_interval": 2}, **PPO)
    cfg["cluster"]["backend"] = "local"
    run_math(with_dirs(cfg, tmp_path / "a"), print_fn=lambda *_: None)
    full = {int(m["step"]): m for m in read_metrics(str(tmp_path / "a" / "t" / "metrics.jsonl"))}
    resumed = with_dirs(cfg, tmp_path / "b")
    resumed["runner"]["resume_dir"] = str(tmp_path / "a" / "t" / "checkpoints" / "global_step_2")
    run_math(resumed, print_fn=lambda *_: None)
    again = {int(m["step"]): m for m in read_metrics(str(tmp_path / "b" / "t" / "metrics.jsonl"))}
    assert sorted(again) == [3]
    for key in ("critic/loss", "critic/grad_norm", "actor/policy_loss", "reward/mean"):
        assert again[3][key] == pytest.approx(full[3][key], rel=1e-4, abs=1e-6), key
