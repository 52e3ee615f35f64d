"""The placement plan: which process of which component runs on which node and accelerators.

This module holds only the data types. :func:`rlinf.scheduler.placement.plan_placement` builds a
:class:`PlacementPlan` from ``cluster.component_placement`` and a :class:`ClusterShape`.

Numbering used throughout:

* node ranks are global, ``0 .. num_nodes-1``;
* accelerator ids in :attr:`ProcessPlacement.accelerators` are node-local (what the process sees
  as ``CUDA_VISIBLE_DEVICES``);
* accelerator ranks in :attr:`ProcessPlacement.global_ranks` count the accelerators of all nodes in
  node order (node 0's first, then node 1's, ...), so on 2 nodes x 8, global rank 14 is node 1,
  local id 6.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class Mode(str, enum.Enum):
    """How two components share hardware.

    * ``collocated``: exactly the same resources; the components take turns (offload/onload).
    * ``disaggregated``: no resource in common; the components run concurrently and stream.
    * ``hybrid``: anything else (partial overlap).
    """

    COLLOCATED = "collocated"
    DISAGGREGATED = "disaggregated"
    HYBRID = "hybrid"


@dataclass(frozen=True)
class NodeGroup:
    """A labelled set of nodes, e.g. the A800 nodes or the CPU-only simulator nodes.

    Attributes:
        label: name used by ``{node_group: <label>, placement: ...}``.
        node_ranks: global node ranks of the group, ascending.
        accelerators_per_node: accelerators on each node of the group; ``0`` means CPU-only, where a
            placement rank names a node of the group instead of an accelerator.
    """

    label: str
    node_ranks: tuple[int, ...]
    accelerators_per_node: int


@dataclass(frozen=True)
class ClusterShape:
    """Nodes and accelerators the plan is made for.

    Attributes:
        num_nodes: number of nodes.
        accelerators_per_node: accelerators on a node that no node group overrides.
        node_groups: the declared node groups (may be empty).
    """

    num_nodes: int
    accelerators_per_node: int
    node_groups: tuple[NodeGroup, ...] = ()

    def accelerator_counts(self) -> tuple[int, ...]:
        """Accelerator count of every node in node-rank order (a grouped node has its group's count).

        Raises:
            ValueError: a node group names a node outside ``0 .. num_nodes-1``.

        >>> ClusterShape(3, 8, (NodeGroup("sim", (2,), 0),)).accelerator_counts()
        (8, 8, 0)
        """
        counts = [self.accelerators_per_node] * self.num_nodes
        for group in self.node_groups:
            for node in group.node_ranks:
                if not 0 <= node < self.num_nodes:
                    raise ValueError(f"node group {group.label!r} has node {node} "
                                     f"but the cluster has {self.num_nodes} node(s)")
                counts[node] = group.accelerators_per_node
        return tuple(counts)

    def accelerators_on(self, node: int) -> int:
        """Accelerator count of global node ``node`` (its group's count if it is in a group).

        Raises:
            IndexError: ``node`` is not in ``0 .. num_nodes-1``.
        """
        if not 0 <= node < self.num_nodes:
            raise IndexError(f"node {node} is out of range (num_nodes = {self.num_nodes})")
        return self.accelerator_counts()[node]


@dataclass(frozen=True)
class ProcessPlacement:
    """One process of a component.

    Attributes:
        rank: process rank within its component (0 .. world_size-1).
        node: global node rank it runs on.
        accelerators: node-local accelerator ids it sees, ascending; ``()`` on CPU-only nodes.
        global_ranks: cluster-wide accelerator ranks of ``accelerators`` (same order).
        local_rank: index among this component's processes on the same node.
        local_world_size: number of this component's processes on that node.
        node_group: label of the node group it was placed through, or ``None``.
    """

    rank: int
    node: int
    accelerators: tuple[int, ...]
    global_ranks: tuple[int, ...]
    local_rank: int
    local_world_size: int
    node_group: str | None = None


@dataclass(frozen=True)
class ComponentPlacement:
    """All processes of one component (worker group), in process-rank order."""

    name: str
    processes: tuple[ProcessPlacement, ...]
    node_group: str | None = None

    @property
    def world_size(self) -> int:
        return len(self.processes)

    @property
    def resources(self) -> frozenset[tuple[int, int | None]]:
        """The hardware it occupies: ``(node, accelerator id)`` pairs, ``(node, None)`` on CPU-only nodes."""
        out: set[tuple[int, int | None]] = set()
        for proc in self.processes:
            if proc.accelerators:
                out.update((proc.node, a) for a in proc.accelerators)
            else:
                out.add((proc.node, None))
        return frozenset(out)


@dataclass(frozen=True)
class PlacementPlan:
    """Per component its processes, and the mode of every pair of components (computed once).

    Attributes:
        cluster: the shape the plan was made for.
        components: component name -> placement, in the order the config declared them.
        modes: ``(a, b)`` -> mode for every pair with ``a`` declared before ``b``.
    """

    cluster: ClusterShape
    components: Mapping[str, ComponentPlacement]
    modes: Mapping[tuple[str, str], Mode] = field(default_factory=dict)

    def component(self, name: str) -> ComponentPlacement:
        """The placement of ``name``; ``KeyError`` naming the known components otherwise."""
        try:
            return self.components[name]
        except KeyError:
            known = ", ".join(self.components) or "none"
            raise KeyError(f"component {name!r} is not placed (placed: {known})") from None

    def mode(self, a: str, b: str) -> Mode:
        """Mode between components ``a`` and ``b``, in either order."""
        if (a, b) in self.modes:
            return self.modes[(a, b)]
        if (b, a) in self.modes:
            return self.modes[(b, a)]
        self.component(a)
        self.component(b)
        raise KeyError(f"no mode between {a!r} and {b!r}: a component has no mode with itself")
