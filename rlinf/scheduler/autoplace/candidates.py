"""The placements the planner tries: every way the placement grammar can give the workflow's roles
contiguous blocks of accelerators, with the recipe's knobs.

* **collocated**: roles that share one block (``actor,rollout: 0-7``);
* **disaggregated**: blocks side by side (``rollout: 0-5, actor: 6-7``);
* **hybrid**: one group of roles spans the blocks of the others (``actor: 0-7, env: 0-3, rollout: 4-7``);
* each role's ``processes_per_accelerator`` options (``env: 0-3:0-7``);
* lookahead depths where the receivers share no device with the trainer, loop pipeline stages
  where the loop's two roles share none;
* with node groups (heterogeneous nodes), each group of roles goes to one pool (the ungrouped
  nodes, or one node group with accelerators) in every combination, so roles can sit on different
  kinds of nodes;
* roles without accelerators go to a CPU-only node group when the cluster has one, else keep
  the placement the config gives them.

Block sizes: any size on a pool of up to 16 accelerators, above that a grid (:func:`_sizes`); the
blocks use the whole pool, except with ``partial`` on a pool of up to 16 (CPU runs,
where fewer processes on shared cores can be faster).

Example (2 roles on 2 accelerators):

    >>> from rlinf.scheduler.autoplace.workflow import Stage, Workflow
    >>> from rlinf.scheduler.placement import ClusterShape
    >>> wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor", receivers=("rollout",))
    >>> sorted(c.label() for c in enumerate_candidates(wf, ClusterShape(1, 2), {}))  # doctest: +NORMALIZE_WHITESPACE
    ['actor: 0, rollout: 0-1', 'actor: 0-1, rollout: 0', 'actor: 1, rollout: 0', 'rollout,actor: 0',
     'rollout,actor: 0-1']
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from rlinf.scheduler.autoplace.workflow import Loop, Workflow
from rlinf.scheduler.placement.plan import ClusterShape

__all__ = ["Candidate", "enumerate_candidates"]

#: pools up to this size try every block size and partial use
SMALL_POOL = 16


@dataclass(frozen=True)
class Candidate:
    """One placement with its knobs.

    Attributes:
        placement: ``cluster.component_placement`` entries (comma-joined keys for collocated roles).
        lookahead: steps the receivers may run ahead of the trainer.
        pipeline_stages: groups of a loop.
    """

    placement: Mapping[str, object]
    lookahead: int = 0
    pipeline_stages: int = 1

    def label(self) -> str:
        """The placement as one line (``actor: 0-1, rollout: 2``), knobs after ``;``."""
        parts = []
        for key in sorted(self.placement):
            value = self.placement[key]
            if isinstance(value, Mapping):
                value = f"{value['node_group']}:{value['placement']}"
            parts.append(f"{key}: {value}")
        knobs = []
        if self.lookahead:
            knobs.append(f"lookahead {self.lookahead}")
        if self.pipeline_stages > 1:
            knobs.append(f"{self.pipeline_stages} pipeline stages")
        return ", ".join(parts) + (f"; {', '.join(knobs)}" if knobs else "")

    def settings(self, workflow: Workflow) -> dict[str, object]:
        """The config keys this candidate sets (dotted key -> value), placement included."""
        out: dict[str, object] = {"cluster.component_placement": dict(self.placement)}
        if workflow.lookahead_key and len(workflow.lookahead) > 1:
            out[workflow.lookahead_key] = workflow.lookahead_setting(self.lookahead)
        if workflow.pipeline_key and len(workflow.pipeline_stages) > 1:
            out[workflow.pipeline_key] = self.pipeline_stages
        return out


def _span(first: int, size: int) -> str:
    return str(first) if size == 1 else f"{first}-{first + size - 1}"


def _sizes(n: int, apn: int) -> list[int]:
    """Block sizes tried on a pool of ``n`` (``apn`` per node): every size up to 16; above, the
    sizes below a node in powers of two and whole nodes in a x1.5 grid (1, 2, 3, 4, 6, 8, 12, ...
    nodes) with the pool's remainder after each (so that two blocks can fill it).

    >>> _sizes(4, 4), _sizes(64, 8)
    ([1, 2, 3, 4], [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64])
    """
    if n <= SMALL_POOL:
        return list(range(1, n + 1))
    unit = apn or 1
    out = {1 << k for k in range(unit.bit_length()) if 1 << k < unit}
    m, grid = 1, set()
    while m * unit <= n:
        grid.add(m * unit)
        m = m + 1 if m < 2 else (m * 3 // 2 if m & (m - 1) == 0 else m * 4 // 3)
    out |= grid | {n - g for g in grid if n - g > 0}
    return sorted(out)


def _partitions(items: list[str]) -> Iterator[list[list[str]]]:
    """Every set partition of ``items`` (groups keep the items' order)."""
    if not items:
        yield []
        return
    head, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[head]] + part
        for i in range(len(part)):
            yield part[:i] + [[head] + part[i]] + part[i + 1:]


def _compositions(k: int, sizes: list[int], total: int, exact: bool) -> Iterator[tuple[int, ...]]:
    if k == 0:
        if not exact or total == 0:
            yield ()
        return
    for s in sizes:
        if s <= total - (k - 1):
            for rest in _compositions(k - 1, sizes, total - s, exact):
                yield (s,) + rest


def _value(span: str, role: str, per: Mapping[str, int], size: int):
    k = per.get(role, 1)
    return span if k == 1 else f"{span}:0-{size * k - 1}"


def enumerate_candidates(workflow: Workflow, cluster: ClusterShape, cpu_placement: Mapping[str, object],
                         *, accelerator_roles: tuple[str, ...] | None = None,
                         processes: Mapping[str, tuple[int, ...]] | None = None,
                         partial: bool = True, max_block: int | None = None) -> list[Candidate]:
    """Every candidate for ``workflow`` on ``cluster`` (see the module docstring).

    Args:
        workflow: the step.
        cluster: the shape (nodes, accelerators, node groups).
        cpu_placement: the config's placement of the roles without accelerators (used as is
            unless the cluster has a CPU-only node group).
        accelerator_roles: the roles that need accelerators (default: all the workflow's roles not in
            ``cpu_placement``).
        processes: role -> its ``processes_per_accelerator`` options.
        partial: on a pool of up to 16, also try blocks that leave accelerators unused (worth it
            where processes share CPU cores; on accelerators of their own, more is not slower).
        max_block: the most accelerators (slots) all groups together may use (on CPU: more
            processes than a few per core only queue for the cores).
    """
    roles = list(accelerator_roles if accelerator_roles is not None
                 else [r for r in workflow.roles() if r not in cpu_placement])
    cpu_roles = [r for r in workflow.roles() if r not in roles]
    pools = _pools(cluster)
    cpu_groups = [g for g in cluster.node_groups if g.accelerators_per_node == 0]
    fixed: dict[str, object] = {}
    for role in cpu_roles:
        if cpu_groups:
            group = cpu_groups[0]
            fixed[role] = {"node_group": group.label, "placement": _span(0, len(group.node_ranks))}
        else:
            fixed[role] = cpu_placement[role]
    options = processes or {}
    seen: set[str] = set()
    out: list[Candidate] = []
    bounds = []
    for label, n, apn in pools:
        if max_block is not None and max_block < n:
            n = max_block  # use at most max_block slots: leave the rest unused
            partial = partial or n <= SMALL_POOL
        exact = n > SMALL_POOL or not partial
        bounds.append((label, n, _sizes(n, apn), exact))
    for part in _partitions(roles):
        # each group of roles goes to one pool (node group); the groups of a pool share it out
        for assign in itertools.product(range(len(bounds)), repeat=len(part)):
            per_pool = []
            for i, (label, n, sizes, exact) in enumerate(bounds):
                groups = [g for g, a in zip(part, assign) if a == i]
                per_pool.append([[(label, g, block) for g, block in layout]
                                 for layout in _layouts(groups, sizes, n, exact)] if groups else [[]])
            for combo in itertools.product(*per_pool):
                layout = [entry for pool_layout in combo for entry in pool_layout]
                for per in _process_choices(roles, options):
                    placement: dict[str, object] = {}
                    for label, group, (first, size) in layout:
                        if any(per.get(r, 1) > 1 for r in group):
                            for r in group:
                                placement[r] = _wrap(_value(_span(first, size), r, per, size), label)
                        else:
                            placement[",".join(group)] = _wrap(_span(first, size), label)
                    placement.update(fixed)
                    for cand in _with_knobs(placement, layout, workflow):
                        key = cand.label()
                        if key not in seen:
                            seen.add(key)
                            out.append(cand)
    return out


def _wrap(value: str, label: str | None):
    return value if label is None else {"node_group": label, "placement": value}


def _pools(cluster: ClusterShape) -> list[tuple[str | None, int, int]]:
    grouped = {n for g in cluster.node_groups for n in g.node_ranks}
    free = [n for n in range(cluster.num_nodes) if n not in grouped]
    pools: list[tuple[str | None, int, int]] = []
    if free and cluster.accelerators_per_node:
        pools.append((None, len(free) * cluster.accelerators_per_node, cluster.accelerators_per_node))
    for g in cluster.node_groups:
        if g.accelerators_per_node:
            pools.append((g.label, len(g.node_ranks) * g.accelerators_per_node, g.accelerators_per_node))
    return pools


def _layouts(part: list[list[str]], sizes: list[int], n: int, exact: bool):
    """``[(group, (first, size)), ...]`` for each way to give the groups blocks: side by side, and
    (2+ groups) one group spanning the others' blocks."""
    for comp in _compositions(len(part), sizes, n, exact):
        first, layout = 0, []
        for group, size in zip(part, comp):
            layout.append((group, (first, size)))
            first += size
        yield layout
    if len(part) < 2:
        return
    for i, spanning in enumerate(part):
        others = part[:i] + part[i + 1:]
        for comp in _compositions(len(others), sizes, n, exact):
            used = sum(comp)
            first, layout = 0, []
            for group, size in zip(others, comp):
                layout.append((group, (first, size)))
                first += size
            for span in sizes:
                if span < used or (exact and span != n) or (len(others) == 1 and span == used):
                    continue  # spanning exactly one other block is collocation
                yield [(spanning, (0, span))] + layout


def _process_choices(roles: list[str], options: Mapping[str, tuple[int, ...]]) -> Iterator[dict[str, int]]:
    choices: list[dict[str, int]] = [{}]
    for role in roles:
        opts = options.get(role, (1,))
        choices = [{**c, role: k} for c in choices for k in opts]
    yield from choices


def _with_knobs(placement, layout, workflow: Workflow) -> Iterator[Candidate]:
    where = {}
    for label, group, (first, size) in layout:
        for role in group:
            where[role] = {(label, k) for k in range(first, first + size)}

    def apart(a: str, b: str) -> bool:  # no accelerator in common (a role without any shares none)
        return a not in where or b not in where or where[a].isdisjoint(where[b])

    depths = [d for d in workflow.lookahead
              if d == 0 or all(apart(r, workflow.trainer) for r in workflow.receivers)]
    loops = [item for item in workflow.flow if isinstance(item, Loop)]
    stages = [s for s in workflow.pipeline_stages
              if s == 1 or (loops and all(apart(*item.roles) for item in loops))]
    for d in depths:
        for s in stages:
            yield Candidate(placement=dict(placement), lookahead=d, pipeline_stages=s)
