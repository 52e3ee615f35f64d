"""The planner CLI's output: the ranked table (text) and the same as JSON (every candidate).

Table columns: rank (``*``: the config's own placement), placement (``cluster.component_placement``
in one line, knobs after ``;``), mode, predicted seconds per step, predicted speed-up over the
config's own placement, the bottleneck role (the share of the step its devices are busy), peak
memory per accelerator. Below: the config's own placement when it is not among the rows shown,
the dropped candidates (how many, why, the first few), and the prediction's assumptions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from rlinf.scheduler.autoplace import Profile, Ranked
from toolkits.autoplace.inputs import Cluster, LoadedRun
from toolkits.autoplace.ranking import Search

__all__ = ["Context", "as_json", "seconds", "table"]

#: dropped candidates named with their reason, per kind of reason
SHOW_DROPPED = 3


@dataclass(frozen=True)
class Context:
    """What the search was run on (the header of the table, the top of the JSON)."""

    run: LoadedRun
    profile_path: str
    profile: Profile
    samples_from: str
    cluster: Cluster


def seconds(x: float) -> str:
    """Three significant digits, trailing zeros kept (``0.650``, ``6.98``, ``10.3``, ``123``).

    >>> [seconds(x) for x in (0.65, 6.984, 10.31, 123.4, 0.0)]
    ['0.650', '6.98', '10.3', '123', '0.000']
    """
    if x <= 0:
        return f"{x:.3f}"
    return f"{x:.{max(0, 2 - math.floor(math.log10(x)))}f}"


def _speedup(search: Search, r: Ranked) -> str:
    s = search.speedup(r)
    return "-" if s is None else f"{s:.2f}x"


def _row(rank: str, r: Ranked, search: Search) -> list[str]:
    p = r.prediction
    busy = p.busy.get(p.bottleneck, 0.0)
    return [rank, r.candidate.label(), r.mode, seconds(p.step_s), _speedup(search, r),
            f"{p.bottleneck} {100 * busy:.0f}%", f"{r.peak_gib:.1f}"]


def _format(rows: list[list[str]]) -> list[str]:
    head = ["rank", "placement", "mode", "step s", "vs config", "bottleneck (busy)", "peak GiB/device"]
    right = {0, 3, 4, 6}
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    out = []
    for row in [head, *rows]:
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        out.append("  ".join(cells).rstrip())
    return out


def _assumptions(items: Iterable[Ranked | None]) -> list[str]:
    seen: dict[str, None] = {}
    for r in items:
        if r is not None and r.prediction is not None:
            seen.update(dict.fromkeys(r.prediction.assumptions))
    return list(seen)


def _dropped_lines(search: Search) -> list[str]:
    if not search.dropped:
        return ["dropped: none"]
    memory = [(r, why) for r, why in search.dropped if r.prediction is None]
    config = [(r, why) for r, why in search.dropped if r.prediction is not None]
    parts = [f"{len(memory)} do not fit in memory"] if memory else []
    parts += [f"{len(config)} refused by the config"] if config else []
    lines = [f"dropped: {len(search.dropped)} candidate(s) ({', '.join(parts)})"]
    for group in (memory, config):
        for r, why in group[:SHOW_DROPPED]:
            lines.append(f"  {r.candidate.label()}: {why}")
        if len(group) > SHOW_DROPPED:
            lines.append(f"  ... {len(group) - SHOW_DROPPED} more (--json lists every one)")
    return lines


def _header(ctx: Context) -> list[str]:
    shape = ctx.cluster.shape
    run, prof = ctx.run, ctx.profile
    groups = "".join(f", node group {g.label}: nodes {','.join(map(str, g.node_ranks))} x "
                     f"{g.accelerators_per_node}" for g in shape.node_groups)
    return [f"placement plan for {run.path} ({run.recipe.name}) with profile {ctx.profile_path}",
            f"cluster: {shape.num_nodes} node(s) [{ctx.cluster.nodes_from}] x {shape.accelerators_per_node} "
            f"accelerator(s) [{ctx.cluster.accelerators_from}] of {prof.accelerator_memory_gib:g} GiB{groups}; "
            f"{prof.samples_per_step} samples per step [{ctx.samples_from}]"]


def table(ctx: Context, search: Search, top: int) -> str:
    """The ranked table with its header and footer lines (``top`` rows)."""
    rows = []
    for i, r in enumerate(search.ranked[:top]):
        rows.append(_row(f"{i + 1}{'*' if search.current_rank == i + 1 else ''}", r, search))
    shown = search.current_rank is not None and search.current_rank <= top
    cur = search.current
    if not shown and cur is not None and cur.prediction is not None:
        rows.append(_row(f"{search.current_rank}*" if search.current_rank else "-*", cur, search))
    lines = _header(ctx) + [""] + _format(rows) + [""]
    own = cur.candidate.label() if cur is not None else ""
    placement = ctx.run.raw["cluster"]["component_placement"]
    own = own or ", ".join(f"{k}: {v}" for k, v in placement.items())
    lines.append(f"* the config's own placement ({own}){': ' + search.current_note if search.current_note else ''}")
    if search.current_rank == 1:
        lines.append("the config's own placement is predicted the fastest: nothing to change")
    if len(search.ranked) > top:
        lines.append(f"{len(search.ranked) - top} more candidate(s) ranked (--top N shows more, --json all)")
    lines += _dropped_lines(search)
    assumptions = _assumptions([search.ranked[0], cur])
    lines.append("assumptions of the best and the config's own prediction:"
                 + ("" if assumptions else " none beyond the model's (docs/placement_planner.md)"))
    lines += [f"  {a}" for a in assumptions]
    return "\n".join(lines)


def _entry(r: Ranked, search: Search, ctx: Context, rank: int | None, reason: str = "") -> dict:
    p = r.prediction
    out: dict = {"rank": rank, "placement": dict(r.candidate.placement), "label": r.candidate.label(),
                 "lookahead": r.candidate.lookahead, "pipeline_stages": r.candidate.pipeline_stages,
                 "settings": r.candidate.settings(ctx.run.workflow), "mode": r.mode,
                 "peak_gib_per_device": round(r.peak_gib, 6),
                 "is_current": rank is not None and rank == search.current_rank}
    if p is not None:
        out.update(step_s=p.step_s, speedup=search.speedup(r), bottleneck=p.bottleneck,
                   busy={k: round(v, 6) for k, v in p.busy.items()}, assumptions=list(p.assumptions))
    if reason:
        out["dropped"] = reason
    return out


def as_json(ctx: Context, search: Search) -> dict:
    """Everything the table says, for every candidate (dropped ones with their reason)."""
    shape = ctx.cluster.shape
    cur = search.current
    return {
        "config": ctx.run.path, "recipe": ctx.run.recipe.name, "profile": ctx.profile_path,
        "cluster": {"nodes": shape.num_nodes, "accelerators_per_node": shape.accelerators_per_node,
                    "nodes_from": ctx.cluster.nodes_from, "accelerators_from": ctx.cluster.accelerators_from,
                    "accelerator_memory_gib": ctx.profile.accelerator_memory_gib,
                    "node_groups": [{"label": g.label, "node_ranks": list(g.node_ranks),
                                     "accelerators_per_node": g.accelerators_per_node} for g in shape.node_groups]},
        "samples_per_step": ctx.profile.samples_per_step, "samples_from": ctx.samples_from,
        "current": None if cur is None else {**_entry(cur, search, ctx, search.current_rank, cur.dropped),
                                             "is_current": True, "note": search.current_note},
        "candidates": [_entry(r, search, ctx, i + 1) for i, r in enumerate(search.ranked)],
        "dropped": [_entry(r, search, ctx, None, why) for r, why in search.dropped],
        "assumptions": _assumptions([*search.ranked, cur]),
    }
