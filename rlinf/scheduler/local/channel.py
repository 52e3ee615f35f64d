"""Channels of local mode: the same keyed queues (:class:`KeyedQueues`) in this process.

Every local channel's queues live on one event-loop thread (as a Ray channel's live on its actor's
loop), so the ordering, backpressure, timeout and cancellation rules are the very same code. Items
are pickled on ``put`` and unpickled on ``get``: a consumer gets a copy, as over Ray.
"""

from __future__ import annotations

import asyncio
import pickle  # trust-reviewed: in-process copies of this process's own items; no socket is read here
import threading
import time
import uuid
from typing import Any

from rlinf.scheduler.channel.base import ChannelBase, ChannelClosedError, ChannelTimeout, Deadline
from rlinf.scheduler.channel.keyed_queue import KeyedQueues, QueueTimeout, check_batch_request, check_weight

_REGISTRY: dict[str, _State] = {}
_LOCK = threading.Lock()
_LOOP: asyncio.AbstractEventLoop | None = None


class _State:
    def __init__(self, name: str, maxsize: int):
        self.name, self.maxsize = name, maxsize
        self.queues = KeyedQueues(maxsize)
        self.closed = False


def _loop() -> asyncio.AbstractEventLoop:
    """The event loop thread that owns every local channel's queues (started on first use)."""
    global _LOOP
    with _LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="rlinf-local-channels", daemon=True).start()
            _LOOP = loop
        return _LOOP


def _run(coro_or_fn, *args):
    """Run a coroutine function (or a plain function) on the loop and wait for it here."""
    async def call():
        out = coro_or_fn(*args)
        return await out if asyncio.iscoroutine(out) else out

    return asyncio.run_coroutine_threadsafe(call(), _loop())


def _open(name: str) -> LocalChannel:
    return LocalChannel(name)


class LocalChannel(ChannelBase):
    """:class:`~rlinf.scheduler.Channel` of local mode (same methods; ``stats()`` counts no socket
    items). Picklable: a copy names the same queues."""

    def __init__(self, name: str):
        self.name = name

    @classmethod
    def create(cls, name: str, maxsize: int = 0, node_id: str | None = None) -> LocalChannel:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"maxsize must be an int >= 0 (0 = unbounded), got {maxsize!r}")
        with _LOCK:
            state = _REGISTRY.get(name)
            if state is None or state.closed:
                _REGISTRY[name] = _State(name, maxsize)
            elif state.maxsize != maxsize:
                raise ValueError(f"channel {name!r} already exists with maxsize {state.maxsize}, not {maxsize}")
        return cls(name)

    @classmethod
    def connect(cls, name: str, timeout: float = 30.0) -> LocalChannel:
        deadline = time.monotonic() + timeout
        while name not in _REGISTRY or _REGISTRY[name].closed:
            if time.monotonic() > deadline:
                raise ChannelClosedError(f"no channel named {name!r} after {timeout} s")
            time.sleep(0.05)
        return cls(name)

    def __reduce__(self):
        return (_open, (self.name,))

    def rpc_only(self) -> LocalChannel:
        return LocalChannel(self.name)

    def close(self) -> None:
        with _LOCK:
            state = _REGISTRY.get(self.name)
            if state is not None:
                state.closed = True
                del _REGISTRY[self.name]

    def _state(self) -> _State:
        state = _REGISTRY.get(self.name)
        if state is None or state.closed:
            raise ChannelClosedError(f"channel {self.name!r} is closed")
        return state

    def declare_queue(self, key: str, maxsize: int) -> None:
        _run(self._state().queues.declare, key, maxsize).result()

    def put(self, item: Any, key: str = "default", weight: float = 1.0, timeout: float | None = None) -> None:
        check_weight(weight)
        blob, rid = pickle.dumps(item, protocol=5), uuid.uuid4().hex
        queues = self._state().queues
        future = _run(queues.put, key, blob, weight, timeout, rid)
        try:
            future.result()
        except QueueTimeout:
            raise ChannelTimeout(f"put to {self.name}/{key} timed out after {timeout} s (queue full)") from None
        except BaseException:  # interrupted: withdraw it if still blocked
            _run(queues.cancel, rid)
            raise

    def get_batch(self, key: str = "default", count: int | None = None, target_weight: float | None = None,
                  timeout: float | None = None) -> list:
        check_batch_request(count, target_weight)
        deadline = Deadline(timeout)
        while True:
            queues = self._state().queues  # a closed channel fails here, within a slice
            rid = uuid.uuid4().hex
            future = _run(queues.get_batch, key, count, target_weight, deadline.next_slice(), rid, True)
            try:
                got = future.result()
            except QueueTimeout:
                got = None
            except BaseException:  # interrupted: nothing taken may vanish
                _run(_give_back, queues, key, rid, future)
                raise
            if got is not None:
                return [pickle.loads(blob) for blob, _ in got]
            if deadline.passed():
                raise ChannelTimeout(f"get from {self.name}/{key} timed out after {timeout} s")

    def qsize(self, key: str = "default") -> int:
        return _run(self._state().queues.qsize, key).result()

    def refused(self) -> int:
        return 0  # queues in this process: nothing listens

    def stats(self) -> dict:
        rows = _run(self._state().queues.stats).result()
        return {key: {**row, "socket_put": 0, "socket_got": 0} for key, row in rows.items()}

    async def async_put(self, item: Any, key: str = "default", weight: float = 1.0,
                        timeout: float | None = None) -> None:
        check_weight(weight)
        blob, rid = pickle.dumps(item, protocol=5), uuid.uuid4().hex
        queues = self._state().queues
        try:
            await asyncio.wrap_future(_run(queues.put, key, blob, weight, timeout, rid))
        except QueueTimeout:
            raise ChannelTimeout(f"put to {self.name}/{key} timed out after {timeout} s (queue full)") from None
        except asyncio.CancelledError:
            _run(queues.cancel, rid)
            raise

    async def async_get_batch(self, key: str = "default", count: int | None = None,
                              target_weight: float | None = None, timeout: float | None = None) -> list:
        check_batch_request(count, target_weight)
        queues, rid = self._state().queues, uuid.uuid4().hex
        future = _run(queues.get_batch, key, count, target_weight, timeout, rid, True)
        try:
            got = await asyncio.wrap_future(future)
        except QueueTimeout:
            raise ChannelTimeout(f"get from {self.name}/{key} timed out after {timeout} s") from None
        except asyncio.CancelledError:
            _run(_give_back, queues, key, rid, future)
            raise
        return [pickle.loads(blob) for blob, _ in got]


def _give_back(queues: KeyedQueues, key: str, request_id: str, future) -> None:
    """After an interrupted get: withdraw it, or put what it had got back at the front."""
    if not queues.cancel(request_id) and future.done() and not future.cancelled() \
            and future.exception() is None and future.result():
        queues.requeue_front(key, future.result())
