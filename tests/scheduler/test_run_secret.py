"""The run's secret: made by the cluster, handed to every worker before its ``__init__``, never printed."""

from __future__ import annotations

import os
import pickle
import sys

import pytest
import ray.cloudpickle

from rlinf.scheduler import Cluster, Worker, WorkerGroup, plan_placement
from rlinf.scheduler.config import ClusterConfig
from rlinf.scheduler.secret import RunSecret

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Keeper(Worker):
    """Reads the secret in ``__init__`` (as the web env worker does) and with keyword arguments."""

    def __init__(self, base, *, extra=0, **more):
        self.at_init = self.run_secret.token("test")
        self.value = base + extra + sum(more.values())

    def report(self):
        return self.at_init, self.run_secret.token("test"), self.value, repr(self.run_secret)


class Child(Keeper):
    """Inherits the wrapped ``__init__``; its own one calls super() without the secret."""

    def __init__(self, base):
        super().__init__(base, extra=10)


class Bare(Worker):
    def token(self):
        return self.run_secret.token("test")


def test_secret_hides_its_key_and_derives_distinct_tokens():
    s = RunSecret.new()
    assert "hidden" in repr(s) and "hidden" in str(s) and f"{s}" == repr(s)
    key = s._key
    assert key.hex() not in repr(s) and key.hex() not in s.token("web")
    assert s.token("web") != s.token("site") != RunSecret.new().token("web")
    assert pickle.loads(pickle.dumps(s)) == s and s != RunSecret.new()
    with pytest.raises(ValueError, match="16 random bytes"):
        RunSecret(b"short")


def test_a_worker_made_outside_a_group_has_no_secret_and_says_so():
    with pytest.raises(RuntimeError, match="not started by a WorkerGroup"):
        Bare().token()


def test_local_workers_get_the_clusters_secret_before_init():
    saved = dict(os.environ)
    cfg = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 3,
                                   "component_placement": {"a": 0, "b": 1, "c": 2}})
    cluster = Cluster.from_config(cfg)
    try:
        plan = cfg.plan(cluster.shape)
        want = cluster.secret.token("test")
        a = WorkerGroup.launch(cluster, Keeper, plan.component("a"), args=(1,), kwargs={"extra": 2, "z": 3})
        b = WorkerGroup.launch(cluster, Child, plan.component("b"), args=(1,))
        c = WorkerGroup.launch(cluster, Bare, plan.component("c"))
        assert a.report().wait(timeout=30) == [(want, want, 6, "RunSecret(<hidden>)")]
        assert b.report().wait(timeout=30)[0][:3] == (want, want, 11)
        assert c.token().wait(timeout=30) == [want]
    finally:
        for group in cluster.live_groups():
            group.shutdown()
        os.environ.clear()
        os.environ.update(saved)
        from rlinf.scheduler.backend import forget_cluster

        forget_cluster(cluster)  # new channels of this process are no longer its


@pytest.mark.ray
def test_ray_workers_on_two_nodes_get_the_same_secret_before_init(ray_cluster):
    plan = plan_placement({"keep": "0:0,8:1", "bare": "1"}, ray_cluster.shape)
    keep = WorkerGroup.launch(ray_cluster, Keeper, plan.component("keep"), args=(1,), kwargs={"extra": 2})
    bare = WorkerGroup.launch(ray_cluster, Bare, plan.component("bare"))
    try:
        want = ray_cluster.secret.token("test")
        assert [r[:3] for r in keep.report().wait(timeout=60)] == [(want, want, 3)] * 2
        assert bare.token().wait(timeout=60) == [want]
    finally:
        keep.shutdown()
        bare.shutdown()
