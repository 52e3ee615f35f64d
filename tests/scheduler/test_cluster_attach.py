"""Which Ray cluster Cluster() attaches to: a live recorded one, never a dead record."""

from __future__ import annotations

import socket

import ray._private.utils

import pytest

from rlinf.scheduler.cluster import _live_local_cluster, _rank_nodes
from rlinf.scheduler.errors import ClusterError


def test_dead_recorded_cluster_is_ignored_and_live_one_is_used(monkeypatch):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        live = f"127.0.0.1:{listener.getsockname()[1]}"
        monkeypatch.setattr(ray._private.utils, "read_ray_address", lambda: live)
        assert _live_local_cluster() == live
    # the listener is closed now: the record outlived its cluster
    monkeypatch.setattr(ray._private.utils, "read_ray_address", lambda: live)
    assert _live_local_cluster() is None
    monkeypatch.setattr(ray._private.utils, "read_ray_address", lambda: None)
    assert _live_local_cluster() is None


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
