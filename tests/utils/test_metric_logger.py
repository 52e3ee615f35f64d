"""Metric logging: JSONL always, tensorboard events readable back, wandb / swanlab offline."""

from __future__ import annotations

import os

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


def test_append_keeps_earlier_lines(tmp_path):
    for start in (0, 2):
        log = MetricLogger(str(tmp_path), "p", "e", [], append=start > 0)
        log.log({"x": float(start)}, step=start)
        log.close()
    assert [r["step"] for r in read_metrics(str(tmp_path / "metrics.jsonl"))] == [0, 2]


@pytest.mark.parametrize("backend", ["wandb", "swanlab"])
def test_offline_trackers_write_locally(tmp_path, monkeypatch, backend):
    pytest.importorskip(backend)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    log = MetricLogger(str(tmp_path), "rlinf", "offline-test", [backend])
    log.log({"reward/mean": 1.0}, step=1)
    log.close()
    assert backend in os.listdir(tmp_path) or any(backend in name for name in os.listdir(tmp_path))
