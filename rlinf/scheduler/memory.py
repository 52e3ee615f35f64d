"""Memory per rank, per accelerator and per node: the scheduler's side of the memory estimate.

The scheduler knows processes, accelerators and nodes, not what a component holds. A component's
estimate (:class:`ComponentMemory`: bytes per rank with a breakdown) comes from a layer that knows
the run (``rlinf.runners.memory_plan``); this module adds them up where the placement puts them,
compares the sums with what a device holds (:class:`Capacity`) and renders the result.

Rules of the sum:

* ``device`` items of a process are spread evenly over its accelerators (a tensor-parallel
  engine on 2 GPUs puts half on each). On one accelerator, the components there add their
  resident items, plus the largest ``phase`` total among them: components that share an
  accelerator take turns (rlinf's collocated schedule), and ``phase`` items (activations, a
  rollout engine offloaded while the actor trains) are held only during the component's turn.
* ``host`` items (CPU-side state: offloaded weights, simulators, browsers; everything on a CPU
  node) add up per node and are compared with the node's RAM; each rank's share is that RAM
  divided among the ranks on the node.

Example:
    >>> from rlinf.scheduler.placement import ClusterShape, plan_placement
    >>> plan = plan_placement({"actor,rollout": "0-1"}, ClusterShape(1, 2))
    >>> est = MemoryEstimate({
    ...     "actor": ComponentMemory("actor", (MemoryItem("weights", 6 * GIB), MemoryItem("activations", 4 * GIB,
    ...                                        phase=True)), remedies=("actor.micro_batch_size",)),
    ...     "rollout": ComponentMemory("rollout", (MemoryItem("kv_cache", 8 * GIB, phase=True),))})
    >>> [round(load.need / GIB, 1) for load in device_loads(plan, est)]
    [14.0, 14.0]
    >>> [o.component for o in check_capacity(plan, est, Capacity(accelerator_bytes=12 * GIB))]
    ['rollout', 'rollout']
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from rlinf.scheduler.placement.plan import PlacementPlan

__all__ = ["GIB", "Capacity", "ComponentMemory", "DeviceLoad", "MemoryEstimate", "MemoryItem", "Overrun",
           "check_capacity", "device_loads", "file_estimator", "fmt_bytes", "node_ram_bytes", "render_memory"]

GIB = 1 << 30

#: the module that estimates a whole config file's memory for ``python -m rlinf.scheduler.placement
#: CONFIG --memory``. The scheduler names it and imports it only when ``--memory`` is asked for:
#: the estimate needs the run's configs and model shapes (layers above this one), while the
#: placement map, the sums and the device check stay here. It registers itself on import.
ESTIMATOR_MODULES = ("rlinf.runners.memory_plan",)
_FILE_ESTIMATORS: list[Callable] = []


@dataclass(frozen=True)
class MemoryItem:
    """One part of a rank's memory.

    Attributes:
        name: what it is (``weights``, ``gradients``, ``optimizer``, ``activations``, ``kv_cache``, ...).
        bytes: bytes per rank.
        phase: held only during the component's own turn (see the module docstring).
        where: ``device`` (the rank's accelerators) or ``host`` (the node's RAM).
        note: how the figure was made (shown with ``--memory``).
    """

    name: str
    bytes: int
    phase: bool = False
    where: str = "device"
    note: str = ""


@dataclass(frozen=True)
class ComponentMemory:
    """Bytes per rank of one component, with a breakdown.

    Attributes:
        component: the component's name in the placement.
        items: the parts (:class:`MemoryItem`), the same on every rank.
        remedies: config keys that would lower it, named when it does not fit.
        note: one line shown with it (e.g. the model shape it was computed from).
    """

    component: str
    items: tuple[MemoryItem, ...]
    remedies: tuple[str, ...] = ()
    note: str = ""

    def total(self, where: str = "device", phase: bool | None = None) -> int:
        """Bytes of the items at ``where`` (``phase``: only those held in turns / only resident)."""
        return sum(i.bytes for i in self.items if i.where == where and (phase is None or i.phase == phase))


@dataclass(frozen=True)
class MemoryEstimate:
    """The per-rank estimate of every placed component (absent: not estimated, see ``notes``)."""

    components: dict[str, ComponentMemory]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Capacity:
    """What one accelerator and one node hold (None: unknown, not checked).

    Attributes:
        accelerator_bytes: memory of one accelerator.
        node_bytes: RAM of one node.
        source: where the figures come from (shown in the report).
        kind: ``gpu`` (model state on the accelerators) or ``cpu`` (a CPU run: everything in RAM).
    """

    accelerator_bytes: int | None = None
    node_bytes: int | None = None
    source: str = ""
    kind: str = "gpu"


@dataclass(frozen=True)
class DeviceLoad:
    """The estimated peak of one accelerator (``slot`` = its local index) or one node's RAM
    (``slot`` = None), and the components that make it."""

    node: int
    slot: int | None
    need: int
    parts: dict[str, int] = field(default_factory=dict)
    ranks: int = 1

    @property
    def label(self) -> str:
        return f"node {self.node} acc {self.slot}" if self.slot is not None else f"node {self.node} RAM"


@dataclass(frozen=True)
class Overrun:
    """A device whose estimate exceeds its capacity; ``component`` is its largest part."""

    load: DeviceLoad
    have: int
    component: str


def fmt_bytes(n: float) -> str:
    """``fmt_bytes(3 * 2**30) == '3.00 GiB'``; MiB below 1 GiB."""
    return f"{n / GIB:.2f} GiB" if abs(n) >= GIB else f"{n / 2**20:.1f} MiB"


def node_ram_bytes() -> int | None:
    """This machine's RAM (the planning figure for every node), or None when unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def device_loads(plan: PlacementPlan, estimate: MemoryEstimate) -> list[DeviceLoad]:
    """Every used accelerator's peak (resident sums + the largest turn), then every node's RAM."""
    resident: dict[tuple[int, int], dict[str, float]] = {}
    turns: dict[tuple[int, int], dict[str, float]] = {}
    host: dict[int, dict[str, float]] = {}
    ranks_on_node: dict[int, int] = {}
    for name, comp in plan.components.items():
        mem = estimate.components.get(name)
        for proc in comp.processes:
            ranks_on_node[proc.node] = ranks_on_node.get(proc.node, 0) + 1
            if mem is None:
                continue
            host.setdefault(proc.node, {})[name] = host.get(proc.node, {}).get(name, 0) + mem.total("host")
            for acc in proc.accelerators:
                share = 1 / len(proc.accelerators)
                for table, phase in ((resident, False), (turns, True)):
                    cell = table.setdefault((proc.node, acc), {})
                    cell[name] = cell.get(name, 0) + mem.total("device", phase) * share
    out = []
    for key in sorted(set(resident) | set(turns)):
        res, turn = resident.get(key, {}), turns.get(key, {})
        big = max(turn, key=turn.get, default=None)
        parts = {n: int(res.get(n, 0) + (turn[n] if n == big else 0)) for n in sorted(set(res) | set(turn))}
        parts = {n: b for n, b in parts.items() if b}
        if not parts:
            continue
        out.append(DeviceLoad(key[0], key[1], sum(parts.values()), parts))
    for node in sorted(host):
        parts = {n: int(b) for n, b in host[node].items() if b}
        if parts:
            out.append(DeviceLoad(node, None, sum(parts.values()), parts, ranks_on_node[node]))
    return out


def check_capacity(plan: PlacementPlan, estimate: MemoryEstimate, capacity: Capacity) -> list[Overrun]:
    """The devices whose estimate exceeds ``capacity`` (unknown capacities are not checked)."""
    out = []
    for load in device_loads(plan, estimate):
        have = capacity.accelerator_bytes if load.slot is not None else capacity.node_bytes
        if have is not None and load.need > have:
            out.append(Overrun(load, have, max(load.parts, key=load.parts.get)))
    return out


def render_memory(plan: PlacementPlan, estimate: MemoryEstimate, capacity: Capacity) -> str:
    """The estimate as text: per component the bytes per rank and their breakdown, then every
    device's peak against its capacity (``OVER`` where it does not fit)."""
    lines = ["memory estimate (per rank):"]
    for name, comp in plan.components.items():
        mem = estimate.components.get(name)
        if mem is None:
            lines.append(f"  {name} ({comp.world_size}): not estimated")
            continue
        totals = [f"{fmt_bytes(mem.total(w))} {w}" for w in ("device", "host") if mem.total(w)]
        lines.append(f"  {name} ({comp.world_size}): {' + '.join(totals) or '0'}"
                     + (f"  [{mem.note}]" if mem.note else ""))
        for item in mem.items:
            tags = ", ".join(t for t in (item.where if item.where != "device" else "",
                                         "in turns" if item.phase else "") if t)
            lines.append(f"    {item.name:<14} {fmt_bytes(item.bytes):>11}"
                         + (f"  ({tags})" if tags else "") + (f"  {item.note}" if item.note else ""))
    lines.append(f"device peaks ({capacity.source or 'capacity unknown'}):")
    for load in device_loads(plan, estimate):
        have = capacity.accelerator_bytes if load.slot is not None else capacity.node_bytes
        parts = " + ".join(f"{n} {fmt_bytes(b)}" for n, b in load.parts.items())
        verdict = "" if have is None else (f" of {fmt_bytes(have)}" + ("  OVER" if load.need > have else "  ok"))
        share = f" ({load.ranks} ranks, {fmt_bytes(have / load.ranks)} each)" if (
            load.slot is None and have is not None) else ""
        lines.append(f"  {load.label}: {fmt_bytes(load.need)}{verdict}{share}  = {parts}")
    lines += [f"note: {n}" for n in estimate.notes]
    return "\n".join(lines)


def register_file_estimator(fn: Callable) -> Callable:
    """Register ``fn(path) -> (cluster mapping, estimate(plan, capacity) -> MemoryEstimate)`` for
    ``--memory`` (a decorator)."""
    _FILE_ESTIMATORS.append(fn)
    return fn


def file_estimator() -> Callable:
    """The registered config-file estimator, importing :data:`ESTIMATOR_MODULES` on first use."""
    if not _FILE_ESTIMATORS:
        for module in ESTIMATOR_MODULES:
            importlib.import_module(module)
    return _FILE_ESTIMATORS[-1]
