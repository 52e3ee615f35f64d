"""Predicting one step's time for a placement: an event simulation of a few steps of the workflow.

The model (docs/placement_planner.md says it with its limits):

* A role given ``n`` parallel units does a step's work (:meth:`RoleFigures.work_s`) in
  ``work / speedup(n)`` seconds (linear unless the profile measured other sizes), divided by its
  node group's ``speed``. Units are accelerators; on a CPU profile (``cores_per_node``) or for a
  role without accelerators they are processes, and the node's cores are shared among the
  processes running at each moment (:mod:`.events`).
* A role does one piece at a time, on all its devices at once (data parallel), and holds its
  devices exclusively while it does; roles that share a device therefore take turns. On a CPU
  profile a logical accelerator is a slot, not a device: processes on one slot run side by side
  and only share the node's cores, so a role's work holds nothing but the role itself (the slots
  still decide streaming and phase switches, as the run decides them from the placement).
* :class:`~.workflow.Stage` after a producer on disjoint devices: the batch streams in
  ``workflow.chunks`` pieces (a piece starts when the producer has made it), unless the stage is
  ``whole_batch`` (it starts when the producer's last piece is done). On a shared device:
  the consumer starts after the producer's whole batch. Where a stage's devices were last used in
  the step by other roles that hold memory (the producer, or an earlier stage when one without
  devices came between, as a rule reward between rollout and actor), and offload is possible
  (``offload_s`` not null), one phase switch of ``offload_s`` on those devices comes first.
* :class:`~.workflow.Loop` (env and policy): ``pipeline_stages`` groups, each alternating
  ``iterations`` times (capped at 32 rounds of the same total work); group g's env step may
  overlap group g+1's policy step when the two roles have their own devices.
* A role's wait (tools, HTTP: ``wait_s_per_step``, on its units ``wait_s_per_step_at``) delays its
  last piece without holding devices.
* After the flow's last piece: the driver's own work (``driver_s_per_step``, one core of node 0),
  then the weight sync (``weight_sync_s``, holding the trainer's and
  the receivers' devices), then a switch back when the trainer shares devices with the flow's first
  role. The receivers' step ``t`` starts after the sync of step ``t - 1 - lookahead``.
* Step time = the steady-state interval between syncs: the simulation runs ``10 + 5 x lookahead``
  steps and averages the intervals of the middle half (the first steps fill the pipeline, the last
  ``2 + lookahead`` end without the next steps competing for their devices).

Example: a 2 s rollout and a 1 s actor (per step, one accelerator each), 0.5 s of sync, no offload
cost; collocated on one device the step is 2 + 1 + 0.5 = 3.5 s; apart on two devices with 2 pieces,
synchronous, the actor's first piece overlaps the rollout's second: 1 + 1 + 0.5 + 0.5 = 3.0 s:

    >>> from rlinf.scheduler.placement import ClusterShape, plan_placement
    >>> from rlinf.scheduler.autoplace.profile import parse_profile
    >>> from rlinf.scheduler.autoplace.workflow import Stage, Workflow
    >>> prof = parse_profile({"accelerator_memory_gib": 80, "samples_per_step": 1, "offload_s": 0.0,
    ...     "weight_sync_s": 0.5, "roles": {"rollout": {"seconds_per_sample": 2.0, "memory_gib": 1},
    ...     "actor": {"seconds_per_sample": 1.0, "memory_gib": 1}}})
    >>> wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor", receivers=("rollout",), chunks=2)
    >>> predict(plan_placement({"actor,rollout": "0"}, ClusterShape(1, 1)), prof, wf).step_s
    3.5
    >>> predict(plan_placement({"rollout": "0", "actor": "1"}, ClusterShape(1, 2)), prof, wf).step_s
    3.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from rlinf.scheduler.autoplace.events import Task, simulate
from rlinf.scheduler.autoplace.profile import Profile, RoleFigures
from rlinf.scheduler.autoplace.workflow import Loop, Stage, Workflow
from rlinf.scheduler.placement.plan import PlacementPlan

__all__ = ["Prediction", "predict"]

#: most interaction rounds a loop is simulated with (the same total work in fewer, larger rounds)
MAX_LOOP_ROUNDS = 32


@dataclass(frozen=True)
class Prediction:
    """What the simulation says about one placement.

    Attributes:
        step_s: predicted seconds per step (steady state).
        busy: role -> share of the step its devices are busy with its own work.
        bottleneck: the busiest role.
        events: ``(role, kind, start, end)`` of one steady step, times from that step's start.
        assumptions: what the prediction assumed (linear scaling, ...), one line each.
        switches: phase switches (offload + onload) in one step.
    """

    step_s: float
    busy: Mapping[str, float]
    bottleneck: str
    events: tuple[tuple[str, str, float, float], ...] = ()
    assumptions: tuple[str, ...] = field(default=())
    switches: int = 0


@dataclass
class _Role:
    name: str
    figures: RoleFigures
    devices: tuple
    units: int
    cores: dict[int, float]
    seconds: float  # the role's whole work per step on its units, before core sharing
    memory: float
    holds: tuple = ()  # what its work tasks hold exclusively: its accelerators; on CPU its own token only


def _role(name: str, plan: PlacementPlan, profile: Profile) -> _Role:
    figures = profile.role(name)
    comp = plan.component(name)
    accels = comp.resources
    per_cpu = bool(profile.cores_per_node) or not figures.accelerator
    units = comp.world_size if per_cpu else max(1, len([r for r in accels if r[1] is not None]))
    cores: dict[int, float] = {}
    if profile.cores_per_node:
        for proc in comp.processes:
            cores[proc.node] = cores.get(proc.node, 0.0) + figures.threads_per_process
    labels = {p.node_group for p in comp.processes}
    speed = min(profile.group(label).speed for label in labels) if labels else 1.0
    devices = tuple(sorted(r for r in accels if r[1] is not None)) if figures.accelerator else ()
    seconds = figures.work_s(profile) / figures.speedup(units, figures.per_sample_s(profile)) / speed
    own = (("role", name),) + devices
    # on CPU a logical accelerator is a slot, not a device: processes on one slot run side by side
    # and share the node's cores (the core model), so only the role's own token is exclusive
    holds = own[:1] if profile.cores_per_node else own
    return _Role(name, figures, own, units, cores, seconds, figures.memory_gib or 0.0, holds)


def _shared(a: _Role, b: _Role) -> tuple:
    return tuple(sorted(set(a.devices[1:]) & set(b.devices[1:])))


def predict(plan: PlacementPlan, profile: Profile, workflow: Workflow, *, lookahead: int = 0,
            pipeline_stages: int = 1, coarse: bool = False) -> Prediction:
    """The predicted step of ``plan`` (see the module docstring); ``coarse``: a cheaper estimate for
    screening many candidates (half the pieces, ``6 + 3 x lookahead`` steps, loops of 8 rounds)."""
    if coarse:
        workflow = dataclasses.replace(workflow, chunks=max(1, workflow.chunks // 2))
    roles = {name: _role(name, plan, profile) for name in workflow.roles()}
    steps = 6 + 3 * lookahead if coarse else 10 + 5 * lookahead
    tasks: list[Task] = []
    sync_name = {}
    trainer = roles[workflow.trainer]
    first = roles[_first_role(workflow)]
    offload = profile.offload_s
    switch_backs: set[str] = set()
    last_piece: dict[str, str] = {}  # role (or loop group) -> its last task so far: pieces run in order
    for t in range(steps):
        prev_out: list[str] | None = None  # names of the previous element's pieces, in order
        prev_roles: tuple[_Role, ...] = ()
        holders: dict = {}  # device -> (roles, pieces) of the last element that worked on it this step
        gate = sync_name.get(t - 1 - lookahead)
        back = f"s{t - 1}/switch-back"
        entry = [back] if t > 0 and back in switch_backs else []
        for item in workflow.flow:
            if isinstance(item, Stage):
                role = roles[item.role]
                deps_for = _link(prev_out, prev_roles, (role,), offload, t, tasks, holders, item.whole_batch)
                out = []
                for c in range(workflow.chunks):
                    deps = list(deps_for(c, workflow.chunks)) if deps_for else list(entry)
                    if c == 0:
                        deps += [gate] if gate and role.name in workflow.receivers else []
                        deps += [sync_name[t - 1]] if role is trainer and t > 0 else []
                    deps += [last_piece[role.name]] if role.name in last_piece else []
                    name = f"s{t}/{role.name}/{c}"
                    tasks.append(Task(name, role.seconds / workflow.chunks, role.holds, role.cores,
                                      tuple(dict.fromkeys(deps)), role.name, "work", t))
                    out.append(name)
                    last_piece[role.name] = name
                out = _wait(role, out, t, tasks)
                prev_out, prev_roles = out, (role,)
                holders.update({d: ((role,), out) for d in role.devices[1:]})
            else:
                out = _loop(item, roles, prev_out, prev_roles, entry, gate, workflow, pipeline_stages, offload, t,
                            tasks, last_piece, 8 if coarse else MAX_LOOP_ROUNDS, holders)
                prev_out, prev_roles = out, tuple(roles[r] for r in item.roles)
                holders.update({d: (prev_roles, out) for r in prev_roles for d in r.devices[1:]})
        sync_devices = trainer.devices[1:] + tuple(d for r in workflow.receivers for d in roles[r].devices[1:])
        name = f"s{t}/sync"
        before_sync = tuple(prev_out)
        if profile.driver_s_per_step > 0:
            tasks.append(Task(f"s{t}/driver", profile.driver_s_per_step, (("role", "driver"),),
                              {0: 1.0} if profile.cores_per_node else {}, before_sync, "driver", "driver", t))
            before_sync = (f"s{t}/driver",)
        tasks.append(Task(name, profile.weight_sync_s, tuple(dict.fromkeys(sync_devices)), {}, before_sync,
                          "sync", "sync", t))
        sync_name[t] = name
        shared = _shared(trainer, first)
        if shared and offload and trainer is not first and trainer.memory > 0 and first.memory > 0:
            tasks.append(Task(f"s{t}/switch-back", offload, shared, {}, (name,), "switch", "switch", t))
            switch_backs.add(f"s{t}/switch-back")
    cores = {n: profile.cores_on(plan.cluster, n) for n in range(plan.cluster.num_nodes)}
    times = simulate(tasks, {n: float(c) for n, c in cores.items() if c} if profile.cores_per_node else None)
    tail = (1 if coarse else 2) + lookahead  # the last steps end without the next ones competing: not measured
    half = (steps - tail) // 2
    last_step = steps - 1 - tail
    t0, t1 = times[sync_name[last_step - half]][1], times[sync_name[last_step]][1]
    step_s = (t1 - t0) / half
    window = [(x, times[x.name]) for x in tasks if times[x.name][1] > t0 and times[x.name][0] < t1]
    busy: dict[str, float] = {name: 0.0 for name in roles}
    for task, (s, e) in window:
        if task.kind == "work":
            busy[task.role] += (min(e, t1) - max(s, t0)) / (t1 - t0)
    start = t1 - step_s
    events = tuple(sorted((task.role, task.kind, max(s, start) - start, e - start)
                          for task, (s, e) in window if e > start))
    bottleneck = max(busy, key=busy.__getitem__)
    assumptions = tuple(f"{name}: linear scaling over its {r.units} units (no measured sizes)"
                        for name, r in roles.items() if r.units > 1 and not r.figures.seconds_per_sample_at)
    switches = sum(1 for task in tasks if task.kind == "switch" and task.step == last_step)
    return Prediction(step_s=round(step_s, 9), busy=busy, bottleneck=bottleneck, events=events, assumptions=assumptions,
                      switches=switches)


def _first_role(workflow: Workflow) -> str:
    item = workflow.flow[0]
    return item.roles[1] if isinstance(item, Loop) else item.role


def _link(prev_out, prev_roles, roles, offload, t, tasks, holders, whole_batch=False):
    """How the next element's pieces depend on the previous element's: ``deps(c, pieces)``, or
    None for the flow's first element. Where its devices were last worked on this step by other
    roles that hold memory (the previous element, or an earlier one when a stage without devices
    came between), a phase switch task on those devices comes first."""
    if prev_out is None:
        return None
    switch = None
    if offload and any(r.memory > 0 for r in roles):
        mine = {d for r in roles for d in r.devices[1:]}
        others = {d: h for d, h in holders.items() if d in mine and not {r.name for r in h[0]} & {r.name for r in roles}
                  and any(r.memory > 0 for r in h[0])}
        if others:
            after = tuple(dict.fromkeys(p for _, pieces in others.values() for p in pieces))
            switch = f"s{t}/switch-{roles[0].name}"
            tasks.append(Task(switch, offload, tuple(sorted(others)), {}, after, "switch", "switch", t))
    shared = tuple(sorted({d for a in prev_roles for b in roles for d in _shared(a, b)}))
    if switch is None and not shared:
        if whole_batch:
            return lambda c, pieces: list(prev_out) if c == 0 else []
        n = len(prev_out)  # streaming: piece c needs the producer's piece covering the same share of the batch
        return lambda c, pieces: [prev_out[min(n - 1, -(-(c + 1) * n // pieces) - 1)]]
    first = ([switch] if switch else []) + (list(prev_out) if shared or whole_batch else [])
    if not shared and not whole_batch:  # a switch on devices an earlier element used; the batch still streams
        n = len(prev_out)
        return lambda c, pieces: ((first if c == 0 else [])
                                  + [prev_out[min(n - 1, -(-(c + 1) * n // pieces) - 1)]])
    return lambda c, pieces: first if c == 0 else []


def _wait(role: _Role, out: list[str], t: int, tasks: list[Task]) -> list[str]:
    wait = role.figures.wait_on(role.units)
    if wait <= 0:
        return out
    name = f"s{t}/{role.name}/wait"
    tasks.append(Task(name, wait, (), {}, (out[-1],), role.name, "wait", t))
    return out[:-1] + [name]


def _loop(item: Loop, roles, prev_out, prev_roles, entry, gate, workflow, groups, offload, t, tasks,
          last_piece, max_rounds, holders) -> list[str]:
    env, policy = roles[item.roles[0]], roles[item.roles[1]]
    rounds = max(1, min(item.iterations, max_rounds))
    deps_for = _link(prev_out, prev_roles, (env, policy), offload, t, tasks, holders)
    out = []
    for g in range(groups):
        key = f"{env.name}+{policy.name}/{g}"
        last = None
        for k in range(rounds):
            for role in (env, policy):
                if last is None:
                    deps = list(deps_for(g, groups)) if deps_for else list(entry)
                    deps += [gate] if gate and any(r in workflow.receivers for r in item.roles) else []
                    deps += [last_piece[key]] if key in last_piece else []
                else:
                    deps = [last]
                name = f"s{t}/{role.name}/{g}/{k}"
                tasks.append(Task(name, role.seconds / (groups * rounds), role.holds, role.cores,
                                  tuple(dict.fromkeys(deps)), role.name, "work", t))
                last = name
        last_piece[key] = last
        out.append(last)
    return out
