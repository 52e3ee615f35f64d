"""``bench/bench_fully_async.py``'s pieces that decide its numbers: the held-out prompts (disjoint
from the train and val files, the shipped val set first) and the shares it reads from a run folder
(checked on a hand-built folder: metrics, engine rounds, timeline)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "tool_agent" / "data"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_fully_async", ROOT / "bench" / "bench_fully_async.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prompts(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_heldout_prompts_are_distinct_new_and_start_with_the_shipped_val_set(bench, tmp_path):
    rows = _prompts(Path(bench.heldout_file(str(tmp_path / "heldout.jsonl"), 600)))
    val, train = _prompts(DATA / "mul_val.jsonl"), _prompts(DATA / "mul_train.jsonl")
    assert len(rows) == 600 and len({r["prompt"] for r in rows}) == 600
    assert rows[:len(val)] == val
    assert not {r["prompt"] for r in rows} & {r["prompt"] for r in train}
    for r in rows:  # the answer is the product of the prompt's operands
        a, b = r["prompt"].split("What is ")[1].split("?")[0].split("*")
        assert r["answer"] == str(int(a) * int(b))


def test_measure_reads_the_shares_of_the_training_loop(bench, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    # two steps of 10 s: step 1 waits 6 s for samples, step 2 waits 2 s; each syncs for 1 s
    steps = [{"step": 1, "time/step": 10.0, "time/update": 2.0, "time/sync": 1.0, "time/after_rollout": 1.0,
              "time/elapsed": 10.0, "update/samples": 64.0, "rollout/staleness": 0.5, "rollout/staleness_max": 1.0,
              "rollout/interrupted_sequences": 3.0},
             {"step": 2, "time/step": 10.0, "time/update": 6.0, "time/sync": 1.0, "time/after_rollout": 1.0,
              "time/elapsed": 20.0, "update/samples": 64.0, "rollout/staleness": 1.5, "rollout/staleness_max": 2.0,
              "rollout/interrupted_sequences": 1.0, "val/accuracy": 0.75, "val/count": 512.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    t0, fit = 1000.0, 1005.0  # the timeline starts 5 s before the training loop
    # the engine ran 4 s before the loop (not counted), 5 s inside it, 3 s of a round across its end
    (run / "bench_rounds.json").write_text(json.dumps({"fit_start": fit, "ranks": [
        [[fit - 4, fit], [fit + 2, fit + 7], [fit + 18, fit + 21]]]}))
    (run / "timeline.json").write_text(json.dumps({"t0": t0, "events": [
        {"who": "rollout[0]", "what": "paused", "start": 6.0, "end": 7.0},
        {"who": "rollout[0]", "what": "paused", "start": 24.0, "end": 27.0},  # 1 s inside the loop
        {"who": "trainer", "what": "update", "start": 8.0, "end": 10.0}]}))
    r = bench.measure({"kind": "tool", "side": "fully_async", "seed": 0, "run_dir": str(run)})
    assert r["trained"] == 128 and r["wall_s"] == 20.0 and r["samples_per_s"] == pytest.approx(6.4)
    assert r["trainer_wait_samples"] == pytest.approx((6 + 2) / 20)
    assert r["trainer_sync"] == pytest.approx(2 / 20)
    assert r["trainer_wait"] == pytest.approx(10 / 20)
    assert r["rollout_not_generating"] == pytest.approx(1 - 7 / 20)
    assert r["rollout_paused"] == pytest.approx(2 / 20)
    assert (r["staleness"], r["staleness_max"], r["interrupted"]) == (1.0, 2.0, 4.0)
    assert (r["heldout"], r["heldout_n"], r["heldout_correct"]) == (0.75, 512, 384)
