"""The planner's search for one config, with the config's own rules on top: every candidate the
core ranks (:func:`~rlinf.scheduler.autoplace.plan_search`) is also checked the way a run checks
its placement before Ray, with the candidate's placement and knobs set together (the config's
parse, whose rules join the two: a lookahead only where actor and rollout are apart; then
``check_against_plan``: batch sizes that must divide over the processes, modes the config
needs); one the config refuses is dropped with the config's one-line reason, so the best row is
one the config can run. So is one on which the recipe's step would use other roles than the step
planned (math: an ``inference`` group placed on the actor's devices does not start; the actor
computes the reference log-probs), since its prediction would be of a step the run does not take.
The config's own placement is matched among the candidates on the roles that hold accelerators
(:func:`layout_key`).

Example (the tiny disaggregated math run on its 3 slots; a 3-process actor cannot split the
256 samples of a step, so the config refuses those candidates):
    >>> import os, rlinf
    >>> from rlinf.scheduler.autoplace import parse_profile
    >>> from toolkits.autoplace.inputs import load_run, planning_profile, resolve_cluster
    >>> repo = os.path.dirname(os.path.dirname(rlinf.__file__))
    >>> run = load_run(os.path.join(repo, "examples/math/config/grpo_tiny_disaggregated.yaml"))
    >>> prof, _ = planning_profile(parse_profile({"accelerator_memory_gib": 80, "offload_s": 0.5,
    ...     "weight_sync_s": 0.1, "roles": {r: {"seconds_per_sample": s, "memory_gib": 1} for r, s in
    ...     (("rollout", 0.02), ("reward", 0.001), ("actor", 0.01))}}), run.workflow)
    >>> search = rank(run, prof, resolve_cluster(run, prof, None, None).shape)
    >>> search.ranked[0].candidate.label(), search.current_rank, search.ranked[7].candidate.label()
    ('actor: 1-2, reward: 0, rollout: 0-2', 8, 'actor: 1-2, rollout,reward: 0')
    >>> search.dropped[0][1].split(": ")[1]
    'data.rollout_batch_size'
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from rlinf.runners.autoplace_profile import used_placement
from rlinf.scheduler.autoplace import Candidate, Profile, ProfileError, Ranked, SearchResult, plan_search
from rlinf.scheduler.placement import ClusterShape, PlacementPlan, plan_placement
from rlinf.utils.typed_config import ConfigError
from toolkits.autoplace.inputs import LoadedRun

__all__ = ["Search", "layout_key", "rank", "same_plan", "set_dotted"]


@dataclass(frozen=True)
class Search:
    """The ranked candidates the config accepts (fastest first) and every dropped one.

    Attributes:
        ranked: candidates that fit in memory and that the config accepts.
        dropped: ``(candidate, reason)`` for the rest (memory, or the config's refusal).
        current: the config's own placement with its prediction (None: it does not fit the cluster).
        current_rank: its 1-based rank among ``ranked`` (None: not among them).
        current_note: why the config's own placement has no rank ("" when it has one).
        core: the core's result (for :meth:`SearchResult.speedup`).
    """

    ranked: tuple[Ranked, ...]
    dropped: tuple[tuple[Ranked, str], ...]
    current: Ranked | None
    current_rank: int | None
    current_note: str
    core: SearchResult

    def speedup(self, r: Ranked) -> float | None:
        """Predicted step time of the config's own placement / that of ``r``."""
        return self.core.speedup(r)


def set_dotted(tree: dict, key: str, value: object) -> None:
    """Set ``a.b.c`` in a nested dict (making the levels that are missing), replacing what was there.

    >>> t = {"a": {"b": 1}}; set_dotted(t, "a.c.d", 2); t
    {'a': {'b': 1, 'c': {'d': 2}}}
    """
    *path, last = key.split(".")
    node = tree
    for part in path:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value


def layout_key(plan: PlacementPlan, roles: Collection[str] | None = None) -> tuple:
    """What a placement is up to renumbering the accelerators of a node and the nodes of a group:
    per node (with its group), the roles on each of its accelerators (a role twice where it has two
    processes there), and every role's process count. Two plans with the same key run the same.

    ``roles``: compare only these (the roles that hold accelerators; where a role without any sits
    is the config's in every candidate, so it tells nothing about the layout). Default: all.
    """
    nodes: dict[int, tuple[str | None, dict]] = {}
    kept = {name: comp for name, comp in plan.components.items() if roles is None or name in roles}
    for name, comp in kept.items():
        for proc in comp.processes:
            group, devices = nodes.setdefault(proc.node, (proc.node_group, {}))
            for acc in proc.accelerators or (None,):
                devices.setdefault(acc, []).append(name)
    per_node = sorted((str(group), tuple(sorted(tuple(sorted(names)) for names in devices.values())))
                      for group, devices in nodes.values())
    return tuple(per_node), tuple(sorted((name, comp.world_size) for name, comp in kept.items()))


def same_plan(a: Mapping, b: Mapping, shape: ClusterShape, roles: Collection[str] | None = None) -> bool:
    """Whether two ``component_placement`` mappings are the same placement up to renumbering
    (:func:`layout_key`), comparing only ``roles`` when given.

    >>> same_plan({"actor,rollout": "all"}, {"rollout,actor": "0-1"}, ClusterShape(1, 2))
    True
    >>> same_plan({"actor": "0-1", "rollout": 2}, {"rollout": 0, "actor": "1-2"}, ClusterShape(1, 3))
    True
    >>> same_plan({"actor": "0-1", "rollout": 2}, {"rollout": "0-1", "actor": 2}, ClusterShape(1, 3))
    False

    A role without accelerators (a rule reward) kept where the config puts it:
    >>> own, cand = {"actor": "0-1", "rollout,reward": 2}, {"rollout": 0, "actor": "1-2", "reward": 2}
    >>> same_plan(own, cand, ClusterShape(1, 3)), same_plan(own, cand, ClusterShape(1, 3), ("actor", "rollout"))
    (False, True)
    """
    return layout_key(plan_placement(a, shape), roles) == layout_key(plan_placement(b, shape), roles)


class _ConfigCheck:
    """The config's verdict on a candidate: the config with the candidate's placement AND knobs set
    (the cluster sized as planned), parsed as a run parses it (its rules that join placement and
    knobs, e.g. a lookahead only where actor and rollout are apart), its placement checked as a run
    checks it before Ray, and its step asked again."""

    def __init__(self, run: LoadedRun, shape: ClusterShape) -> None:
        self.run, self.shape = run, shape
        self._raw = copy.deepcopy(run.raw)
        set_dotted(self._raw, "cluster.num_nodes", shape.num_nodes)
        set_dotted(self._raw, "cluster.accelerators_per_node", shape.accelerators_per_node)

    def refusal(self, cand: Candidate) -> str | None:
        raw = copy.deepcopy(self._raw)
        for name, value in cand.settings(self.run.workflow).items():
            set_dotted(raw, name, value if name != "cluster.component_placement" else dict(value))
        try:
            cfg = self.run.recipe.config_cls.from_dict(raw, check_paths=False)
        except ConfigError as exc:
            return f"the config refuses it: {exc}"
        try:
            cfg.check_against_plan(cfg.cluster.plan(self.shape))
        except ConfigError as exc:
            return f"the config refuses it: {exc}"
        planned = self.run.workflow.roles()
        step = self.run.recipe.placement_workflow(cfg)
        if step is None or step.roles() != planned:
            uses = ", ".join(step.roles()) if step is not None else "no step the planner plans"
            return (f"the step changes on it: the {self.run.recipe.name} step would run {uses} instead of "
                    f"{', '.join(planned)} (the step planned)")
        return None


def rank(run: LoadedRun, profile: Profile, shape: ClusterShape) -> Search:
    """Search every placement of ``run`` on ``shape`` with ``profile`` (its ``samples_per_step``
    filled in) and keep the ranked ones the config accepts.

    Raises:
        ProfileError: the core's refusals (a role placed but not profiled or the reverse, a role
            larger than one accelerator, no candidate that fits in memory), and no candidate the
            config accepts.
    """
    workflow = run.workflow
    written = run.raw["cluster"]["component_placement"]
    placement = used_placement(written, workflow)
    for role in profile.roles:
        if role not in workflow.roles() and any(role in [n.strip() for n in str(k).split(",")] for k in written):
            raise ProfileError(f"profile.roles.{role}", f"the config places {role!r} but its {run.recipe.name} step "
                               "does not use it (the recipe's placement_workflow leaves it out); leave its figures out")
    core = plan_search(workflow, profile, shape, current=placement, current_lookahead=workflow.lookahead_now,
                       current_stages=workflow.pipeline_stages_now)
    check = _ConfigCheck(run, shape)
    ranked: list[Ranked] = []
    refused: list[tuple[Ranked, str]] = []
    for r in core.ranked:
        why = check.refusal(r.candidate)
        if why is None:
            ranked.append(r)
        else:
            refused.append((r, why))
    dropped = tuple(sorted(((r, r.dropped) for r in core.dropped), key=lambda d: d[0].peak_gib)) + tuple(refused)
    if not ranked:
        first = refused[0] if refused else None
        raise ProfileError("cluster.component_placement", f"the config refuses every placement that fits "
                           f"({len(refused)}); the fastest: {first[0].candidate.label()}: {first[1]}")
    current, current_rank, note = core.current, None, ""
    if current is None:
        note = "does not fit this cluster"
    elif current.prediction is None:
        note = f"does not fit in memory: {current.dropped}"
    else:
        # where a role without accelerators sits is the config's in every candidate: not compared
        held = [name for name in workflow.roles() if profile.roles[name].accelerator]
        own = (current.candidate.lookahead, current.candidate.pipeline_stages,
               layout_key(plan_placement(current.candidate.placement, shape), held))
        for i, r in enumerate(ranked):
            c = r.candidate
            if ((c.lookahead, c.pipeline_stages) == own[:2]
                    and layout_key(plan_placement(c.placement, shape), held) == own[2]):
                current_rank = i + 1
                break
        else:
            why = check.refusal(current.candidate)
            note = (f"refused by the config on this cluster: {why.split(': ', 1)[1]}" if why
                    else "not one the search enumerates (shown apart)")
    return Search(tuple(ranked), dropped, current, current_rank, note, core)
