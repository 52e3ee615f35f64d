"""The web demo's control arm: ``shuffle_rewards`` permutes each update's rewards with their
verdicts (the credit is destroyed, the reward distribution kept) and restores the runner after."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

from rlinf.runners.web_agent.loop import WebAgentRunner

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "bench_web_demo.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_web_demo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shuffled_arm_permutes_rewards_with_their_verdicts_and_restores_the_update(monkeypatch):
    seen = []

    def recording_update(self, trajectories, iteration):
        seen.append([(t["task_id"], t["reward"], t["judge"]["success"]) for t in trajectories])

    monkeypatch.setattr(WebAgentRunner, "update", recording_update)
    undo = _bench().shuffle_rewards(random.Random(0))
    trajectories = [{"task_id": f"t{i}", "reward": float(i % 2), "judge": {"success": bool(i % 2), "i": i}}
                    for i in range(12)]
    WebAgentRunner.update(None, trajectories, 0)
    WebAgentRunner.update(None, [dict(t) for t in trajectories], 1)
    first = seen[0]
    assert [task for task, _, _ in first] == [f"t{i}" for i in range(12)]  # trajectories stay in place
    assert sorted(r for _, r, _ in first) == sorted(float(i % 2) for i in range(12))  # same rewards
    assert [r for _, r, _ in first] != [float(i % 2) for i in range(12)]  # but moved
    assert all(r == float(ok) for _, r, ok in first)  # each reward travels with its verdict
    assert len(seen) == 2
    undo()
    assert WebAgentRunner.update is recording_update
