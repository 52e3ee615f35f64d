"""What every channel is, whichever backend holds its queues: the API, its errors and the deadline
a blocking get is cut into.

Implementations: :class:`~rlinf.scheduler.channel.ray_channel.RayChannel` (a channel actor, with
a same-node socket) and :class:`~rlinf.scheduler.local.channel.LocalChannel` (queues in this
process). Users make channels with :meth:`rlinf.scheduler.Channel.create`, which asks the run's
backend (:mod:`rlinf.scheduler.backend`).

Example:
    >>> deadline = Deadline(timeout=0.25)
    >>> 0 < deadline.next_slice() <= 0.25, deadline.passed()
    (True, False)
    >>> Deadline(None).next_slice() == GET_SLICE_S
    True
"""

from __future__ import annotations

import abc
import time
from typing import Any

#: A blocked get re-asks the channel's queues this often, so a consumer that dies while waiting
#: stops holding a claim on the next item within this many seconds.
GET_SLICE_S = 1.0


class ChannelTimeout(TimeoutError):
    """A channel put or get did not complete in time; nothing was added or taken."""


class ChannelClosedError(RuntimeError):
    """The channel is gone (closed, or its actor was killed or its node died)."""


class ChannelBase(abc.ABC):
    """A handle on a named channel with keyed FIFO sub-queues. Picklable: pass it to workers.

    Attributes:
        name: the channel's name.
    """

    name: str

    @abc.abstractmethod
    def declare_queue(self, key: str, maxsize: int) -> None:
        """Set the capacity of sub-queue ``key`` (the reference's ``queue_size``; 0 = unbounded)."""

    @abc.abstractmethod
    def put(self, item: Any, key: str = "default", weight: float = 1.0, timeout: float | None = None) -> None:
        """Append ``item`` to ``key``; blocks while the sub-queue is full (backpressure).

        Raises:
            ChannelTimeout: still full after ``timeout`` seconds; the item was not added.
            ValueError: ``weight`` is not a finite number >= 0 (checked before anything is sent).
        """

    def get(self, key: str = "default", timeout: float | None = None) -> Any:
        """Remove and return the oldest item of ``key``, waiting up to ``timeout`` seconds."""
        return self.get_batch(key, count=1, timeout=timeout)[0]

    @abc.abstractmethod
    def get_batch(self, key: str = "default", count: int | None = None, target_weight: float | None = None,
                  timeout: float | None = None) -> list:
        """Remove ``count`` items, or items until their weights reach ``target_weight``.

        Raises:
            ChannelTimeout: not enough items within ``timeout``; nothing was taken.
        """

    @abc.abstractmethod
    def qsize(self, key: str = "default") -> int:
        """Items waiting in ``key``."""

    @abc.abstractmethod
    def stats(self) -> dict:
        """Per key: queued, blocked_puts, waiting_gets, total_put, total_got, socket_put, socket_got."""

    @abc.abstractmethod
    def refused(self) -> int:
        """Connections to the channel's socket closed unread (0 where nothing listens)."""

    @abc.abstractmethod
    def close(self) -> None:
        """End the channel: queued items are dropped and every handle then raises
        :class:`ChannelClosedError`; closing twice is harmless."""

    @abc.abstractmethod
    def rpc_only(self) -> ChannelBase:
        """A handle on the same channel that never takes a same-node shortcut (comparisons, tests)."""

    @abc.abstractmethod
    async def async_put(self, item: Any, key: str = "default", weight: float = 1.0,
                        timeout: float | None = None) -> None:
        """``await`` form of :meth:`put`; a cancelled put still blocked on a full queue is withdrawn."""

    async def async_get(self, key: str = "default", timeout: float | None = None) -> Any:
        """``await`` form of :meth:`get`."""
        return (await self.async_get_batch(key, count=1, timeout=timeout))[0]

    @abc.abstractmethod
    async def async_get_batch(self, key: str = "default", count: int | None = None,
                              target_weight: float | None = None, timeout: float | None = None) -> list:
        """``await`` form of :meth:`get_batch`; a cancelled get loses nothing."""


class Deadline:
    """Splits a get's timeout (``None`` = forever) into waits of at most :data:`GET_SLICE_S`."""

    def __init__(self, timeout: float | None):
        self.end = None if timeout is None else time.monotonic() + timeout

    def next_slice(self) -> float:
        if self.end is None:
            return GET_SLICE_S
        return min(GET_SLICE_S, max(0.0, self.end - time.monotonic()))

    def passed(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end
