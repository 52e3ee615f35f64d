"""Who did what when: wall-clock intervals of a run's roles, written as ``timeline.json``.

Each interval is ``{"who", "what", "start", "end"}`` in seconds since the timeline's start (wall
clock, so intervals recorded by other processes on the same machine line up). The math and tool
agent runs write ``<run>/timeline.json`` at the end: the trainer's phases of every step, and in
``runner.rollout_mode: fully_async`` each rollout rank's generation rounds, idle waits and pauses
for weights. ``bench/bench_fully_async.py`` draws it.

Example:
    >>> tl = Timeline()
    >>> tl.add("trainer", "update", tl.t0 + 1.0, tl.t0 + 2.5)
    >>> tl.busy_share("trainer", "update", end=tl.t0 + 5.0)
    0.3
"""

from __future__ import annotations

import json
import os
import time

#: at most this many intervals per role are kept (a long run keeps its first ones)
MAX_PER_ROLE = 20000


class Timeline:
    """Intervals by role; times are ``time.time()`` stamps, stored relative to :attr:`t0`."""

    def __init__(self, t0: float | None = None):
        self.t0 = time.time() if t0 is None else t0
        self.events: list[dict] = []
        self._counts: dict[str, int] = {}

    def add(self, who: str, what: str, start: float, end: float) -> None:
        """Record ``who`` doing ``what`` from ``start`` to ``end`` (``time.time()`` stamps)."""
        if self._counts.get(who, 0) >= MAX_PER_ROLE:
            return
        self._counts[who] = self._counts.get(who, 0) + 1
        self.events.append({"who": who, "what": what, "start": round(start - self.t0, 4),
                            "end": round(end - self.t0, 4)})

    def extend(self, who: str, intervals: list) -> None:
        """Add ``(what, start, end)`` tuples recorded elsewhere (a rollout rank's)."""
        for what, start, end in intervals:
            self.add(who, what, start, end)

    def busy_share(self, who: str, what: str, end: float | None = None) -> float:
        """Share of the wall time from :attr:`t0` to ``end`` (default: the last interval's end)
        that ``who`` spent in ``what``."""
        mine = [e for e in self.events if e["who"] == who and e["what"] == what]
        total = (end - self.t0) if end is not None else max((e["end"] for e in self.events), default=0.0)
        return round(sum(e["end"] - e["start"] for e in mine) / total, 6) if total > 0 else 0.0

    def write(self, path: str) -> str:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"t0": self.t0, "events": self.events}, f)
        os.replace(tmp, path)
        return path
