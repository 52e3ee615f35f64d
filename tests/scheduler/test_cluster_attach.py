"""Which Ray cluster Cluster() uses: a named one (argument, RAY_ADDRESS) or a private local one."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from rlinf.scheduler.cluster import _rank_nodes, ray_target
from rlinf.scheduler.errors import ClusterError


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
