"""A private local cluster bounds the task events its GCS keeps (bench/bench_soak.py: gcs_server's RSS
grew ~3.3 KB per actor call, +31 % over 300 math steps, with Ray's default bound of 100 000)."""

from __future__ import annotations

import os

import ray

from rlinf.scheduler.cluster import GCS_TASK_EVENTS_KEPT, _init_ray

KEY = "RAY_task_events_max_num_task_in_gcs"


def _started_with(monkeypatch, address=None) -> tuple[str | None, dict]:
    """The bound in the environment when ``ray.init`` ran (what the GCS it starts inherits)."""
    seen = {}

    def fake_init(**kwargs):
        seen.update(kwargs)
        seen["bound"] = os.environ.get(KEY)

    monkeypatch.setattr(ray, "init", fake_init)
    _init_ray(address, "soak-test")
    return seen.pop("bound"), seen


def test_a_private_cluster_keeps_a_bounded_number_of_task_events(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(KEY, raising=False)
    bound, kwargs = _started_with(monkeypatch)
    assert kwargs["address"] == "local"
    assert bound == str(GCS_TASK_EVENTS_KEPT) == "10000"


def test_the_users_bound_wins_and_an_attached_cluster_is_left_alone(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv(KEY, "500")
    assert _started_with(monkeypatch)[0] == "500"
    monkeypatch.delenv(KEY)
    bound, kwargs = _started_with(monkeypatch, address="10.0.0.5:6379")
    assert kwargs["address"] == "10.0.0.5:6379" and bound is None  # its owner configured its GCS
