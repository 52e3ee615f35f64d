"""Per-method totals of a worker group's calls: how many, wall seconds and CPU seconds inside the
workers, per rank; what the placement planner's measured profile is made of (issue 46).

Every answered call adds its rank's figures (from ``Worker._rlinf_call``: wall seconds, and CPU
seconds of the worker's process on Ray or of its thread on the local backend) when the driver
collects the answer (:class:`~rlinf.scheduler.GroupCall`); a call whose answer is never collected
is not counted, nor the scheduler's own ``_rlinf_*`` calls, nor a call that raised. The driver
reads them with :meth:`CallStats.snapshot` and starts over with :meth:`CallStats.reset` (or both at
once, :meth:`CallStats.take`).

Example:
    >>> stats = CallStats()
    >>> stats.add("update", 0, 2.0, 1.5); stats.add("update", 1, 3.0, 2.5); stats.add("generate", 0, 1.0, 0.5)
    >>> up = stats.snapshot()["update"]
    >>> up.calls, up.wall_s, up.cpu_s, up.ranks[1].wall_s, up.busiest_wall_s
    (2, 5.0, 4.0, 3.0, 3.0)
    >>> sorted(stats.take()), stats.snapshot()
    (['generate', 'update'], {})
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["CallStats", "MethodStats", "RankStats"]


@dataclass(frozen=True)
class RankStats:
    """One rank's totals for one method."""

    calls: int
    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class MethodStats:
    """One method's totals over the ranks, and per rank.

    Attributes:
        calls, wall_s, cpu_s: sums over every rank's answered calls.
        ranks: rank -> :class:`RankStats`.
    """

    calls: int
    wall_s: float
    cpu_s: float
    ranks: dict[int, RankStats] = field(default_factory=dict)

    @property
    def busiest_wall_s(self) -> float:
        """The most wall seconds one rank spent in the method (the group's busy time when its
        ranks work side by side)."""
        return max((r.wall_s for r in self.ranks.values()), default=0.0)

    @property
    def busiest_cpu_s(self) -> float:
        """The most CPU seconds one rank spent in the method."""
        return max((r.cpu_s for r in self.ranks.values()), default=0.0)


class CallStats:
    """Thread-safe per-method, per-rank totals (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, dict[int, list]] = {}

    def add(self, method: str, rank: int, wall_s: float, cpu_s: float) -> None:
        """Count one answered call of ``method`` on ``rank``."""
        with self._lock:
            per = self._rows.get(method)
            if per is None:
                per = self._rows[method] = {}
            row = per.get(rank)
            if row is None:
                per[rank] = [1, wall_s, cpu_s]
            else:
                row[0] += 1
                row[1] += wall_s
                row[2] += cpu_s

    def snapshot(self) -> dict[str, MethodStats]:
        """Method -> :class:`MethodStats` of every call counted since the last reset."""
        with self._lock:
            return self._build()

    def reset(self) -> None:
        """Forget every call counted so far."""
        with self._lock:
            self._rows = {}

    def take(self) -> dict[str, MethodStats]:
        """:meth:`snapshot` and :meth:`reset` at once (no call falls between them)."""
        with self._lock:
            out = self._build()
            self._rows = {}
            return out

    def _build(self) -> dict[str, MethodStats]:
        out = {}
        for method, per in self._rows.items():
            ranks = {r: RankStats(int(c), float(w), float(u)) for r, (c, w, u) in sorted(per.items())}
            out[method] = MethodStats(sum(r.calls for r in ranks.values()), sum(r.wall_s for r in ranks.values()),
                                      sum(r.cpu_s for r in ranks.values()), ranks)
        return out
