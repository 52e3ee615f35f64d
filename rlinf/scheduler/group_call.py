"""The handle a group call returns: wait (with timeout), ``await``, per-rank results and times."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rlinf.scheduler.backend import CallFailed
from rlinf.scheduler.errors import (
    CallTimeoutError,
    OutOfMemoryRaisedError,
    PeerDiedError,
    WorkerDiedError,
    WorkerError,
)
from rlinf.scheduler.memory_report import MemorySample, short_cause


class GroupCall:
    """One method call running on several ranks of a worker group.

    Use :meth:`wait` (blocking, optional timeout) or ``await call``. Either returns the results in
    rank order; :attr:`results_by_rank` and :attr:`elapsed` (seconds spent inside each worker) are
    filled once the call is done. The first failing rank raises at once, as
    :class:`~rlinf.scheduler.WorkerError` (with the remote traceback) or
    :class:`~rlinf.scheduler.WorkerDiedError`; the call never waits on the other ranks then. Each
    rank's answer adds its wall and CPU seconds to the group's
    :class:`~rlinf.scheduler.call_stats.CallStats` (``group.call_stats``).

    Args:
        group: the :class:`~rlinf.scheduler.WorkerGroup` called; its backend
            (:class:`~rlinf.scheduler.backend.Backend`) made ``refs`` and answers for them.
        method: the method called.
        ranks: the ranks called, in order.
        refs: one pending answer per rank.
    """

    def __init__(self, group: Any, method: str, ranks: list[int], refs: list):
        self.group, self.method, self.ranks = group, method, ranks
        self.backend = group.backend
        self._refs = dict(zip(ranks, refs))
        self._submitted = time.perf_counter()
        self.results_by_rank: dict[int, Any] = {}
        self.elapsed: dict[int, float] = {}
        #: rank -> CPU seconds of its call (its process on Ray, its thread on the local backend)
        self.cpu_time: dict[int, float] = {}
        self.wall_time: float | None = None

    def done(self) -> bool:
        """True when every rank has answered (successfully or not)."""
        return self.backend.all_done(self.pending_refs())

    def pending_refs(self) -> list:
        """The backend's refs of the ranks whose answer is not collected."""
        return [r for k, r in self._refs.items() if k not in self.results_by_rank]

    def wait(self, timeout: float | None = None) -> list[Any]:
        """Block until all ranks answer; return their results in rank order.

        Raises:
            CallTimeoutError: ``timeout`` seconds passed; names the ranks still running.
            WorkerError / WorkerDiedError: a rank failed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        rank_of = {ref: rank for rank, ref in self._refs.items()}
        pending = self.pending_refs()
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, pending = self.backend.wait_any(pending, left)
            if not ready:
                raise CallTimeoutError(self.group.name, self.method, sorted(rank_of[r] for r in pending), timeout)
            for ref in sorted(ready, key=rank_of.get):
                self._settle(rank_of[ref], lambda ref=ref: self.backend.result(ref))
        return self._finish()

    def __await__(self):
        return self._wait_async().__await__()

    async def _wait_async(self) -> list[Any]:
        pending = {rank: ref for rank, ref in self._refs.items() if rank not in self.results_by_rank}

        async def one(rank, ref):
            try:
                return rank, await self.backend.result_async(ref), None
            except Exception as exc:  # noqa: BLE001 - re-raised below with the worker's name
                return rank, None, exc

        for next_done in asyncio.as_completed([one(k, r) for k, r in pending.items()]):
            rank, value, exc = await next_done

            def get(value=value, exc=exc):
                if exc is not None:
                    raise exc
                return value

            self._settle(rank, get)
        return self._finish()

    def _settle(self, rank: int, get) -> None:
        worker = f"{self.group.name}[{rank}]"
        node = self.group.placement.processes[rank].node
        try:
            value, error, elapsed, *rest = get()  # rest: (memory sample, CPU seconds); none for control calls
        except CallFailed as failed:
            if failed.kind == "init":  # the worker's __init__ raised: like any worker exception
                raise WorkerError(worker, node, "__init__", failed.text) from None
            if failed.kind == "died":  # its process is gone: examined once (memory, the node)
                raise self.group.death_error(rank, self.method, failed.text, monitor=failed.monitor) from None
            if failed.kind == "stopped":  # e.g. a call to a shut-down group
                raise WorkerDiedError(worker, node, self.method, failed.text) from None
            raise WorkerError(worker, node, self.method, failed.text) from None
        self._deliver(rank, worker, node, value, error, elapsed, *rest)

    def _deliver(self, rank: int, worker: str, node: int, value: Any, error: str | None, elapsed: float,
                 memory: MemorySample | None = None, cpu: float | None = None) -> None:
        if memory is not None:
            self.group.last_memory[rank] = memory
        if error is not None:
            failure = _raised(worker, node, self.method, error, memory)
            dead = self._dead_peer()
            if dead is not None:  # the survivor's error is a symptom: name the dead worker
                raise PeerDiedError(dead, failure) from None
            raise failure
        self.results_by_rank[rank] = value
        self.elapsed[rank] = elapsed
        if cpu is not None:
            self.cpu_time[rank] = cpu
            if not self.method.startswith("_rlinf_"):
                self.group.call_stats.add(self.method, rank, elapsed, cpu)

    def _dead_peer(self, timeout: float = 10.0) -> WorkerDiedError | None:
        """A worker of any live group of this cluster that is dead, or None: checked when a
        rank raised, since a collective or link with a dead peer fails on the survivor first."""
        for group in self.group.cluster.live_groups():
            try:
                group.check_alive(timeout=timeout)
            except WorkerDiedError as died:
                return died
            except Exception:  # noqa: BLE001 - a slow or odd group is not a dead one
                continue
        return None

    def _finish(self) -> list[Any]:
        if self.wall_time is None:
            self.wall_time = time.perf_counter() - self._submitted
        return [self.results_by_rank[r] for r in self.ranks]


def _raised(worker: str, node: int, method: str, error: str, memory: MemorySample | None) -> WorkerError:
    """The driver's error for a call that raised: :class:`OutOfMemoryRaisedError` when the
    worker's sample says it ran out of memory, else :class:`WorkerError`."""
    if memory is None or memory.oom is None:
        return WorkerError(worker, node, method, error)
    device = memory.oom == "device"
    if device and memory.device is not None:
        used, total = memory.device
        figures = f"its GPU: {used / 2**30:.1f}/{total / 2**30:.1f} GiB used"
    else:
        figures = memory.node.describe(node) if memory.node is not None else None
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return OutOfMemoryRaisedError(worker, node, method, short_cause(lines[-1] if lines else "MemoryError"), error,
                                  device=device, memory=figures, peak=memory.describe_peak(),
                                  hint=memory.hint.describe() if memory.hint is not None else None)


def wait_first(calls: list[GroupCall], timeout: float | None = None) -> GroupCall | None:
    """Block until one of ``calls`` is done (every rank answered, successfully or not) and return
    it (the first of them in list order when several are); None when ``timeout`` passes first.
    A driver juggling calls that run side by side (a rollout that keeps going while the actor
    updates) sleeps here instead of polling."""
    if not calls:
        raise ValueError("wait_first needs at least one call")
    deadline = None if timeout is None else time.monotonic() + timeout
    ready: set = set()
    while True:
        for call in calls:
            if all(r in ready for r in call.pending_refs()) or call.done():
                return call
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        pending = [r for c in calls for r in c.pending_refs() if r not in ready]
        got, _ = calls[0].backend.wait_any(pending, left)
        ready.update(got)
