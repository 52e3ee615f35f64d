"""A small event simulation: tasks with dependencies, exclusive devices and shared CPU cores.

Each :class:`Task` holds its ``devices`` exclusively while it runs (an accelerator, or a role's own
token that makes its tasks run one at a time), starts when its dependencies are done and its
devices are free (ready tasks in the order they were added), and has ``work`` seconds to do at
rate 1. Tasks that name ``cores`` (node -> cores they keep busy) share each node's cores: when the
running tasks of a node want ``D`` cores and the node has ``C``, each runs at ``min(1, C / D)``
(processor sharing; a task on several nodes goes at its slowest node's rate). Without core
figures every task runs at rate 1.

Example: two tasks of 2 s on one core, independent, on different devices, share the core and both
end at 4 s; a third task on the first one's device starts at 4 s:

    >>> tasks = [Task("a", 2.0, devices=("d0",), cores={0: 1}), Task("b", 2.0, devices=("d1",), cores={0: 1}),
    ...          Task("c", 1.0, devices=("d0",), cores={0: 1}, deps=("a",))]
    >>> {k: v for k, v in simulate(tasks, {0: 1}).items()}
    {'a': (0.0, 4.0), 'b': (0.0, 4.0), 'c': (4.0, 5.0)}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Task", "simulate"]

_EPS = 1e-9


@dataclass(frozen=True)
class Task:
    """One piece of work.

    Attributes:
        name: unique id.
        work: seconds at full rate (>= 0).
        devices: what it holds exclusively while it runs.
        cores: node -> cores it keeps busy (shared, see the module docstring).
        deps: names of tasks that must end first.
        role: who does it (for timelines and busy shares).
        kind: what it is (``work``, ``switch``, ``sync``, ``wait``).
        step: the step it belongs to.
    """

    name: str
    work: float
    devices: tuple = ()
    cores: Mapping[int, float] = field(default_factory=dict)
    deps: tuple[str, ...] = ()
    role: str = ""
    kind: str = "work"
    step: int = 0


def simulate(tasks: Sequence[Task],
             cores_per_node: Mapping[int, float] | None = None) -> dict[str, tuple[float, float]]:
    """Start and end time of every task (see the module docstring).

    Raises:
        ValueError: a duplicate name, an unknown dependency, or a cycle.
    """
    by_name: dict[str, Task] = {}
    order: dict[str, int] = {}
    for i, task in enumerate(tasks):
        if task.name in by_name:
            raise ValueError(f"task {task.name!r} is given twice")
        by_name[task.name], order[task.name] = task, i
    waiting: dict[str, int] = {}
    children: dict[str, list[str]] = {name: [] for name in by_name}
    for task in tasks:
        for dep in task.deps:
            if dep not in by_name:
                raise ValueError(f"task {task.name!r} depends on unknown task {dep!r}")
            children[dep].append(task.name)
        waiting[task.name] = len(task.deps)
    ready = sorted((n for n, k in waiting.items() if k == 0), key=order.__getitem__)
    busy: set = set()
    running: dict[str, float] = {}  # name -> work left
    times: dict[str, tuple[float, float]] = {}
    starts: dict[str, float] = {}
    now = 0.0
    cores = dict(cores_per_node or {})
    while ready or running:
        started = []
        for name in ready:
            devices = by_name[name].devices
            if not busy.intersection(devices):
                busy.update(devices)
                running[name] = by_name[name].work
                starts[name] = now
                started.append(name)
        if started:
            gone = set(started)
            ready = [n for n in ready if n not in gone]
        rates = _rates(running, by_name, cores)
        done = [n for n, left in running.items() if left <= _EPS]
        if not done:
            if not running:
                raise ValueError("the tasks have a dependency cycle: "
                                 + ", ".join(sorted(n for n, k in waiting.items() if k > 0)[:5]))
            dt = min(left / rates[n] for n, left in running.items())
            now += dt
            for n in running:
                running[n] -= dt * rates[n]
            done = [n for n, left in running.items() if left <= _EPS * max(1.0, by_name[n].work)]
            if not done:  # rounding: finish the closest one
                done = [min(running, key=lambda n: running[n] / rates[n])]
        newly: list[str] = []
        for name in done:
            del running[name]
            busy.difference_update(by_name[name].devices)
            times[name] = (starts[name], now)
            for child in children[name]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    newly.append(child)
        ready = sorted(ready + newly, key=order.__getitem__)
    if len(times) != len(by_name):
        stuck = sorted(set(by_name) - set(times))[:5]
        raise ValueError(f"the tasks have a dependency cycle: {', '.join(stuck)}")
    return times


def _rates(running: Mapping[str, float], by_name: Mapping[str, Task], cores: Mapping[int, float]) -> dict[str, float]:
    if not cores:
        return {n: 1.0 for n in running}
    demand: dict[int, float] = {}
    for n in running:
        for node, c in by_name[n].cores.items():
            demand[node] = demand.get(node, 0.0) + c
    factor = {node: min(1.0, cores.get(node, d) / d) if d > 0 else 1.0 for node, d in demand.items()}
    return {n: min((factor[node] for node in by_name[n].cores), default=1.0) for n in running}
