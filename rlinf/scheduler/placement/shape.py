"""Reading the cluster shape (nodes, accelerators, node groups) from the ``cluster:`` config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlinf.scheduler.placement.grammar import PlacementError, parse_rank_list
from rlinf.scheduler.placement.plan import ClusterShape, NodeGroup
from rlinf.scheduler.placement.text import rank_range

#: Accelerators per node when neither the config nor the caller says.
DEFAULT_ACCELERATORS_PER_NODE = 8
#: Nodes when neither the config nor the caller says.
DEFAULT_NUM_NODES = 1

_GROUP_KEYS = ("label", "node_ranks", "accelerators_per_node")


def _int_setting(value: object, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlacementError(key, repr(value), f"{value!r} is not an int", f"use an int >= {minimum}")
    if value < minimum:
        raise PlacementError(key, repr(value), f"{value!r} is too small", f"use an int >= {minimum}")
    return value


def _setting(
    cfg: Mapping, name: str, override: int | None, default: int, minimum: int, names: Mapping[str, str]
) -> int:
    if override is not None:
        return _int_setting(override, names.get(name, f"{name} (override)"), minimum)
    value = cfg.get(name)
    if value is None:
        return default
    return _int_setting(value, f"cluster.{name}", minimum)


def _node_ranks(
    value: object, key: str, num_nodes: int, owner: dict[int, str], label: str
) -> tuple[int, ...]:
    allowed = f"valid node ranks are {rank_range(num_nodes)} (num_nodes = {num_nodes})"
    ranks: list[int] = []
    seen: dict[int, str] = {}
    for part in parse_rank_list(value, key):
        nodes = part.resources.resolve(num_nodes, key=key, token=part.text, allowed=allowed, what="node")
        for node in nodes:
            where = f"listed by {seen[node]!r}" if node in seen else owner.get(node)
            if where is not None:
                rule = "list each node once" if node in seen else "a node belongs to at most one node group"
                raise PlacementError(key, part.text, f"node {node} in {part.text!r} is already {where}", rule)
            seen[node] = part.text
            ranks.append(node)
    for node in ranks:
        owner[node] = f"in node group {label!r}"
    return tuple(sorted(ranks))


def _node_groups(raw: object, num_nodes: int, default_apn: int) -> tuple[NodeGroup, ...]:
    if raw is None:
        return ()
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
        raise PlacementError("cluster.node_groups", repr(raw), f"{raw!r} is not a list",
                             "node_groups is a list of {label, node_ranks, accelerators_per_node}")
    groups: list[NodeGroup] = []
    owner: dict[int, str] = {}
    labels: set[str] = set()
    for i, entry in enumerate(raw):
        key = f"cluster.node_groups[{i}]"
        allowed = "an entry has 'label', 'node_ranks' and optionally 'accelerators_per_node'"
        if not isinstance(entry, Mapping):
            raise PlacementError(key, repr(entry), f"{entry!r} is not a mapping", allowed)
        for k in entry:
            if k not in _GROUP_KEYS:
                raise PlacementError(key, str(k), f"unknown key {k!r}", allowed)
        for k in _GROUP_KEYS[:2]:
            if k not in entry:
                raise PlacementError(key, k, f"missing key {k!r}", allowed)
        label = entry["label"]
        if not isinstance(label, str) or not label.strip():
            raise PlacementError(f"{key}.label", repr(label), f"{label!r} is not a label",
                                 "use a non-empty string")
        if label in labels:
            raise PlacementError(f"{key}.label", label, f"label {label!r} is used twice", "labels are unique")
        labels.add(label)
        apn_raw = entry.get("accelerators_per_node")
        apn = default_apn if apn_raw is None else _int_setting(apn_raw, f"{key}.accelerators_per_node", 0)
        nodes = _node_ranks(entry["node_ranks"], f"{key}.node_ranks", num_nodes, owner, label)
        groups.append(NodeGroup(label=label, node_ranks=nodes, accelerators_per_node=apn))
    return tuple(groups)


def parse_cluster_shape(
    cluster_cfg: Mapping,
    *,
    num_nodes: int | None = None,
    accelerators_per_node: int | None = None,
    override_names: Mapping[str, str] | None = None,
) -> ClusterShape:
    """Read ``num_nodes``, ``accelerators_per_node`` and ``node_groups`` from the ``cluster:`` mapping.

    Other keys (``component_placement`` and any others) are ignored. A setting that is missing or
    ``null`` takes its default (1 node, 8 accelerators per node).

    Args:
        cluster_cfg: the ``cluster:`` mapping of the config.
        num_nodes: overrides ``cluster.num_nodes`` when given.
        accelerators_per_node: overrides ``cluster.accelerators_per_node`` (not a group's own count).
        override_names: how errors name an invalid override, by setting (e.g. ``{"num_nodes":
            "--nodes"}`` in a CLI); default ``"<setting> (override)"``.

    Returns:
        The cluster shape.

    Raises:
        PlacementError: bad types, node ranks out of range, a node in two groups, duplicate labels.

    >>> shape = parse_cluster_shape({"num_nodes": 4, "accelerators_per_node": 8,
    ...     "node_groups": [{"label": "sim", "node_ranks": "2-3", "accelerators_per_node": 0}]})
    >>> shape.node_groups[0].node_ranks, shape.accelerators_on(1), shape.accelerators_on(3)
    ((2, 3), 8, 0)
    """
    if not isinstance(cluster_cfg, Mapping):
        raise PlacementError("cluster", repr(cluster_cfg), f"{cluster_cfg!r} is not a mapping",
                             "cluster is a mapping with num_nodes, accelerators_per_node, node_groups")
    names = override_names or {}
    nodes = _setting(cluster_cfg, "num_nodes", num_nodes, DEFAULT_NUM_NODES, 1, names)
    apn = _setting(cluster_cfg, "accelerators_per_node", accelerators_per_node,
                   DEFAULT_ACCELERATORS_PER_NODE, 0, names)
    groups = _node_groups(cluster_cfg.get("node_groups"), nodes, apn)
    return ClusterShape(num_nodes=nodes, accelerators_per_node=apn, node_groups=groups)
