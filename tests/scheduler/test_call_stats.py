"""Per-method call statistics of a worker group (issue 46): wall and CPU seconds inside the workers,
per rank, read and reset by the driver; on the local backend a call's CPU is its own thread's, so
two groups working at once each count only their own work. (The Ray backend's process CPU time:
tests/scheduler/test_worker_group.py.)"""

from __future__ import annotations

import os
import time

import pytest

from rlinf.scheduler import Cluster, Worker, WorkerGroup
from rlinf.scheduler.config import ClusterConfig


class Busy(Worker):
    def spin(self, seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        return seconds

    def sleep(self, seconds):
        time.sleep(seconds)
        return seconds

    def boom(self):
        raise ValueError("no")


@pytest.fixture
def groups():
    saved = dict(os.environ)
    cfg = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 2,
                                   "component_placement": {"a": 0, "b": 1}})
    cluster = Cluster.from_config(cfg)
    plan = cfg.plan(cluster.shape)
    a = WorkerGroup.launch(cluster, Busy, plan.component("a"))
    b = WorkerGroup.launch(cluster, Busy, plan.component("b"))
    yield a, b
    for group in cluster.live_groups():
        group.shutdown()
    os.environ.clear()
    os.environ.update(saved)
    from rlinf.scheduler.backend import forget_cluster

    forget_cluster()


def test_local_calls_count_their_threads_cpu_wall_and_calls_per_method(groups):
    a, b = groups
    assert a.call_stats.snapshot() == {}  # the start-up pings are the scheduler's own
    sleeping = a.sleep(0.2)
    spinning = b.spin(0.2)  # at the same time, on another thread of this process
    sleeping.wait(timeout=30)
    spinning.wait(timeout=30)
    a.spin(0.05).wait(timeout=30)
    stats = a.call_stats.snapshot()
    assert sorted(stats) == ["sleep", "spin"]
    assert stats["sleep"].calls == 1 and stats["sleep"].wall_s >= 0.2
    assert stats["sleep"].cpu_s < 0.05  # b's spinning is not a's
    assert stats["spin"].wall_s >= 0.05 and 0.02 <= stats["spin"].cpu_s <= stats["spin"].wall_s + 0.01
    assert b.call_stats.snapshot()["spin"].cpu_s >= 0.1
    assert sleeping.cpu_time[0] == stats["sleep"].cpu_s


def test_the_driver_resets_and_takes_and_failed_calls_are_not_counted(groups):
    a, _ = groups
    for _ in range(3):
        a.sleep(0.0).wait(timeout=30)
    with pytest.raises(Exception, match="no"):
        a.boom().wait(timeout=30)
    taken = a.call_stats.take()
    assert list(taken) == ["sleep"] and taken["sleep"].calls == 3 and taken["sleep"].ranks[0].calls == 3
    assert a.call_stats.snapshot() == {}
    a.sleep(0.0).wait(timeout=30)
    a.call_stats.reset()
    assert a.call_stats.snapshot() == {}
