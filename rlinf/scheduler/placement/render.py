"""Showing a :class:`PlacementPlan`: as a JSON-ready dict, or as a text grid of nodes x accelerators."""

from __future__ import annotations

from rlinf.scheduler.placement.plan import PlacementPlan
from rlinf.scheduler.placement.text import describe_nodes, format_ranks

_EMPTY = "-"


def plan_to_json(plan: PlacementPlan) -> dict:
    """The plan as plain data: processes per component (rank order) and the mode of every pair.

    Accelerator ids are node-local; modes are keyed ``"a,b"`` with ``a`` declared before ``b``.

    >>> from rlinf.scheduler.placement import ClusterShape, plan_placement
    >>> plan_to_json(plan_placement({"actor": "0-1", "rollout": "1"}, ClusterShape(1, 2)))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'components': {'actor': [{'rank': 0, 'node': 0, 'accelerators': [0]},
                              {'rank': 1, 'node': 0, 'accelerators': [1]}],
                    'rollout': [{'rank': 0, 'node': 0, 'accelerators': [1]}]},
     'modes': {'actor,rollout': 'hybrid'}}
    """
    return {
        "components": {
            name: [
                {"rank": p.rank, "node": p.node, "accelerators": list(p.accelerators)}
                for p in comp.processes
            ]
            for name, comp in plan.components.items()
        },
        "modes": {f"{a},{b}": mode.value for (a, b), mode in plan.modes.items()},
    }


def _node_labels(plan: PlacementPlan) -> list[str | None]:
    labels: list[str | None] = [None] * plan.cluster.num_nodes
    for group in plan.cluster.node_groups:
        for node in group.node_ranks:
            labels[node] = group.label
    return labels


def render_grid(plan: PlacementPlan) -> str:
    """A text map: one row per node, one column per local accelerator (``cpu`` for CPU-only nodes).

    Each cell lists the components there with their process ranks; ``-`` is an unused accelerator.
    A ``modes:`` section follows with one line per pair of components.

    >>> from rlinf.scheduler.placement import ClusterShape, plan_placement
    >>> print(render_grid(plan_placement({"actor,rollout": "0-1", "reward": "0-1:0"}, ClusterShape(1, 3))))
    1 node x 3; components: actor (2), rollout (2), reward (1)
    <BLANKLINE>
    node     acc 0                     acc 1                     acc 2
    node 0   actor0 rollout0 reward0   actor1 rollout1 reward0   -
    <BLANKLINE>
    modes:
      actor,rollout   collocated
      actor,reward    collocated
      rollout,reward  collocated
    """
    counts, labels = plan.cluster.accelerator_counts(), _node_labels(plan)
    width = max(counts, default=0)
    has_cpu = any(c == 0 for c in counts)
    # cells[node][col] -> {component: [process ranks]}; column ``width`` is the cpu column.
    cells: list[dict[int, dict[str, list[int]]]] = [{} for _ in counts]
    for name, comp in plan.components.items():
        for proc in comp.processes:
            cols = proc.accelerators if proc.accelerators else (width,)
            row = cells[proc.node]
            for col in cols:
                row.setdefault(col, {}).setdefault(name, []).append(proc.rank)
    header = ["node"] + [f"acc {a}" for a in range(width)] + (["cpu"] if has_cpu else [])
    table = [header]
    for node, count in enumerate(counts):
        label = f"node {node}"
        tags = [t for t in (labels[node], "cpu" if count == 0 else None) if t]
        if tags:
            label += f" ({', '.join(tags)})"
        row_cells = cells[node]
        line = [label]
        for col in range(width + (1 if has_cpu else 0)):
            exists = col < count or (col == width and count == 0)
            if not exists:
                line.append("")
            elif col in row_cells:
                line.append(" ".join(f"{n}{format_ranks(r)}" for n, r in row_cells[col].items()))
            else:
                line.append(_EMPTY)
        table.append(line)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    sizes = ", ".join(f"{n} ({c.world_size})" for n, c in plan.components.items())
    out = [f"{describe_nodes(counts)}; components: {sizes}", ""]
    out += ["   ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in table]
    out += ["", "modes:"]
    if plan.modes:
        pair_w = max(len(a) + len(b) + 1 for a, b in plan.modes)
        out += [f"  {f'{a},{b}'.ljust(pair_w)}  {m.value}" for (a, b), m in plan.modes.items()]
    else:
        out.append("  (none: a single component)")
    return "\n".join(out)
