"""Keyed FIFO queues with backpressure, batch gets by count or weight, and timeouts (pure asyncio).

This is the state machine behind a :class:`~rlinf.scheduler.Channel`; it runs inside the channel's
Ray actor but has no Ray dependency, so its ordering guarantees are tested directly.

Guarantees, per key:

* FIFO: items leave in the order ``put`` calls arrived; blocked ``put`` calls are admitted in
  arrival order (a later put never overtakes a blocked earlier one).
* exactly once: an item is handed to one getter; a getter that times out returns what it had
  collected to the front of the queue, in order.
* getters are served in arrival order; the first waiting getter is filled before the next.

Example:
    >>> import asyncio
    >>> async def demo():
    ...     q = KeyedQueues(default_maxsize=0)
    ...     for i in range(5):
    ...         await q.put("obs", i, weight=i)
    ...     first = await q.get_batch("obs", count=2)
    ...     by_weight = await q.get_batch("obs", target_weight=5)
    ...     return first, by_weight, q.qsize("obs")
    >>> asyncio.run(demo())
    ([0, 1], [2, 3], 1)
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any


class QueueTimeout(TimeoutError):
    """A put or get did not complete within its timeout; nothing was taken or added."""


@dataclass
class _Getter:
    count: int | None
    target_weight: float | None
    future: asyncio.Future
    request_id: str | None = None
    got: list = field(default_factory=list)
    weights: list = field(default_factory=list)
    got_weight: float = 0.0

    def satisfied(self) -> bool:
        if self.count is not None:
            return len(self.got) >= self.count
        return self.got_weight >= self.target_weight


@dataclass
class _Putter:
    item: Any
    weight: float
    future: asyncio.Future
    request_id: str | None = None


@dataclass
class _Queue:
    maxsize: int
    items: deque = field(default_factory=deque)  # (item, weight)
    getters: deque = field(default_factory=deque)
    putters: deque = field(default_factory=deque)
    total_put: int = 0
    total_got: int = 0

    def full(self) -> bool:
        return self.maxsize > 0 and len(self.items) >= self.maxsize


class KeyedQueues:
    """Named FIFO sub-queues created on first use.

    Args:
        default_maxsize: capacity of a sub-queue not declared with :meth:`declare`; 0 = unbounded.
    """

    def __init__(self, default_maxsize: int = 0):
        if default_maxsize < 0:
            raise ValueError(f"maxsize must be >= 0 (0 = unbounded), got {default_maxsize}")
        self.default_maxsize = default_maxsize
        self._queues: dict[str, _Queue] = {}

    def declare(self, key: str, maxsize: int) -> None:
        """Set the capacity of sub-queue ``key`` (0 = unbounded); existing items are kept."""
        if maxsize < 0:
            raise ValueError(f"queue_size of {key!r} must be >= 0 (0 = unbounded), got {maxsize}")
        self._queue(key).maxsize = maxsize
        self._pump(self._queues[key])

    def _queue(self, key: str) -> _Queue:
        if key not in self._queues:
            self._queues[key] = _Queue(maxsize=self.default_maxsize)
        return self._queues[key]

    def qsize(self, key: str) -> int:
        """Items waiting in ``key`` (not counting blocked puts)."""
        return len(self._queue(key).items)

    def stats(self) -> dict[str, dict[str, int]]:
        """Per key: queued items, blocked puts, waiting getters, totals put and got."""
        return {
            k: {
                "queued": len(q.items),
                "blocked_puts": len(q.putters),
                "waiting_gets": len(q.getters),
                "total_put": q.total_put,
                "total_got": q.total_got,
            }
            for k, q in self._queues.items()
        }

    async def put(self, key: str, item: Any, weight: float = 1.0, timeout: float | None = None,
                  request_id: str | None = None) -> None:
        """Append ``item``; while ``key`` is full, wait (backpressure) up to ``timeout`` seconds.

        ``request_id`` lets :meth:`cancel` withdraw the put while it is still blocked.
        """
        if self.put_nowait(key, item, weight):
            return
        q = self._queue(key)
        putter = _Putter(item, weight, asyncio.get_running_loop().create_future(), request_id)
        q.putters.append(putter)
        try:
            await asyncio.wait_for(asyncio.shield(putter.future), timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if putter.future.done() and not putter.future.cancelled():
                return  # admitted just as the timeout fired
            if putter in q.putters:
                q.putters.remove(putter)
            putter.future.cancel()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise QueueTimeout(f"put to {key!r} timed out after {timeout} s (queue full)") from None

    def put_nowait(self, key: str, item: Any, weight: float = 1.0) -> bool:
        """Append ``item`` if ``key`` has room and no blocked put is ahead of it; else False
        (nothing added).

        Example:
            >>> q = KeyedQueues(default_maxsize=1)
            >>> q.put_nowait("obs", "a"), q.put_nowait("obs", "b"), q.qsize("obs")
            (True, False, 1)
        """
        check_weight(weight)
        q = self._queue(key)
        if q.putters or q.full():
            return False
        q.items.append((item, weight))
        q.total_put += 1
        self._pump(q)
        return True

    def get_batch_nowait(self, key: str, count: int | None = None,
                         target_weight: float | None = None) -> list | None:
        """``(item, weight)`` pairs of a batch (as :meth:`get_batch` takes it) if queued items
        fill it now and no getter is ahead; else None (nothing taken).

        Example:
            >>> q = KeyedQueues()
            >>> for i, w in enumerate([2, 2, 1]):
            ...     q.put_nowait("obs", i, weight=w)
            True
            True
            True
            >>> q.get_batch_nowait("obs", target_weight=3), q.get_batch_nowait("obs", count=2)
            ([(0, 2), (1, 2)], None)
        """
        check_batch_request(count, target_weight)
        q = self._queue(key)
        if q.getters:
            return None
        if count is None:
            total, count = 0.0, 0
            for _, weight in q.items:
                total, count = total + weight, count + 1
                if total >= target_weight:
                    break
            else:
                return None
        if len(q.items) < count:
            return None
        pairs = [q.items.popleft() for _ in range(count)]
        q.total_got += count
        self._pump(q)  # room was made: admit blocked puts
        return pairs

    async def get(self, key: str, timeout: float | None = None) -> Any:
        """Remove and return the oldest item of ``key``, waiting up to ``timeout`` seconds."""
        return (await self.get_batch(key, count=1, timeout=timeout))[0]

    def cancel(self, request_id: str) -> bool:
        """Withdraw a still-pending put or get: a put is dropped, a get gives back what it had.

        Returns False when nothing with that id is pending (it completed, or never arrived).
        """
        for q in self._queues.values():
            for putter in q.putters:
                if putter.request_id == request_id:
                    q.putters.remove(putter)
                    putter.future.cancel()
                    return True
            for getter in q.getters:
                if getter.request_id == request_id:
                    self._withdraw(q, getter)
                    return True
        return False

    def requeue_front(self, key: str, items: list) -> None:
        """Put ``(item, weight)`` pairs back at the front of ``key``, in order (undelivered replies)."""
        q = self._queue(key)
        for item, weight in reversed(items):
            q.items.appendleft((item, weight))
        q.total_got -= len(items)
        self._pump(q)

    async def get_batch(
        self,
        key: str,
        count: int | None = None,
        target_weight: float | None = None,
        timeout: float | None = None,
        request_id: str | None = None,
        with_weights: bool = False,
    ) -> list:
        """Remove ``count`` items, or items until their weights sum to ``target_weight``.

        Exactly one of ``count`` / ``target_weight`` must be given. Items are taken as they
        arrive, so a batch larger than the queue's capacity still completes.
        """
        check_batch_request(count, target_weight)
        q = self._queue(key)
        getter = _Getter(count, target_weight, asyncio.get_running_loop().create_future(), request_id)
        q.getters.append(getter)
        self._pump(q)
        try:
            got = await asyncio.wait_for(asyncio.shield(getter.future), timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if getter.future.done() and not getter.future.cancelled():
                got = getter.future.result()
            else:
                self._withdraw(q, getter)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise QueueTimeout(f"get from {key!r} timed out after {timeout} s") from None
        return list(zip(got, getter.weights)) if with_weights else got

    def _withdraw(self, q: _Queue, getter: _Getter) -> None:
        """Drop a pending getter and give back what it had collected, in order, at the front."""
        if getter in q.getters:
            q.getters.remove(getter)
        getter.future.cancel()
        for item, weight in reversed(list(zip(getter.got, getter.weights))):
            q.items.appendleft((item, weight))
        q.total_got -= len(getter.got)
        getter.got, getter.weights = [], []
        self._pump(q)

    def _pump(self, q: _Queue) -> None:
        """Move admitted putters into the queue and hand items to waiting getters, in order."""
        while True:
            while q.putters and not q.full():
                putter = q.putters.popleft()
                q.items.append((putter.item, putter.weight))
                q.total_put += 1
                putter.future.set_result(None)
            if not (q.getters and q.items):
                return
            getter = q.getters[0]
            item, weight = q.items.popleft()
            getter.got.append(item)
            getter.weights.append(weight)
            getter.got_weight += weight
            q.total_got += 1
            if getter.satisfied():
                q.getters.popleft()
                getter.future.set_result(getter.got)


def check_weight(weight: Any) -> None:
    """A put's weight must be a finite real number >= 0 (not a bool)."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
            or weight < 0:
        raise ValueError(f"weight must be a finite number >= 0, got {weight!r}")


def check_batch_request(count: Any, target_weight: Any) -> None:
    """Exactly one of ``count`` (int >= 1) and ``target_weight`` (finite number > 0)."""
    if (count is None) == (target_weight is None):
        raise ValueError("give exactly one of count or target_weight")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"count must be an int >= 1, got {count!r}")
    if target_weight is not None and (
            isinstance(target_weight, bool) or not isinstance(target_weight, (int, float))
            or not math.isfinite(target_weight) or target_weight <= 0):
        raise ValueError(f"target_weight must be a finite number > 0, got {target_weight!r}")
