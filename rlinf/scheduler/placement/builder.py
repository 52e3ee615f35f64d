"""Building a :class:`PlacementPlan` from ``cluster.component_placement`` and a cluster shape."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from rlinf.scheduler.placement.grammar import PlacementError, assign_processes, parse_placement
from rlinf.scheduler.placement.plan import (
    ClusterShape,
    ComponentPlacement,
    Mode,
    NodeGroup,
    PlacementPlan,
    ProcessPlacement,
)
from rlinf.scheduler.placement.text import describe_nodes, format_ranks, rank_range

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VALUE_KEYS = ("node_group", "placement")


def config_key(prefix: str, raw_key: object) -> str:
    """The config key of a component entry as named in errors.

    >>> config_key("cluster.component_placement", "actor")
    'cluster.component_placement.actor'
    >>> config_key("cluster.component_placement", "actor,rollout")
    "cluster.component_placement['actor,rollout']"
    """
    if isinstance(raw_key, str) and _NAME.fullmatch(raw_key):
        return f"{prefix}.{raw_key}"
    return f"{prefix}[{raw_key!r}]"


@dataclass(frozen=True)
class _Space:
    """The ranks a placement value counts in: rank ``i`` is ``slots[i] = (node, local id or None)``."""

    slots: list[tuple[int, int | None]]
    allowed: str
    what: str
    label: str | None


class _Layout:
    """Per-node accelerator counts and global rank offsets of a cluster, computed once."""

    def __init__(self, cluster: ClusterShape) -> None:
        self.cluster = cluster
        self.groups: dict[str, NodeGroup] = {g.label: g for g in cluster.node_groups}
        for group in cluster.node_groups:
            for node in group.node_ranks:
                if not 0 <= node < cluster.num_nodes:
                    raise PlacementError(
                        "cluster.node_groups", str(node), f"node group {group.label!r} has node {node}",
                        f"node ranks are {rank_range(cluster.num_nodes)}",
                    )
        self.counts = cluster.accelerator_counts()
        self.offsets = [0] * cluster.num_nodes
        total = 0
        for node, count in enumerate(self.counts):
            self.offsets[node] = total
            total += count
        self._spaces: dict[str | None, _Space] = {}

    def space(self, label: str | None, key: str) -> _Space:
        """The rank space of node group ``label`` (``None``: all accelerators of the cluster)."""
        if label in self._spaces:
            return self._spaces[label]
        if label is None:
            slots: list[tuple[int, int | None]] = [
                (node, a) for node, count in enumerate(self.counts) for a in range(count)
            ]
            desc = describe_nodes(self.counts)
            if slots:
                allowed = f"valid accelerator ranks are {rank_range(len(slots))} ({desc})"
            else:
                allowed = f"the cluster has no accelerators ({desc}); place on a CPU-only node group"
            space = _Space(slots, allowed, "accelerator rank", None)
        elif label not in self.groups:
            known = ", ".join(self.groups)
            allowed = (f"known node groups: {known}" if known
                       else "no node groups are declared in cluster.node_groups")
            raise PlacementError(key, label, f"unknown node group {label!r}", allowed)
        else:
            group = self.groups[label]
            apn = group.accelerators_per_node
            if apn == 0:
                slots = [(node, None) for node in group.node_ranks]
                noun = "node" if len(slots) == 1 else "nodes"
                allowed = (f"valid ranks of CPU-only node group {label!r} are {rank_range(len(slots))} "
                           f"(one per node; {len(slots)} {noun})")
                space = _Space(slots, allowed, "node rank", label)
            else:
                slots = [(node, a) for node in group.node_ranks for a in range(apn)]
                allowed = (f"valid accelerator ranks of node group {label!r} are "
                           f"{rank_range(len(slots))} ({describe_nodes([apn] * len(group.node_ranks))})")
                space = _Space(slots, allowed, "accelerator rank", label)
        self._spaces[label] = space
        return space


def _split_names(raw_key: object, key: str) -> list[str]:
    if not isinstance(raw_key, str):
        raise PlacementError(key, repr(raw_key), f"component name {raw_key!r} is not a string",
                             "names are identifiers like 'actor' or 'actor,rollout'")
    names = [name.strip() for name in raw_key.split(",")]
    for name in names:
        if not _NAME.fullmatch(name):
            raise PlacementError(key, name, f"{name!r} is not a valid component name",
                                 "names match [A-Za-z_][A-Za-z0-9_]*, joined by commas")
    return names


def _unpack_value(value: object, key: str) -> tuple[str | None, object, str, str]:
    """``(node group label, placement value, key of the placement, key of the group)``."""
    if not isinstance(value, Mapping):
        return None, value, key, key
    allowed = "a mapping value has exactly the keys 'node_group' and 'placement'"
    for k in value:
        if k not in _VALUE_KEYS:
            raise PlacementError(key, str(k), f"unknown key {k!r} in the placement mapping", allowed)
    for k in _VALUE_KEYS:
        if k not in value:
            raise PlacementError(key, k, f"the placement mapping is missing {k!r}", allowed)
    label = value["node_group"]
    if not isinstance(label, str) or not label:
        raise PlacementError(f"{key}.node_group", repr(label), f"node group {label!r} is not a label",
                             "node_group is the label of an entry of cluster.node_groups")
    return label, value["placement"], f"{key}.placement", f"{key}.node_group"


def _processes(value: object, space: _Space, key: str, layout: _Layout) -> tuple[ProcessPlacement, ...]:
    spec = parse_placement(value, key)
    assigned = assign_processes(spec, len(space.slots), key=key, allowed=space.allowed, what=space.what)
    slots, offsets = space.slots, layout.offsets
    per_node: Counter[int] = Counter()
    rows = []
    for rank, (part, idxs) in enumerate(assigned):
        node = slots[idxs[0]][0]
        if len(idxs) > 1 and any(slots[i][0] != node for i in idxs):
            spanned = format_ranks(sorted({slots[i][0] for i in idxs}))
            raise PlacementError(key, part, f"process {rank} of {part!r} would span nodes {spanned}",
                                 "all resources of one process must be on one node")
        accs = tuple(sorted(slots[i][1] for i in idxs)) if slots[idxs[0]][1] is not None else ()
        rows.append((rank, node, accs, per_node[node]))
        per_node[node] += 1
    return tuple(
        ProcessPlacement(rank=rank, node=node, accelerators=accs,  # type: ignore[arg-type]
                         global_ranks=tuple(offsets[node] + a for a in accs),  # type: ignore[operator]
                         local_rank=local, local_world_size=per_node[node], node_group=space.label)
        for rank, node, accs, local in rows
    )


def plan_placement(
    component_placement: Mapping, cluster: ClusterShape, *, key_prefix: str = "cluster.component_placement"
) -> PlacementPlan:
    """Place every component of ``cluster.component_placement`` on ``cluster``.

    Args:
        component_placement: component name (or comma-joined names) -> placement value.
        cluster: the nodes and accelerators to place on.
        key_prefix: config path of ``component_placement``, used in error messages.

    Returns:
        The plan, components in declaration order, with the mode of every pair.

    Raises:
        PlacementError: any invalid name, value, rank, node group or process split.

    >>> plan = plan_placement({"actor,rollout": "all", "reward": "14"}, ClusterShape(2, 8))
    >>> p = plan.component("reward").processes[0]
    >>> (p.node, p.accelerators, p.global_ranks)
    (1, (6,), (14,))
    >>> plan.mode("actor", "rollout").value, plan.mode("actor", "reward").value
    ('collocated', 'hybrid')
    """
    if not isinstance(component_placement, Mapping):
        raise PlacementError(key_prefix, type(component_placement).__name__,
                             f"expected a mapping, got {type(component_placement).__name__}",
                             "component_placement maps component names to placements")
    if not component_placement:
        raise PlacementError(key_prefix, "{}", "no components are placed",
                             "add at least one entry like 'actor: all'")
    layout = _Layout(cluster)
    declared: dict[str, str] = {}
    components: dict[str, ComponentPlacement] = {}
    shared: dict[str, frozenset] = {}
    for raw_key, value in component_placement.items():
        key = config_key(key_prefix, raw_key)
        names = _split_names(raw_key, key)
        for name in names:
            if name in declared:
                where = "twice in this key" if declared[name] == key else f"also in {declared[name]}"
                raise PlacementError(key, name, f"component {name!r} is placed {where}",
                                     "each component is placed exactly once")
            declared[name] = key
        label, placement, value_key, group_key = _unpack_value(value, key)
        space = layout.space(label, group_key)
        processes = _processes(placement, space, value_key, layout)
        resources: frozenset | None = None
        for name in names:
            components[name] = ComponentPlacement(name=name, processes=processes, node_group=label)
            resources = resources if resources is not None else components[name].resources
            shared[name] = resources
    names = list(components)
    modes: dict[tuple[str, str], Mode] = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ra, rb = shared[a], shared[b]
            if ra is rb or ra == rb:
                modes[(a, b)] = Mode.COLLOCATED
            elif ra.isdisjoint(rb):
                modes[(a, b)] = Mode.DISAGGREGATED
            else:
                modes[(a, b)] = Mode.HYBRID
    return PlacementPlan(cluster=cluster, components=components, modes=modes)
