"""The handle a group call returns: wait (with timeout), ``await``, per-rank results and times."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from rlinf.scheduler.errors import (
    CallTimeoutError,
    OutOfMemoryRaisedError,
    PeerDiedError,
    WorkerDiedError,
    WorkerError,
)
from rlinf.scheduler.memory_report import MemorySample, short_cause

if TYPE_CHECKING:
    from rlinf.scheduler.worker_group import WorkerGroup


class GroupCall:
    """One method call running on several ranks of a worker group.

    Use :meth:`wait` (blocking, optional timeout) or ``await call``. Either returns the results in
    rank order; :attr:`results_by_rank` and :attr:`elapsed` (seconds spent inside each worker) are
    filled once the call is done. The first failing rank raises at once, as
    :class:`~rlinf.scheduler.WorkerError` (with the remote traceback) or
    :class:`~rlinf.scheduler.WorkerDiedError`; the call never waits on the other ranks then.
    """

    def __init__(self, group: WorkerGroup, method: str, ranks: list[int], refs: list):
        self.group, self.method, self.ranks = group, method, ranks
        self._refs = dict(zip(ranks, refs))
        self._submitted = time.perf_counter()
        self.results_by_rank: dict[int, Any] = {}
        self.elapsed: dict[int, float] = {}
        self.wall_time: float | None = None
        #: local mode: the refs are concurrent.futures.Future objects (rlinf.scheduler.local)
        self._local = bool(getattr(group, "is_local", False))

    def done(self) -> bool:
        """True when every rank has answered (successfully or not)."""
        if self._local:
            return all(ref.done() for ref in self._refs.values())
        import ray

        pending = [r for k, r in self._refs.items() if k not in self.results_by_rank]
        ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
        return len(ready) == len(pending)

    def pending_refs(self) -> list:
        """The Ray object refs (local mode: futures) of the ranks whose answer is not collected."""
        return [r for k, r in self._refs.items() if k not in self.results_by_rank]

    def wait(self, timeout: float | None = None) -> list[Any]:
        """Block until all ranks answer; return their results in rank order.

        Raises:
            CallTimeoutError: ``timeout`` seconds passed; names the ranks still running.
            WorkerError / WorkerDiedError: a rank failed.
        """
        if self._local:
            return self._wait_local(timeout)
        import ray

        deadline = None if timeout is None else time.monotonic() + timeout
        rank_of = {ref: rank for rank, ref in self._refs.items()}
        pending = [r for k, r in self._refs.items() if k not in self.results_by_rank]
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, pending = ray.wait(pending, num_returns=1, timeout=left)
            if not ready:
                still = sorted(rank_of[r] for r in pending)
                raise CallTimeoutError(self.group.name, self.method, still, timeout)
            for ref in ready:
                self._settle(rank_of[ref], lambda ref=ref: ray.get(ref))
        return self._finish()

    def _wait_local(self, timeout: float | None) -> list[Any]:
        from concurrent.futures import FIRST_COMPLETED
        from concurrent.futures import wait as wait_futures

        deadline = None if timeout is None else time.monotonic() + timeout
        rank_of = {ref: rank for rank, ref in self._refs.items()}
        pending = {r for k, r in self._refs.items() if k not in self.results_by_rank}
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, pending = wait_futures(pending, timeout=left, return_when=FIRST_COMPLETED)
            if not ready:
                raise CallTimeoutError(self.group.name, self.method, sorted(rank_of[r] for r in pending), timeout)
            for ref in sorted(ready, key=rank_of.get):
                self._settle(rank_of[ref], ref.result)
        return self._finish()

    def __await__(self):
        return self._wait_async().__await__()

    async def _wait_async(self) -> list[Any]:
        pending = {rank: ref for rank, ref in self._refs.items() if rank not in self.results_by_rank}

        async def one(rank, ref):
            try:
                return rank, await (asyncio.wrap_future(ref) if self._local else ref), None
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
        if self._local:
            from rlinf.scheduler.local.executor import InitFailed

            try:
                value, error, elapsed, *memory = get()
            except InitFailed as exc:  # the in-process worker's __init__ raised
                raise WorkerError(worker, node, "__init__", exc.text) from None
            except Exception as exc:  # noqa: BLE001 - e.g. a call to a shut-down group
                raise WorkerDiedError(worker, node, self.method, _first_line(exc)) from None
            self._deliver(rank, worker, node, value, error, elapsed, *memory)
            return
        import ray

        try:
            value, error, elapsed, *memory = get()
        except ray.exceptions.RayActorError as exc:
            if exc.actor_init_failed:
                # The worker's __init__ raised: report it like any other worker exception.
                raise WorkerError(worker, node, "__init__", _strip_ansi(exc.error_msg)) from None
            raise self.group.death_error(rank, self.method, _strip_ansi(str(exc))) from None
        except ray.exceptions.OutOfMemoryError as exc:  # Ray's memory monitor killed the worker
            raise self.group.death_error(rank, self.method, str(exc), monitor=True) from None
        except ray.exceptions.RayError as exc:
            raise WorkerError(worker, node, self.method, str(exc)) from None
        self._deliver(rank, worker, node, value, error, elapsed, *memory)

    def _deliver(self, rank: int, worker: str, node: int, value: Any, error: str | None, elapsed: float,
                 memory: MemorySample | None = None) -> None:
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def wait_first(calls: list[GroupCall], timeout: float | None = None) -> GroupCall | None:
    """Block until one of ``calls`` is done (every rank answered, successfully or not) and return
    it (the first of them in list order when several are); None when ``timeout`` passes first.
    A driver juggling calls that run side by side (a rollout that keeps going while the actor
    updates) sleeps here instead of polling."""
    deadline = None if timeout is None else time.monotonic() + timeout
    ready: set = set()
    while True:
        for call in calls:
            if all(r in ready for r in call.pending_refs()) or call.done():
                return call
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        if any(c._local for c in calls):
            time.sleep(0.002 if left is None else min(0.002, left))
            continue
        import ray

        pending = [r for c in calls for r in c.pending_refs() if r not in ready]
        got, _ = ray.wait(pending, num_returns=1, timeout=left)
        ready.update(got)
