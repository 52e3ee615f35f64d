"""The run layer's side of the placement planner (issue 46): a profile measured from a run, and the
advice at the end of every run.

* :class:`StepMeter`: every run's training steps, measured from the groups' call statistics
  (:class:`~rlinf.scheduler.call_stats.CallStats`: wall and CPU seconds of every call inside the
  workers) and the driver thread's CPU time; :class:`~rlinf.runners.schedule.ScheduledRunner`
  calls it around each ``train_step`` (validation and checkpoints fall outside).
* :func:`build_profile`: a profile (a mapping :func:`~rlinf.scheduler.autoplace.parse_profile`
  accepts; every key it writes is one the planner reads) from the measured steps, the recipe's
  memory estimate and the cluster, with header lines saying what was measured and what assumed.
* :func:`advise`: what every run prints at its end (the measured phase times; on Ray, one line
  with a placement the planner predicts >= 15 % faster and the command that checks it,
  :func:`advice_line`) and the profile it writes to ``<run dir>/autoplace_profile.yaml``; it never
  fails a run (a one-line note instead). A local-backend run gets no advice: its groups are
  threads of one Python process, which the planner does not model (measured: the placement it
  advised for a tiny local math run was slower than the one it replaced).
* :func:`rlinf.runners.autoplace_measure.measure_profile` (``python -m toolkits.autoplace CONFIG
  --measure-steps K``): K steps of the config as placed, no validation or checkpoints, then the profile.
* :func:`used_placement`: a config's placement without the roles its step does not use.

What a measured profile holds, role by role (each figure the median over the measured steps:
the steps after the first when there are several, the first being warm-up: model loads,
compilation, allocator growth; a median, since one step slowed by something else on the machine
moved a mean by 10-40 % on the 2-core development machine):

* ``seconds_per_sample``: the role's busy seconds per step x its units / ``samples_per_step``.
  Busy = the sum over the role's calls in the step (every group placed as that role: an unplaced
  critic runs on the actor's devices and counts as the actor), on its busiest rank, weight sync
  and offload calls left out. On a CPU run busy is CPU seconds (contention for the cores is the
  simulator's to model, not part of the work) and units are processes; on GPUs busy is wall
  seconds and units are accelerators.
* ``wait_s_per_step`` (CPU runs, roles of a ``Stage`` the recipe names in
  ``Workflow.external_waits``): wall minus CPU seconds of the role's calls when it is at least 5 %
  of the wall: waiting that is not computing (tool calls, I/O, a sandbox subprocess). Other roles'
  wall minus CPU is waiting for cores or for their other ranks (a collective), which the
  simulation models; measured on the tiny math run it was 0.66 s a step for the actor, and counted
  as waiting it put every candidate 0.66 s slow. A loop's roles (env and policy) wait for each other inside their calls,
  which is the simulation's own business, so they get none. It also holds time the role's threads
  waited for a core, so measure on a quiet machine.
* ``threads_per_process``: CPU over wall seconds when a process keeps more than one core busy
  (then its busy time is the wall time).
* ``memory_gib`` / ``shardable``: the recipe's memory estimate (:meth:`Recipe.memory_estimate`)
  for the role alone on one accelerator (device items on GPUs, everything on a CPU run);
  shardable when its weights per rank shrink on two. A role estimated at 0 (a rule reward) gets
  ``accelerator: false``: the planner keeps the config's placement for it and leaves it out of
  the modes.

And for the run: ``weight_sync_s`` (the longest sync call per step), ``offload_s`` (the offload
and onload calls per step divided by the phase switches the simulator counts for the run's
placement; without any measured: 0 on CPU, where nothing moves, else twice the largest role's
memory at an assumed 12 GiB/s), ``driver_s_per_step`` (the driver thread's CPU seconds per step:
advantages, a reward scored in the driver, batching; the simulator puts it before the sync, which
overstates it where it overlaps generation), ``cores_per_node`` (CPU runs: ``os.cpu_count()``),
the cluster's shape, ``samples_per_step`` (the config's batch). Scaling with the number of units
is measured at one size: linear is assumed (the header says so).
"""

from __future__ import annotations

import copy
import datetime
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlinf.scheduler.autoplace import Stage, Workflow, parse_profile, plan_search, predict
from rlinf.scheduler.memory import GIB
from rlinf.scheduler.placement import ClusterShape, PlacementPlan, plan_placement
from rlinf.scheduler.placement.fold import fold_to_one_process
from rlinf.utils.typed_config import ConfigError

__all__ = ["ADVICE_SPEEDUP", "PROFILE_FILE", "StepMeter", "StepRecord", "advice_line", "advise", "build_profile",
           "used_placement", "write_profile"]

#: the profile every planned run writes into its run folder
PROFILE_FILE = "autoplace_profile.yaml"
#: the advice names another placement when it is predicted at least this many times faster
ADVICE_SPEEDUP = 1.15
#: calls that are the weight sync / a phase switch, not a role's work
SYNC_METHODS = frozenset({"send_weights", "receive_weights"})
OFFLOAD_METHODS = frozenset({"offload", "onload"})
#: host <-> accelerator copy rate assumed for an offload no step measured (GiB/s)
ASSUMED_OFFLOAD_GIB_S = 12.0
#: wall minus CPU below this share of a role's wall is scheduling noise, not waiting
WAIT_SHARE = 0.05


def used_placement(placement: Mapping[str, object], workflow: Workflow) -> dict[str, object]:
    """``placement`` (a ``cluster.component_placement``) without the roles ``workflow`` does not
    use: what the planner plans from and compares against (a comma key keeps its used names).

    >>> from rlinf.scheduler.autoplace import Stage
    >>> wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor")
    >>> used_placement({"actor,inference,rollout": "all", "inference": 3}, wf)
    {'actor,rollout': 'all'}
    """
    used = set(workflow.roles())
    out: dict[str, object] = {}
    for key, value in placement.items():
        names = [n.strip() for n in str(key).split(",") if n.strip() in used]
        if names:
            out[",".join(names)] = value
    return out


# ---- measuring the steps ------------------------------------------------------------------------

@dataclass
class StepRecord:
    """One training step as measured.

    Attributes:
        wall_s: the step's wall seconds (the driver's ``train_step``).
        driver_cpu_s: CPU seconds of the driver's thread in the step.
        roles: role -> rank -> ``[wall, cpu]`` seconds of its work calls (sync and offload left out).
        sync_s: the longest weight-sync call (``send_weights`` / ``receive_weights``) of the step.
        offload_s: the offload and onload calls of the step, each group's busiest rank, summed.
        methods: role -> the methods counted as its work.
    """

    wall_s: float
    driver_cpu_s: float
    roles: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    sync_s: float = 0.0
    offload_s: float = 0.0
    methods: dict[str, set[str]] = field(default_factory=dict)


class StepMeter:
    """Measures each training step of a run (see the module docstring): :meth:`begin` before a
    step, :meth:`end` after it. Never raises: a failure stops the measuring and is kept in
    :attr:`error` (the advice says it in one line).

    Args:
        cluster: the run's cluster (its live groups are read at each step).
    """

    def __init__(self, cluster: Any):
        self.cluster = cluster
        self.steps: list[StepRecord] = []
        self.error: str | None = None
        self._start: tuple[float, float] | None = None

    def begin(self) -> None:
        """Start a step: forget the calls counted since the last one (validation, checkpoints)."""
        if self.error is not None:
            return
        try:
            for group in self.cluster.live_groups():
                group.call_stats.reset()
            self._start = (time.perf_counter(), time.thread_time())
        except Exception as exc:  # noqa: BLE001 - measuring must never fail the run
            self.error = f"{type(exc).__name__}: {exc}"

    def end(self) -> None:
        """End a step: its calls, per role."""
        if self.error is not None or self._start is None:
            return
        try:
            record = StepRecord(time.perf_counter() - self._start[0], time.thread_time() - self._start[1])
            self._start = None
            for group in self.cluster.live_groups():
                role = group.placement.name
                for method, stats in group.call_stats.take().items():
                    if method in SYNC_METHODS:
                        record.sync_s = max(record.sync_s, stats.busiest_wall_s)
                    elif method in OFFLOAD_METHODS:
                        record.offload_s += stats.busiest_wall_s
                    else:
                        per = record.roles.setdefault(role, {})
                        record.methods.setdefault(role, set()).add(method)
                        for rank, r in stats.ranks.items():
                            row = per.setdefault(rank, [0.0, 0.0])
                            row[0] += r.wall_s
                            row[1] += r.cpu_s
            self.steps.append(record)
        except Exception as exc:  # noqa: BLE001 - measuring must never fail the run
            self.error = f"{type(exc).__name__}: {exc}"


# ---- the profile --------------------------------------------------------------------------------

@dataclass
class MeasuredRun:
    """What :func:`build_profile` reads.

    Attributes:
        recipe: the run's recipe (its memory estimate).
        cfg: the typed config.
        plan: the placement plan the run ran (folded to one process per group on the local backend).
        shape: the cluster's shape.
        capacity: what one accelerator / node holds (:func:`~rlinf.runners.memory_check.run_capacity`);
            ``kind == "cpu"``: a CPU run.
        workflow: the recipe's step (:meth:`~rlinf.runners.recipe.Recipe.placement_workflow`).
        steps: the measured steps, in order.
        source: what ran (a config file, for the header).
    """

    recipe: Any
    cfg: Any
    plan: PlacementPlan
    shape: ClusterShape
    capacity: Any
    workflow: Workflow
    steps: list[StepRecord]
    source: str = "a run"


def _fig(x: float) -> float:
    """A figure with 4 significant digits."""
    return float(f"{x:.4g}")


def role_memory(recipe: Any, cfg: Any, roles: tuple[str, ...], capacity: Any) -> tuple[dict, list[str]]:
    """``({role: (GiB on one accelerator, shardable)}, notes)`` from the recipe's memory estimate
    of the roles alone on one accelerator, and on two (shardable: weights per rank shrink)."""
    from rlinf.runners.memory_check import estimate  # lazy: the config layer's formulas (~0.1 s)

    on_gpu = capacity.kind == "gpu"
    where = "device" if on_gpu else "host"
    sized = {}
    notes: list[str] = []
    for n in (1, 2):
        plan = plan_placement({",".join(roles): "0" if n == 1 else "0-1"}, ClusterShape(1, n))
        est = estimate(recipe, cfg, plan, capacity)
        notes += [note for note in est.notes if note not in notes]
        sized[n] = est.components
    out = {}
    for role in roles:
        one, two = sized[1].get(role), sized[2].get(role)
        if one is None:
            out[role] = (0.0, False)
            notes.append(f"{role}: memory not estimated (0 written)")
            continue
        weights = [sum(i.bytes for i in c.items if i.name == "weights") for c in (one, two) if c is not None]
        shardable = len(weights) == 2 and 0 < weights[1] < weights[0]
        out[role] = (one.total(where) / GIB, shardable)
    return out, notes


def _units(plan: PlacementPlan, role: str, on_cpu: bool) -> int:
    comp = plan.component(role)
    if on_cpu:
        return comp.world_size
    return max(1, len([r for r in comp.resources if r[1] is not None])) if comp.resources else comp.world_size


def switches_per_step(plan: PlacementPlan, workflow: Workflow, memory: Mapping[str, float]) -> int:
    """Phase switches the simulator counts in one step of ``plan`` (role -> GiB it holds in
    ``memory``): the simulation itself, run on unit figures, so the two never disagree."""
    roles = {role: {"seconds_per_sample": 1.0, "memory_gib": float(memory.get(role, 0.0)),
                    "accelerator": any(r[1] is not None for r in plan.component(role).resources)}
             for role in workflow.roles()}
    unit = parse_profile({"accelerator_memory_gib": 1e9, "samples_per_step": 1, "offload_s": 1.0,
                          "weight_sync_s": 0.0, "roles": roles})
    return predict(plan, unit, workflow, lookahead=workflow.lookahead_now,
                   pipeline_stages=workflow.pipeline_stages_now, coarse=True).switches


def build_profile(run: MeasuredRun) -> tuple[dict, list[str]]:
    """``(profile mapping, header lines)`` of a measured run (see the module docstring).

    Raises:
        ValueError: no step was measured, or a role of the step finished no call within one.
    """
    steps = run.steps[1:] if len(run.steps) > 1 else list(run.steps)
    if not steps:
        raise ValueError("no training step was measured")
    wf, plan = run.workflow, run.plan
    on_cpu = run.capacity.kind == "cpu"
    samples = wf.samples_per_step or 1
    n = len(steps)
    memory, notes = role_memory(run.recipe, run.cfg, wf.roles(), run.capacity)
    stage_roles = {item.role for item in wf.flow if isinstance(item, Stage)}
    roles: dict[str, dict] = {}
    for role in wf.roles():
        walls = [max((row[0] for row in s.roles.get(role, {}).values()), default=0.0) for s in steps]
        cpus = [max((row[1] for row in s.roles.get(role, {}).values()), default=0.0) for s in steps]
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        if wall <= 0:
            raise ValueError(f"role {role} finished no call within a measured step (a call that spans "
                             "steps, as the fully_async rollout's stream, cannot be timed per step)")
        figures: dict[str, Any] = {}
        busy, wait, threads = wall, 0.0, 1.0
        if on_cpu:
            if cpu > 1.05 * wall:
                threads = cpu / wall
            else:
                busy = max(cpu, 1e-6)
                if role in stage_roles and role in wf.external_waits and wall - cpu >= WAIT_SHARE * wall:
                    wait = wall - cpu
        units = _units(plan, role, on_cpu)
        figures["seconds_per_sample"] = _fig(max(busy * units / samples, 1e-9))
        gib, shardable = memory[role]
        figures["memory_gib"] = _fig(gib)
        if shardable:
            figures["shardable"] = True
        if gib <= 0:  # holds nothing on a device (a rule reward): the planner keeps its placement
            figures["accelerator"] = False
        if wait > 0:
            figures["wait_s_per_step"] = _fig(wait)
        if threads > 1:
            figures["threads_per_process"] = _fig(threads)
        roles[role] = figures
    sync = statistics.median(s.sync_s for s in steps)
    measured_offload = statistics.median(s.offload_s for s in steps)
    held = {r: memory[r][0] for r in wf.roles()}
    switches = switches_per_step(plan, wf, held)
    if measured_offload > 0 and switches:
        offload, offload_how = measured_offload / switches, (
            f"measured: {measured_offload:.3g} s of offload/onload calls per step over {switches} phase switch(es)")
    elif on_cpu:
        offload, offload_how = 0.0, "assumed 0: no phase switch measured, and on CPU an offload moves nothing"
    else:
        largest = max((g for g, _ in memory.values()), default=0.0)
        offload = 2 * largest / ASSUMED_OFFLOAD_GIB_S
        offload_how = (f"assumed: no phase switch measured; twice the largest role ({largest:.3g} GiB) at "
                       f"{ASSUMED_OFFLOAD_GIB_S:g} GiB/s")
    driver = statistics.median(s.driver_cpu_s for s in steps)
    if run.capacity.accelerator_bytes:
        accel_gib = run.capacity.accelerator_bytes / GIB
    else:
        accel_gib = (run.capacity.node_bytes or 64 * GIB) / GIB
    profile: dict[str, Any] = {
        "accelerators_per_node": run.shape.accelerators_per_node, "nodes": run.shape.num_nodes,
        "accelerator_memory_gib": _fig(accel_gib), "samples_per_step": samples,
        "offload_s": _fig(offload), "weight_sync_s": _fig(sync), "driver_s_per_step": _fig(driver)}
    if on_cpu:
        profile["cores_per_node"] = os.cpu_count() or 1
    profile["roles"] = roles
    parse_profile(profile, "measured")  # every figure is one the planner accepts
    first = "" if len(run.steps) == 1 else f" (step 1 of {len(run.steps)} skipped: warm-up)"
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    placement = ", ".join(f"{k}: {v}" for k, v in run.cfg.cluster.component_placement.items())
    backend = run.cfg.cluster.backend
    header = [
        f"measured by rlinf.runners.autoplace_profile, {when}, from {n} training step(s){first} of {run.source}",
        f"placement {placement} on {run.shape.num_nodes} node(s) x {run.shape.accelerators_per_node} "
        f"{'slots' if on_cpu else 'accelerators'}, {backend} backend"
        + (" (each group one process)" if backend == "local" else ""),
        "seconds_per_sample: each role's busy seconds per step x its units / samples_per_step; busy = "
        + ("CPU seconds of its busiest process (units: processes)" if on_cpu
           else "wall seconds of its busiest rank (units: accelerators)")
        + "; weight sync and offload calls left out",
        "wait_s_per_step: " + ("wall minus CPU seconds of the calls of a role the recipe says waits outside the run "
                               "(tools, I/O), where >= 5 % of its wall; includes waiting for a core"
                               if on_cpu else "not measured on GPUs (0)"),
        "memory_gib: the recipe's estimate of the role alone on one accelerator; shardable: weights shrink per rank",
        f"weight_sync_s: the longest sync call per step; offload_s: {offload_how}",
        "driver_s_per_step: the driver thread's CPU seconds per step (the simulator puts it before the sync)",
        "assumed: linear scaling over a role's units (measured at one size)",
        *(["local backend: the groups are threads of one Python process; Python-bound work (small models) "
           "does not run in parallel there (the GIL), which the simulator does not model"]
          if backend == "local" else []),
        *[f"note: {note}" for note in notes],
    ]
    return profile, header


def write_profile(path: str, profile: Mapping, header: list[str]) -> str:
    """Write ``profile`` as YAML with ``header`` as comment lines; returns ``path``."""
    import yaml  # lazy: only when a profile is written

    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    body = yaml.safe_dump(dict(profile), sort_keys=False, default_flow_style=None, width=120)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"# {line}\n" for line in header) + body)
    return path


# ---- the advice at the end of a run -------------------------------------------------------------

def _planner(cfg: Any) -> Callable:
    """How the planner turns a placement into processes for this run: the local backend runs
    each group as one process (thread) on all its accelerators."""
    if cfg.cluster.backend == "local":
        return lambda placement, shape: fold_to_one_process(plan_placement(placement, shape))
    return plan_placement


def _accepted(raw: Mapping, recipe: Any, settings: Mapping[str, object], shape: ClusterShape) -> bool:
    """Whether the config, with a candidate's settings, is one the recipe accepts on ``shape``."""
    tree = copy.deepcopy(dict(raw))
    for key, value in settings.items():
        *head, last = key.split(".")
        node = tree
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    try:
        cfg = recipe.config_cls.from_dict(tree, check_paths=False)
        cfg.check_against_plan(cfg.cluster.plan(shape))
    except ConfigError:
        return False
    return True


def config_hint() -> str:
    """The config file of a Hydra entry's run (relative to the working folder), else ``CONFIG``."""
    try:
        from hydra.core.hydra_config import HydraConfig  # lazy: Hydra only at a run's end, and runs without it

        hc = HydraConfig.get()
        folder = next(s.path for s in hc.runtime.config_sources if s.provider == "main")
        path = os.path.join(folder.split("://", 1)[-1], f"{hc.job.config_name}.yaml")
        return os.path.relpath(path) if os.path.isfile(path) else "CONFIG"
    except Exception:  # noqa: BLE001 - no Hydra, or not a Hydra run
        return "CONFIG"


def advice_line(result, accepted: Callable, config: str, profile_path: str) -> str | None:
    """The advice line for a search ``result`` (:func:`~rlinf.scheduler.autoplace.plan_search` on
    the run's own profile): the fastest candidate the config ``accepted`` when it is predicted at
    least :data:`ADVICE_SPEEDUP` x faster than the run's own placement; None otherwise."""
    best = next((r for r in result.ranked if accepted(r)), None)
    speedup = result.speedup(best) if best is not None else None
    if speedup is None or speedup < ADVICE_SPEEDUP:
        return None
    return (f"[rlinf] placement advice: {best.candidate.label()} ({best.mode}) is predicted {speedup:.2f}x "
            f"faster ({best.prediction.step_s:.3g} s per step, bottleneck {best.prediction.bottleneck}); "
            f"check: python -m toolkits.autoplace {config} --profile {profile_path}")


def advise(recipe: Any, raw: Mapping, cfg: Any, plan: PlacementPlan, shape: ClusterShape, meter: StepMeter,
           run_dir: str | None, print_fn: Callable = print, config: str | None = None,
           profile_path: str | None = None) -> str | None:
    """What a run prints at its end (see the module docstring); returns the profile's path (None:
    not written). Never raises: a problem is one ``note:`` line."""
    try:
        workflow = recipe.placement_workflow(cfg)
        if workflow is None or (not meter.steps and meter.error is None):
            return None
        if meter.error is not None:
            raise RuntimeError(f"the steps were not measured ({meter.error})")
        from rlinf.runners.memory_check import run_capacity  # lazy: torch only at the end of a run

        run = MeasuredRun(recipe, cfg, plan, shape, run_capacity(cfg.cluster), workflow, meter.steps,
                          config or "a run")
        profile_raw, header = build_profile(run)
        path = profile_path or (os.path.join(run_dir, PROFILE_FILE) if run_dir else None)
        if path is not None:
            write_profile(path, profile_raw, header)
        steps = meter.steps[1:] if len(meter.steps) > 1 else meter.steps
        profile = parse_profile(profile_raw, path or "measured")
        on_cpu = run.capacity.kind == "cpu"
        busy = ", ".join(f"{role} {profile.roles[role].work_s(profile) / _units(plan, role, on_cpu):.3g} s"
                         for role in workflow.roles())
        measured = sum(s.wall_s for s in steps) / len(steps)
        span = "step 1" if len(meter.steps) == 1 else f"steps 2-{len(meter.steps)}"
        current = used_placement(cfg.cluster.component_placement, workflow)
        local = cfg.cluster.backend == "local"
        if local:  # no advice there (below): only the run's own placement is predicted
            own = predict(_planner(cfg)(current, shape), profile, workflow, lookahead=workflow.lookahead_now,
                          pipeline_stages=workflow.pipeline_stages_now)
            result, predicted = None, f"; predicted for this placement {own.step_s:.3g} s"
        else:
            result = plan_search(workflow, profile, shape, current=current, current_lookahead=workflow.lookahead_now,
                                 current_stages=workflow.pipeline_stages_now, planner=_planner(cfg))
            predicted = (f"; predicted for this placement {result.current.prediction.step_s:.3g} s"
                         if result.current is not None and result.current.prediction is not None else "")
        print_fn(f"[rlinf] measured per step ({span}): {measured:.3g} s; busy: {busy}; weight sync "
                 f"{profile.weight_sync_s:.3g} s, phase switches {profile.offload_s:.3g} s each, driver "
                 f"{profile.driver_s_per_step:.3g} s{predicted}"
                 + ("; no placement advice on the local backend (its groups are threads of one process, "
                    "which the planner does not model)" if local else ""))
        line = None if local else advice_line(
            result, lambda r: _accepted(raw, recipe, r.candidate.settings(workflow), shape),
            config or "CONFIG", path or f"<run dir>/{PROFILE_FILE}")
        if line is not None:
            print_fn(line)
        return path
    except Exception as exc:  # noqa: BLE001 - the advice never fails a run
        print_fn(f"[rlinf] note: no placement advice: {' '.join(str(exc).split()) or type(exc).__name__}")
        return None
