"""``runner.rollout_mode: fully_async`` for math under Ray: three steps with per-sample versions and
the timeline, during which the rollout worker is killed mid-stream under ``recover_mode: fault``
(the run restarts from its checkpoint, every step is logged once and trains whole groups). One
run serves both (the suite's 20 minutes)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import ray.cloudpickle

from rlinf.utils.metric_logger import read_metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_generation_worker import tiny_model_with_tokenizer
from test_math_runner_features import base_config, with_dirs

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray

FULLY_ASYNC = {"algorithm": {"max_head_offpolicyness": 1, "loss_type": "decoupled_ppo", "behav_imp_weight_cap": 5.0},
               "rollout": {"max_concurrent_rollouts": 8}}


def test_a_rollout_worker_killed_mid_stream_restarts_from_the_checkpoint(ray_cluster, tmp_path):
    from test_recovery import _kill_after

    from rlinf.runners.math.recipe import run_math

    model = tiny_model_with_tokenizer(tmp_path / "model")
    cfg = with_dirs(base_config(tmp_path, model, {"actor": "0", "rollout": "1"}, 2,
                                runner={"max_steps": 3, "save_interval": 1, "recover_mode": "fault",
                                        "recover_retries": 1, "export_hf": False, "plot_curves": False,
                                        "rollout_mode": "fully_async"}, **FULLY_ASYNC), tmp_path / "a")
    killed: list[int] = []
    lines: list[str] = []
    thread = _kill_after(tmp_path / "a" / "t" / "metrics.jsonl", 1, "RolloutGroup", killed)
    summary = run_math(cfg, print_fn=lambda *a: lines.append(" ".join(map(str, a))))
    thread.join(5)
    assert killed, "the test never killed the rollout worker"
    assert summary["steps"] == 3
    recovered = [line for line in lines if "recover_mode fault" in line]
    assert len(recovered) == 1 and "RolloutGroup[0]" in recovered[0], lines
    rows = read_metrics(str(tmp_path / "a" / "t" / "metrics.jsonl"))
    assert [int(r["step"]) for r in rows] == [1, 2, 3]  # nothing logged twice
    for step, m in enumerate(rows):
        assert m["reward/count"] == 16  # 4 whole groups of 4: no half-sample was trained
        assert 0 <= m["rollout/staleness"] <= m["rollout/staleness_max"] <= min(step, 1)
        assert m["rollout/version_spread"] >= 0 and m["rollout/interrupted_sequences"] >= 0
        assert "actor/behav_imp_weight_mean" in m
    timeline = json.loads((tmp_path / "a" / "t" / "timeline.json").read_text())
    roles = {(e["who"], e["what"]) for e in timeline["events"]}
    assert {("trainer", "update"), ("trainer", "sync"), ("rollout[0]", "generate")} <= roles
    assert all(e["end"] >= e["start"] for e in timeline["events"])
    checkpoints = tmp_path / "a" / "t" / "checkpoints"
    assert sorted(os.listdir(checkpoints)) == [f"global_step_{i}" for i in (1, 2, 3)]
    state = json.loads((checkpoints / "global_step_3" / "trainer_state.json").read_text())["fully_async"]
    # every group admitted and not trained is in the checkpoint, to start again from its prompt
    assert len(state["offered"]) == state["ledger"]["started_total"] - 3 * 4
    assert not set(state["offered"]) & set(state["ledger"]["consumed"])
