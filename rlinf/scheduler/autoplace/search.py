"""The search: every candidate placement, the memory check, the simulated step, a ranked table.

:func:`plan_search` checks the profile against the workflow (a role placed but not profiled, or
profiled but not placed; a role whose memory alone exceeds one accelerator), enumerates the
candidates (:mod:`.candidates`), drops those that do not fit in memory (saying why), predicts each
remaining one (:mod:`.simulate`) and ranks them by predicted step time, next to the config's own
placement. With more than :data:`REFINE_TOP` candidates, every one is first simulated coarsely
(half the pieces, fewer steps) and the fastest :data:`REFINE_TOP` again at full resolution. On a CPU
profile (``cores_per_node``) blocks may leave slots unused, and all of them together use at most
:data:`CPU_BLOCK_PER_CORE` slots per core.

Memory per accelerator: a shardable role holds ``memory_gib / accelerators it has``, another
``memory_gib`` per process on that accelerator; roles without accelerators hold none. With offload
possible (``offload_s`` not null) the roles of one flow element are resident together (a loop's
two roles; a stage's one) and the others are offloaded: the peak is the largest element's sum.
Without offload everything placed there is resident at once.

Example:
    >>> from rlinf.scheduler.autoplace.profile import parse_profile
    >>> from rlinf.scheduler.autoplace.workflow import Stage, Workflow
    >>> from rlinf.scheduler.placement import ClusterShape
    >>> prof = parse_profile({"accelerator_memory_gib": 80, "samples_per_step": 64, "offload_s": 3.0,
    ...     "weight_sync_s": 0.5, "roles": {"rollout": {"seconds_per_sample": 0.2, "memory_gib": 30},
    ...     "actor": {"seconds_per_sample": 0.1, "memory_gib": 60}}})
    >>> wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor", receivers=("rollout",))
    >>> result = plan_search(wf, prof, ClusterShape(1, 4), current={"actor,rollout": "0-3"})
    >>> result.ranked[0].candidate.label(), round(result.ranked[0].prediction.step_s, 3)
    ('actor: 2-3, rollout: 0-1', 7.3)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rlinf.scheduler.autoplace.candidates import Candidate, enumerate_candidates
from rlinf.scheduler.autoplace.profile import Profile, ProfileError
from rlinf.scheduler.autoplace.simulate import Prediction, predict
from rlinf.scheduler.autoplace.workflow import Loop, Workflow
from rlinf.scheduler.placement.builder import plan_placement
from rlinf.scheduler.placement.plan import ClusterShape, PlacementPlan

__all__ = ["Ranked", "SearchResult", "check_profile", "peak_memory", "plan_search"]

#: with more candidates than this, all are simulated coarsely first (fewer steps and pieces) and
#: this many of the fastest again at full resolution
REFINE_TOP = 40
#: on a CPU profile, the candidates use at most this many slots per core of the cluster
CPU_BLOCK_PER_CORE = 2


@dataclass(frozen=True)
class Ranked:
    """One candidate with its prediction (``None`` when dropped) and peak memory per accelerator."""

    candidate: Candidate
    prediction: Prediction | None
    peak_gib: float
    mode: str
    dropped: str = ""


@dataclass(frozen=True)
class SearchResult:
    """The ranked feasible candidates (fastest first), the dropped ones, and the config's own."""

    ranked: tuple[Ranked, ...]
    dropped: tuple[Ranked, ...]
    current: Ranked | None

    def speedup(self, r: Ranked) -> float | None:
        """How many times faster ``r`` is predicted than the config's own placement."""
        if self.current is None or self.current.prediction is None or r.prediction is None:
            return None
        return self.current.prediction.step_s / r.prediction.step_s


def check_profile(workflow: Workflow, profile: Profile, placed: tuple[str, ...], memory_gib: float | None) -> None:
    """Raise :class:`ProfileError` (one line) for a role placed but not profiled or the reverse,
    or a role that cannot fit one accelerator."""
    for role in placed:
        if role not in profile.roles:
            raise ProfileError("profile.roles", f"the config places role {role!r} but the profile has no figures "
                               f"for it (profiled: {', '.join(profile.roles)})")
    for role in profile.roles:
        if role not in placed:
            raise ProfileError(f"profile.roles.{role}", f"the config has no role {role!r} "
                               f"(placed: {', '.join(placed)})")
    for role in workflow.roles():
        if role not in placed:
            raise ProfileError("profile.roles", f"the run's step uses role {role!r} but the config does not place it")
    for name, fig in profile.roles.items():
        if memory_gib is not None and fig.accelerator and not fig.shardable and (fig.memory_gib or 0) > memory_gib:
            raise ProfileError(f"profile.roles.{name}.memory_gib", f"{fig.memory_gib:g} GiB does not fit one "
                               f"accelerator of {memory_gib:g} GiB and the role is not shardable "
                               "(say shardable: true if it can spread over several)")


def peak_memory(plan: PlacementPlan, profile: Profile, workflow: Workflow) -> dict[tuple[int, int], float]:
    """GiB at peak on every used accelerator ``(node, id)`` (see the module docstring)."""
    held: dict[tuple[int, int], dict[str, float]] = {}
    for name, comp in plan.components.items():
        fig = profile.roles.get(name)
        if fig is None or not fig.accelerator or not fig.memory_gib:
            continue
        accels = sorted(r for r in comp.resources if r[1] is not None)
        for proc in comp.processes:
            share = fig.memory_gib / len(accels) if fig.shardable else fig.memory_gib
            for acc in proc.accelerators:
                key = (proc.node, acc)
                per = share if fig.shardable else share / len(proc.accelerators)
                held.setdefault(key, {})
                held[key][name] = per if fig.shardable else held[key].get(name, 0.0) + per
    groups = [tuple(item.roles) if isinstance(item, Loop) else (item.role,) for item in workflow.flow]
    out = {}
    for key, roles in held.items():
        if profile.offload_s is None:
            out[key] = sum(roles.values())
        else:
            rest = [r for r in roles if not any(r in g for g in groups)]
            out[key] = max([sum(roles.get(r, 0.0) for r in g) for g in groups] + [roles[r] for r in rest])
    return out


def _mode(plan: PlacementPlan, profile: Profile) -> str:
    """collocated / disaggregated / hybrid over the roles that hold accelerators (a rule reward
    placed beside them does not make a plan hybrid)."""
    held = {name for name, fig in profile.roles.items() if fig.accelerator}
    modes = {m.value for (a, b), m in plan.modes.items() if a in held and b in held}
    if not modes:
        return "single"
    if modes == {"collocated"}:
        return "collocated"
    if modes == {"disaggregated"}:
        return "disaggregated"
    return "hybrid"


def _evaluate(cand: Candidate, cluster: ClusterShape, profile: Profile, workflow: Workflow,
              memory_gib: float | None, planner=plan_placement, coarse: bool = False) -> Ranked:
    plan = planner(cand.placement, cluster)
    peaks = peak_memory(plan, profile, workflow)
    peak = max(peaks.values(), default=0.0)
    mode = _mode(plan, profile)
    over = [(key, gib, cap) for key, gib in sorted(peaks.items())
            if (cap := profile.memory_on(cluster, key[0])) is not None and gib > cap]
    if over:
        (node, acc), gib, cap = max(over, key=lambda o: o[1] - o[2])
        return Ranked(cand, None, peak, mode, f"needs {gib:.1f} GiB on node {node} accelerator {acc}, "
                                              f"which has {cap:g}")
    return Ranked(cand, predict(plan, profile, workflow, lookahead=cand.lookahead,
                                pipeline_stages=cand.pipeline_stages, coarse=coarse), peak, mode)


def plan_search(workflow: Workflow, profile: Profile, cluster: ClusterShape, *, current: Mapping[str, object],
                current_lookahead: int = 0, current_stages: int = 1, planner=plan_placement) -> SearchResult:
    """Rank every candidate (see the module docstring).

    Args:
        workflow: the run's step (from its recipe).
        profile: the figures.
        cluster: the shape to plan for (the caller resolves profile vs config vs flags).
        current: the config's ``cluster.component_placement``.
        current_lookahead, current_stages: the config's own knobs.
        planner: ``(placement, cluster) -> PlacementPlan`` for every candidate and the current one
            (default :func:`~rlinf.scheduler.placement.plan_placement`; a ``cluster.backend: local``
            run passes one that folds each group to one process, as that backend runs it).

    Raises:
        ProfileError: see :func:`check_profile`; no candidate fits in memory.
    """
    current_plan = planner(current, cluster) if _fits(current, cluster) else None
    placed = tuple(current_plan.components) if current_plan else tuple(
        n.strip() for key in current for n in str(key).split(","))
    capacities = [profile.memory_on(cluster, n) for n, k in enumerate(cluster.accelerator_counts()) if k]
    memory_gib = None if any(c is None for c in capacities) or not capacities else max(capacities)
    check_profile(workflow, profile, placed, memory_gib)
    cpu = {name: _value_of(current, name) for name in placed
           if not profile.roles[name].accelerator}
    options = {name: fig.processes_per_accelerator for name, fig in profile.roles.items()
               if len(fig.processes_per_accelerator) > 1 or fig.processes_per_accelerator != (1,)}
    cores = profile.cores_per_node
    cands = enumerate_candidates(workflow, cluster, cpu, processes=options, partial=cores is not None,
                                 max_block=CPU_BLOCK_PER_CORE * cores * cluster.num_nodes if cores else None)
    ranked, dropped = [], []
    coarse = len(cands) > REFINE_TOP
    for cand in cands:
        r = _evaluate(cand, cluster, profile, workflow, memory_gib, planner, coarse=coarse)
        (ranked if r.prediction else dropped).append(r)
    if coarse:  # the closest REFINE_TOP again at full resolution
        ranked.sort(key=lambda r: (r.prediction.step_s, r.candidate.label()))
        ranked[:REFINE_TOP] = [_evaluate(r.candidate, cluster, profile, workflow, memory_gib, planner)
                               for r in ranked[:REFINE_TOP]]
    if not ranked:
        worst = min(dropped, key=lambda r: r.peak_gib, default=None)
        why = (f"; the smallest need is {worst.peak_gib:.1f} GiB per accelerator ({worst.candidate.label()})"
               if worst else "")
        raise ProfileError("profile", f"no placement of {', '.join(placed)} fits {cluster.num_nodes} node(s) x "
                           f"{cluster.accelerators_per_node} accelerators of {memory_gib:g} GiB with the figures of "
                           f"{profile.source or 'the profile'}{why}")
    ranked.sort(key=lambda r: (r.prediction.step_s, r.candidate.label()))
    cur = None
    if current_plan is not None:
        own = Candidate(dict(current), current_lookahead, current_stages)
        cur = _evaluate(own, cluster, profile, workflow, memory_gib, planner)
    return SearchResult(tuple(ranked), tuple(dropped), cur)


def _fits(placement: Mapping[str, object], cluster: ClusterShape) -> bool:
    try:
        plan_placement(placement, cluster)
    except ValueError:
        return False
    return True


def _value_of(placement: Mapping[str, object], name: str):
    for key, value in placement.items():
        if name in [n.strip() for n in str(key).split(",")]:
            return value
    raise KeyError(name)
