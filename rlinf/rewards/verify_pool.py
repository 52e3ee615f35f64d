"""A small pool of math-verify child processes with a time budget per pair.

Used by :class:`~rlinf.rewards.MathVerifier`, which adds answer extraction,
locking and pickling. Children run :mod:`._verify_worker` with math-verify's own
``signal.alarm`` timeouts off; this pool owns the clock instead:

* a pair gets ``timeout_s`` from the moment it is handed to a child; a child still busy
  after that is killed (SIGKILL) and replaced, and the pair scores ``False``;
* a child that dies while holding a pair (e.g. a C stack overflow) is replaced and the pair
  is retried once (the child may have died before the pair reached it); a second death
  scores it ``False``;
* :meth:`VerifyPool.run` returns by ``total_timeout_s`` whatever happens; pairs not finished
  by then score ``False`` and the children still busy with them are replaced.

Children come from a ``forkserver`` (default) or ``spawn`` context, never ``fork``: the
caller may be a multi-threaded Ray actor. The fork server preloads math-verify, and a child
runs ``_verify_worker.py`` as a script (``runpy.run_path``), so neither imports ``rlinf``
(and with it torch). As with any spawn/forkserver child, a child re-runs the caller's main
*script* (not a ``python -m`` module) under ``__mp_main__``; that, not math-verify, is most
of a replacement's start-up (about 0.5 s measured inside a Ray actor).
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import runpy
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from rlinf.rewards import _verify_worker

__all__ = ["VerifyPool", "default_start_method"]

logger = logging.getLogger(__name__)

_PRELOAD_LOCK = threading.Lock()
_PRELOAD_DONE = False


def default_start_method() -> str:
    """``"forkserver"`` where the platform has it, else ``"spawn"``.

    >>> default_start_method() in ("forkserver", "spawn")
    True
    """
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def _mp_context(start_method: str):
    global _PRELOAD_DONE
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        with _PRELOAD_LOCK:
            if not _PRELOAD_DONE:  # only takes effect if the fork server is not running yet
                ctx.set_forkserver_preload(["__main__", "math_verify"])
                _PRELOAD_DONE = True
    return ctx


@dataclass
class _Child:
    proc: Any
    conn: Any
    started: float
    ready: bool = False
    job: int | None = None
    deadline: float = math.inf


class VerifyPool:
    """``num_processes`` math-verify children, started on the first :meth:`run`.

    Not thread-safe: one caller at a time (MathVerifier holds a lock around it).

    Args:
        num_processes: Children verifying in parallel.
        timeout_s: Budget of one pair.
        start_method: ``"forkserver"`` or ``"spawn"``.
        memory_headroom_mb: Address-space allowance of a child above its start-up size.
        startup_timeout_s: How long a child may take to report ready.
    """

    def __init__(self, num_processes: int, timeout_s: float, start_method: str,
                 memory_headroom_mb: int | None, startup_timeout_s: float) -> None:
        self.num_processes = num_processes
        self.timeout_s = timeout_s
        self.start_method = start_method
        self.memory_headroom_mb = memory_headroom_mb
        self.startup_timeout_s = startup_timeout_s
        self._children: list[_Child] = []
        self._batch = 0

    @property
    def pids(self) -> list[int]:
        """Process ids of the current children."""
        return [c.proc.pid for c in self._children]

    def _start(self) -> _Child:
        ctx = _mp_context(self.start_method)
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        child_globals = {"child_conn": child_conn, "memory_headroom_mb": self.memory_headroom_mb}
        proc = ctx.Process(target=runpy.run_path, name="rlinf-math-verify", daemon=True,
                           args=(_verify_worker.__file__,),
                           kwargs={"init_globals": child_globals,
                                   "run_name": _verify_worker.CHILD_RUN_NAME})
        proc.start()
        child_conn.close()  # so a dead child shows up as EOF on parent_conn
        return _Child(proc, parent_conn, time.monotonic())

    @staticmethod
    def _stop(child: _Child, grace_s: float = 0.0) -> None:
        if grace_s:
            child.proc.join(grace_s)
        if child.proc.is_alive():
            child.proc.kill()
        child.proc.join(5.0)
        child.conn.close()
        try:
            child.proc.close()
        except ValueError:  # still running 5 s after SIGKILL: leave it to the OS
            pass

    def _replace(self, child: _Child) -> None:
        self._stop(child)
        self._children[self._children.index(child)] = self._start()

    def close(self) -> None:
        """Ask every child to exit, kill the ones that do not within 0.5 s, and reap them."""
        for child in self._children:
            try:
                child.conn.send(None)
            except (OSError, ValueError):
                pass
        for child in self._children:
            self._stop(child, grace_s=0.5)
        self._children = []

    def run(self, pairs: list[tuple[str, str]], total_timeout_s: float) -> list[bool]:
        """Verify ``(gold, answer)`` pairs (both ``$...$``-wrapped); one bool per pair.

        Raises:
            RuntimeError: If children cannot start (math-verify missing, repeated deaths).
        """
        for child in list(self._children):
            if child.job is not None:  # left busy by an interrupted run (e.g. Ctrl-C)
                self._replace(child)
        while len(self._children) < self.num_processes:
            self._children.append(self._start())
        self._batch += 1
        results = [False] * len(pairs)
        end = time.monotonic() + total_timeout_s
        # Pairs sharing a gold (a sampling group) go to the same child, whose caches then hit;
        # an idle child with an empty queue steals from the tail of the longest one.
        queues: list[deque[int]] = [deque() for _ in self._children]
        for job, (gold, _) in enumerate(pairs):
            queues[hash(gold) % len(queues)].append(job)
        retried: set[int] = set()
        timed_out = crashed = start_failures = 0
        while any(queues) or any(c.job is not None for c in self._children):
            now = time.monotonic()
            if now >= end:
                break
            for slot, child in enumerate(list(self._children)):
                if not child.ready or child.job is not None:
                    continue
                own, longest = queues[slot], max(queues, key=len)
                if not longest:
                    break
                job = own.popleft() if own else longest.pop()
                try:
                    child.conn.send((self._batch, job, *pairs[job]))
                except (OSError, ValueError):  # died while idle: run the job later
                    queues[slot].appendleft(job)
                    self._replace(child)
                    continue
                child.job, child.deadline = job, now + self.timeout_s
            starting = [c.started + self.startup_timeout_s for c in self._children if not c.ready]
            wake = min([end] + [c.deadline for c in self._children] + starting)
            by_conn = {c.conn: c for c in self._children}
            for conn in wait(list(by_conn), timeout=max(0.0, wake - time.monotonic())):
                child = by_conn[conn]
                try:
                    message = conn.recv()
                except (EOFError, OSError):  # the child died
                    if not child.ready:
                        start_failures += 1
                    elif child.job is not None and child.job not in retried:
                        retried.add(child.job)
                        queues[self._children.index(child)].appendleft(child.job)
                    elif child.job is not None:
                        crashed += 1
                    self._replace(child)
                    continue
                if message[0] == "ready":
                    child.ready = True
                elif message[0] == "error":
                    raise RuntimeError(f"math-verify process could not start: {message[1]}")
                elif message[0] == self._batch and message[1] == child.job:
                    results[child.job] = bool(message[2])
                    child.job, child.deadline = None, math.inf
            now = time.monotonic()
            for child in list(self._children):
                if child.job is not None and now >= child.deadline:
                    timed_out += 1
                    self._replace(child)
                elif not child.ready and now >= child.started + self.startup_timeout_s:
                    start_failures += 1
                    self._replace(child)
            if start_failures >= 3 * self.num_processes:
                raise RuntimeError("math-verify processes keep failing to start")
        unfinished = sum(map(len, queues))
        for child in list(self._children):
            if child.job is not None:  # past the batch bound: its answer would come too late
                unfinished += 1
                self._replace(child)
        if timed_out or crashed or unfinished:
            logger.warning("math verifier: %d of %d pairs scored incorrect for lack of time "
                           "(%d over the %.1f s budget, %d killed two processes, %d past the "
                           "%.1f s batch bound)", timed_out + crashed + unfinished, len(pairs),
                           timed_out, self.timeout_s, crashed, unfinished, total_timeout_s)
        return results
