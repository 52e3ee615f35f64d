"""Which Ray cluster Cluster() uses: a named one (argument, RAY_ADDRESS) or a private local one."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from rlinf.scheduler import cluster as cluster_module
from rlinf.scheduler.cluster import Cluster, _init_ray, _rank_nodes, check_cluster_before_start, ray_target
from rlinf.scheduler.config import ClusterConfig
from rlinf.scheduler.errors import ClusterError
from rlinf.utils.typed_config import ConfigError


def test_a_run_joins_only_a_named_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_target(None) == ("local", "default")  # never whatever runs on the machine
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert ray_target(None) == ("10.0.0.5:6379", "RAY_ADDRESS")
    assert ray_target("10.0.0.7:6379") == ("10.0.0.7:6379", "the address argument")
    monkeypatch.setenv("RAY_ADDRESS", "  ")
    assert ray_target(None) == ("local", "default")


def test_a_recorded_ray_start_cluster_is_not_joined():
    """Even with a live cluster recorded by `ray start` on this machine, the default starts a
    private one (checked in a fresh interpreter: this one already runs the test cluster)."""
    import subprocess
    import sys

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        live = f"127.0.0.1:{listener.getsockname()[1]}"
        code = (f"import ray._private.utils as u; u.read_ray_address = lambda *a, **k: {live!r}\n"
                "from rlinf.scheduler.cluster import ray_target; print(ray_target(None))")
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             timeout=120, cwd=str(Path(__file__).resolve().parents[2]))
    assert out.stdout.strip() == "('local', 'default')", out.stderr


def _node(node_id, ip, gpus=0, head=False, rank=None):
    resources = {"CPU": 2.0, **({"GPU": float(gpus)} if gpus else {})}
    if head:
        resources["node:__internal_head__"] = 1.0
    labels = {} if rank is None else {"rlinf.io/node-rank": str(rank)}
    return {"NodeID": node_id, "NodeManagerAddress": ip, "Resources": resources, "Labels": labels}


def test_node_ranks_follow_labels_else_head_then_ip():
    raw = [_node("c", "10.0.0.9", 8), _node("a", "10.0.0.10", 8, head=True), _node("b", "10.0.0.2", 8)]
    assert [n.node_id for n in _rank_nodes(raw, None)] == ["a", "b", "c"]  # head, then IP order
    labelled = [_node("c", "10.0.0.9", 8, rank=0), _node("a", "10.0.0.10", 8, head=True, rank=2),
                _node("b", "10.0.0.2", 8, rank=1)]
    assert [n.node_id for n in _rank_nodes(labelled, None)] == ["c", "b", "a"]


def test_cpu_nodes_get_logical_slots():
    nodes = _rank_nodes([_node("a", "10.0.0.1", head=True), _node("g", "10.0.0.2", gpus=4)], 3)
    assert [(n.num_accelerators, n.has_gpus) for n in nodes] == [(3, False), (4, True)]
    assert _rank_nodes([_node("a", "10.0.0.1", head=True)], None)[0].num_accelerators == 1


@pytest.mark.parametrize("labels, message", [
    (["0", "5"], r"labels must be 0-1, each once; got \[0, 5\]"),
    (["0", "0"], r"labels must be 0-1, each once; got \[0, 0\]"),
    (["0", "one"], r"rlinf.io/node-rank='one' is not a node rank; use 0-1"),
])
def test_bad_node_rank_labels_are_errors(labels, message):
    raw = [_node(f"n{i}", f"10.0.0.{i}", 8, head=i == 0) for i in range(2)]
    for node, label in zip(raw, labels):
        node["Labels"]["rlinf.io/node-rank"] = label
    with pytest.raises(ClusterError, match=message):
        _rank_nodes(raw, None)


TWO_NODES = {"num_nodes": 2, "accelerators_per_node": 1, "component_placement": {"a": "all"}}


def test_several_nodes_of_an_unauthenticated_cluster_are_refused_before_ray_starts(monkeypatch):
    import ray

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh driver
    monkeypatch.setattr(cluster_module, "_init_ray", lambda *a: pytest.fail("Ray was started"))
    cfg = ClusterConfig.from_dict(TWO_NODES)
    refusal = (r"^cluster.allow_unauthenticated_ray: false, but the run would use 2 nodes of the Ray cluster at "
               r"127.0.0.1:9 \(from RAY_ADDRESS\), attached without Ray's token authentication \(RAY_AUTH_MODE "
               r"is not 'token' here\).*set cluster.allow_unauthenticated_ray: true on a network only you can reach$")
    with pytest.raises(ConfigError, match=refusal):
        check_cluster_before_start(cfg)  # the entry points' check, before Ray
    with pytest.raises(ClusterError, match=refusal):
        Cluster.from_config(cfg)
    allowed = ClusterConfig.from_dict({**TWO_NODES, "allow_unauthenticated_ray": True})
    check_cluster_before_start(allowed)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # the run joins with Ray's token: nothing to refuse
    check_cluster_before_start(cfg)


def test_the_key_is_refused_where_it_cannot_matter():
    for where in ({"num_nodes": 1}, {"num_nodes": 1, "backend": "local"}):
        with pytest.raises(ConfigError, match=r"^cluster.allow_unauthenticated_ray: true has no effect here"):
            ClusterConfig.from_dict({**TWO_NODES, **where, "allow_unauthenticated_ray": True})


def test_an_unauthenticated_attach_says_so_in_its_one_line_origin(monkeypatch):
    import ray

    joined = []
    monkeypatch.setattr(ray, "init", lambda **kwargs: joined.append(kwargs["address"]))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert _init_ray("10.0.0.5:6379", "ns") == (
        "Ray: attached to the cluster at 10.0.0.5:6379 (from the address argument) WITHOUT authentication "
        "(RAY_AUTH_MODE is not 'token'): anyone who reaches its ports can run code in it")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert _init_ray("10.0.0.5:6379", "ns") == \
        "Ray: attached to the cluster at 10.0.0.5:6379 (from the address argument)"
    assert joined == ["10.0.0.5:6379"] * 2


@pytest.mark.ray
def test_the_test_cluster_is_attached_without_authentication_and_says_so(ray_cluster):
    assert ray_cluster.origin.startswith("Ray: attached to the cluster at ")
    assert "WITHOUT authentication (RAY_AUTH_MODE is not 'token')" in ray_cluster.origin
    assert "\n" not in ray_cluster.origin and ray_cluster.shape.num_nodes == 2
