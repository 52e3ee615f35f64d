"""Fold a placement plan to one process per component, for ``cluster.backend: local``.

The local backend runs each worker group as one instance inside the driver process. A plan whose
group has several processes (``actor,rollout,reward: all`` on 2 accelerators, ``env: 0-1``) is
folded: the group becomes one process that holds every accelerator its processes held, so each
group keeps the hardware the placement gave it and the mode of every pair of groups (collocated,
disaggregated, hybrid) is unchanged: groups placed apart stay apart. Pure Python, like the rest of
this package.

Example:
    >>> from rlinf.scheduler.placement import parse_cluster_shape, plan_placement
    >>> plan = plan_placement({"env": "0-1", "rollout": 1, "actor": 0},
    ...                       parse_cluster_shape({"num_nodes": 1, "accelerators_per_node": 2}))
    >>> folded = fold_to_one_process(plan)
    >>> [(n, c.world_size, c.processes[0].accelerators) for n, c in folded.components.items()]
    [('env', 1, (0, 1)), ('rollout', 1, (1,)), ('actor', 1, (0,))]
    >>> folded.mode("rollout", "actor").value
    'disaggregated'
    >>> fold_note(plan)
    'cluster.backend local: env 2 processes -> 1 in this process; each group keeps its accelerators (env: 0,1; rollout: 1; actor: 0), so groups placed apart stay apart'
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

from rlinf.scheduler.placement.plan import ComponentPlacement, PlacementPlan, ProcessPlacement
from rlinf.scheduler.placement.text import format_ranks


def fold_component(component: ComponentPlacement) -> ComponentPlacement:
    """``component`` as one process (rank 0) on the union of its processes' accelerators.

    Raises:
        ValueError: its processes are on more than one node (one process cannot span nodes).
    """
    if component.world_size <= 1:
        return component
    nodes = sorted({p.node for p in component.processes})
    if len(nodes) != 1:
        raise ValueError(f"{component.name} is placed on nodes {format_ranks(nodes)}; one process "
                         "cannot span nodes")
    first = component.processes[0]
    pairs = sorted({pair for p in component.processes for pair in zip(p.accelerators, p.global_ranks)})
    one = ProcessPlacement(rank=0, node=first.node, accelerators=tuple(a for a, _ in pairs),
                           global_ranks=tuple(g for _, g in pairs), local_rank=0, local_world_size=1,
                           node_group=first.node_group)
    return ComponentPlacement(component.name, (one,), component.node_group)


def fold_to_one_process(plan: PlacementPlan) -> PlacementPlan:
    """``plan`` with every component folded to one process (:func:`fold_component`); the modes
    are the plan's own (each component occupies the same hardware as before). A plan that is
    one process per component already is returned as is."""
    if all(c.world_size == 1 for c in plan.components.values()):
        return plan
    components = {name: fold_component(c) for name, c in plan.components.items()}
    return PlacementPlan(plan.cluster, components, plan.modes)


def fold_note(plan: PlacementPlan) -> str | None:
    """One line saying what :func:`fold_to_one_process` does to ``plan`` (the unfolded plan), or
    None when every component is one process already."""
    folded = [f"{name} {c.world_size} processes -> 1" for name, c in plan.components.items() if c.world_size > 1]
    if not folded:
        return None
    where: dict[tuple, list[str]] = {}
    for name, c in plan.components.items():
        where.setdefault(tuple(sorted(c.resources, key=lambda r: (r[0], -1 if r[1] is None else r[1]))),
                         []).append(name)
    places = "; ".join(f"{','.join(names)}: {_where(res, plan.cluster.num_nodes)}" for res, names in where.items())
    return (f"cluster.backend local: {', '.join(folded)} in this process; each group keeps its accelerators "
            f"({places}), so groups placed apart stay apart")


def _where(resources: tuple, num_nodes: int) -> str:
    """``0,1`` (one node), ``node 0: 0-3 node 1: 2`` (several), ``cpu`` (a CPU-only node)."""
    parts = []
    for node in sorted({n for n, _ in resources}):
        ids = [a for n, a in resources if n == node and a is not None]
        text = format_ranks(ids) if ids else "cpu"
        parts.append(text if num_nodes == 1 else f"node {node}: {text}")
    return " ".join(parts)
