"""Metric logging: JSONL always, tensorboard events readable back, wandb / swanlab offline."""

from __future__ import annotations

import math
import os
import time

import pytest

from rlinf.utils.metric_logger import MetricLogger, read_metrics


def test_jsonl_and_tensorboard_events_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricLogger(str(tmp_path), "p", "e", ["tensorboard"])
    for step in range(3):
        log.log({"reward/mean": 0.5 * step, "val/accuracy": 0.1}, step=step)
    log.close()
    assert [r["reward/mean"] for r in read_metrics(str(tmp_path / "metrics.jsonl"))] == [0.0, 0.5, 1.0]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward/mean")] == [(0, 0.0), (1, 0.5), (2, 1.0)]


def _wait_for_the_next_second():
    now = time.time()
    time.sleep(math.floor(now) + 1.0 - now + 0.01)


def test_resume_logs_every_step_once_in_jsonl_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricLogger(str(tmp_path), "p", "e", ["tensorboard"])
    for step in range(13):  # checkpoint at 10, crash after 12
        log.log({"x": float(step)}, step=step)
    log.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 13, "x"')  # torn by the crash
    # Tensorboard orders event files by name: "events.out.tfevents.<second>.<host>.<pid>.<uid>".
    # Within one second and one process the uid decides, and it compares as text ("10" < "9"),
    # so a resume that starts within the first writer's second can sort first. A real resume is
    # a later process in a later second; wait for that second here.
    _wait_for_the_next_second()
    log = MetricLogger(str(tmp_path), "p", "e", ["tensorboard"], resume_step=10)
    for step in range(11, 15):
        log.log({"x": 100.0 + step}, step=step)
    log.close()
    records = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert [r["step"] for r in records] == list(range(15))
    assert records[10]["x"] == 10.0 and records[11]["x"] == 111.0
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("x")
    assert [e.step for e in scalars] == list(range(15))
    assert scalars[11].value == 111.0


def test_a_fresh_run_starts_the_file_afresh(tmp_path):
    for start in (0, 2):
        log = MetricLogger(str(tmp_path), "p", "e", [])
        log.log({"x": float(start)}, step=start)
        log.close()
    assert [r["step"] for r in read_metrics(str(tmp_path / "metrics.jsonl"))] == [2]


@pytest.mark.parametrize("backend", ["wandb", "swanlab"])
def test_offline_trackers_write_locally(tmp_path, monkeypatch, backend):
    pytest.importorskip(backend)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    log = MetricLogger(str(tmp_path), "rlinf", "offline-test", [backend])
    log.log({"reward/mean": 1.0}, step=1)
    log.close()
    assert backend in os.listdir(tmp_path) or any(backend in name for name in os.listdir(tmp_path))
