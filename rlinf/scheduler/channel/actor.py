"""The Ray actor that holds a channel's queues. Clients talk to it through :class:`Channel`."""

from __future__ import annotations

import asyncio
from typing import Any

from rlinf.scheduler.channel.fast_path import FastPathServer
from rlinf.scheduler.channel.keyed_queue import KeyedQueues, QueueTimeout
from rlinf.scheduler.secret import RunSecret

#: Returned instead of raising when a server-side wait slice ends (or is withdrawn) without a result.
SLICE_EXPIRED = "__rlinf_slice_expired__"


class ChannelActor:
    """Async actor: every call is a coroutine on one event loop, so queue state needs no locks.

    The same-node socket server (:class:`FastPathServer`) runs on that loop too, started by the
    first :meth:`fast_address` call; its clients prove ``secret`` (the channel's key, given by its
    creator through Ray's task arguments) before their first request.
    """

    def __init__(self, name: str, default_maxsize: int, secret: RunSecret):
        self.name = name
        self.default_maxsize = default_maxsize
        self.queues = KeyedQueues(default_maxsize)
        self.fast_path = FastPathServer(self.queues, secret)

    async def fast_address(self) -> tuple[str, str, RunSecret] | None:
        """``(node id, socket address, key)`` of the same-node fast path (started on first call);
        None where there is none (not Linux). Asked over Ray only: whoever can call this actor can
        already put and get through Ray RPC."""
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        address = await self.fast_path.start()
        return None if address is None else (ray.get_runtime_context().get_node_id(), address,
                                              self.fast_path.secret)

    async def refused(self) -> int:
        """Connections to the fast path closed unread (another user's, a failed or stalled proof)."""
        return self.fast_path.refused

    async def take_stash(self, request_id: str) -> list:
        """The pairs a socket get left here because they carry object-store refs (see fast_path)."""
        return self.fast_path.take_stash(request_id)

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
        """Per key: the queue's stats plus ``socket_put`` / ``socket_got`` (fast-path items)."""
        return {key: {**row, **self.fast_path.counts(key)} for key, row in self.queues.stats().items()}
