"""The Ray actor that holds a channel's queues. Clients talk to it through :class:`Channel`."""

from __future__ import annotations

import asyncio
from typing import Any

from rlinf.scheduler.channel.keyed_queue import KeyedQueues, QueueTimeout

#: Returned instead of raising when a server-side wait slice ends (or is withdrawn) without a result.
SLICE_EXPIRED = "__rlinf_slice_expired__"


class ChannelActor:
    """Async actor: every call is a coroutine on one event loop, so queue state needs no locks."""

    def __init__(self, name: str, default_maxsize: int):
        self.name = name
        self.default_maxsize = default_maxsize
        self.queues = KeyedQueues(default_maxsize)

    async def info(self) -> tuple[str, int]:
        return self.name, self.default_maxsize

    async def declare(self, key: str, maxsize: int) -> None:
        self.queues.declare(key, maxsize)

    async def put(self, key: str, item: Any, weight: float, timeout: float | None,
                  request_id: str | None = None) -> bool:
        try:
            await self.queues.put(key, item, weight, timeout, request_id)
        except (QueueTimeout, asyncio.CancelledError):
            return False
        return True

    async def get_batch(self, key: str, count: int | None, target_weight: float | None,
                        timeout: float | None, request_id: str | None = None) -> Any:
        """``(item, weight)`` pairs, or SLICE_EXPIRED when the wait ended without a result."""
        try:
            return await self.queues.get_batch(key, count, target_weight, timeout, request_id,
                                               with_weights=True)
        except (QueueTimeout, asyncio.CancelledError):
            return SLICE_EXPIRED

    async def cancel(self, request_id: str) -> bool:
        return self.queues.cancel(request_id)

    async def requeue_front(self, key: str, pairs: list) -> None:
        self.queues.requeue_front(key, pairs)

    async def qsize(self, key: str) -> int:
        return self.queues.qsize(key)

    async def stats(self) -> dict:
        return self.queues.stats()
