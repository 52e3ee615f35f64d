"""Channels of the Ray backend: named, keyed queues shared by workers of any group on any node.

``Channel.create`` (:mod:`rlinf.scheduler.channel.channel`) makes one through the run's backend
(:meth:`RayBackend.create_channel <rlinf.scheduler.ray_backend.RayBackend.create_channel>`).
A channel's queues live in one async Ray actor (:class:`ChannelActor`), pinned to the node that
created it. Its clients reach it two ways:

* same-node socket (the default for the synchronous ``put`` / ``get`` / ``get_batch`` /
  ``qsize`` of a process on the actor's node): a Unix-domain socket served on the actor's own
  event loop (:mod:`.fast_path`, :mod:`.fast_client`). A ping-pong between two workers costs
  about a tenth of what it costs over Ray RPC, and less than a raw Ray actor call
  (bench/bench_latency.py).
* Ray RPC (actor calls): everything else. Clients on other nodes; the ``async_*`` methods;
  ``declare_queue``, ``stats`` and ``close``; any item that carries large tensors through the object
  store (a Ray ``ObjectRef`` is only pickled by Ray, which tracks who holds it; a get over the
  socket that hands out such items fetches them with one Ray call); processes with
  ``RLINF_CHANNEL_FAST_PATH=0`` and handles made by :meth:`RayChannel.rpc_only`.

Both paths act on the same queues, on the same event loop, with the same guarantees: a put
returns once the item is queued, so a producer that mixes paths keeps its order; ``stats()``
counts per key how many items went over the socket (``socket_put`` / ``socket_got``). The socket
serves only processes that prove the channel's key (:mod:`.fast_path`): derived from the run's
secret when the channel is made by the run's backend, random otherwise; the actor hands it to
clients over Ray with the socket's address.

Example (needs a running Ray; see docs/scheduler.md):
    >>> from rlinf.scheduler import Channel
    >>> ch = Channel.create("demo")                       # doctest: +SKIP
    >>> ch.put({"obs": torch.zeros(4, 84, 84)}, key="obs_buffer")   # doctest: +SKIP
    >>> ch.get(key="obs_buffer")["obs"].shape             # doctest: +SKIP
    torch.Size([4, 84, 84])
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
import uuid
from typing import Any

from rlinf.scheduler.channel import fast_client
from rlinf.scheduler.channel.actor import SLICE_EXPIRED, ChannelActor
from rlinf.scheduler.channel.base import ChannelBase, ChannelClosedError, ChannelTimeout, Deadline
from rlinf.scheduler.channel.fast_client import FastPathBroken, GetHooks
from rlinf.scheduler.channel.keyed_queue import check_batch_request, check_weight
from rlinf.scheduler.channel.payload import PayloadLostError, from_queue_item, pack, to_queue_item, unpack_many
from rlinf.scheduler.secret import RunSecret

logger = logging.getLogger(__name__)

_ACTOR_PREFIX = "rlinf-channel:"


class RayChannel(ChannelBase):
    """Client handle of a channel actor. Picklable: pass it to workers as an argument.

    ``fast_path=False`` keeps this handle's calls on Ray RPC (see :meth:`rpc_only`).
    """

    def __init__(self, name: str, actor, fast_path: bool = True):
        self.name = name
        self._actor = actor
        self._fast_path = fast_path

    # ---- creation -------------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, maxsize: int = 0, node_id: str | None = None,
               key: RunSecret | None = None) -> RayChannel:
        """Create channel ``name`` (or open it if it exists with the same ``maxsize``).

        Args:
            name: channel name, unique in the Ray namespace.
            maxsize: default capacity of each sub-queue; 0 = unbounded.
            node_id: Ray node to host the channel actor (default: this node). The actor is
                pinned there: the same-node socket serves the processes of that node.
            key: what the same-node socket's clients prove (default: a random one); an
                existing channel keeps its own.

        Raises:
            ValueError: the channel exists with another ``maxsize``.
        """
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"maxsize must be an int >= 0 (0 = unbounded), got {maxsize!r}")
        node_id = node_id or ray.get_runtime_context().get_node_id()
        actor = (
            ray.remote(ChannelActor)
            .options(
                name=_ACTOR_PREFIX + name,
                get_if_exists=True,
                num_cpus=0,
                max_concurrency=10_000,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            .remote(name, maxsize, key if key is not None else RunSecret.new())
        )
        channel = cls(name, actor)
        _, existing = channel._call(actor.info.remote())
        if existing != maxsize:
            raise ValueError(f"channel {name!r} already exists with maxsize {existing}, not {maxsize}")
        return channel

    @classmethod
    def connect(cls, name: str, timeout: float = 30.0) -> RayChannel:
        """Open an existing channel, waiting up to ``timeout`` seconds for it to be created."""
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        deadline = time.monotonic() + timeout
        while True:
            try:
                return cls(name, ray.get_actor(_ACTOR_PREFIX + name))
            except ValueError:
                if time.monotonic() > deadline:
                    raise ChannelClosedError(f"no channel named {name!r} after {timeout} s") from None
                time.sleep(0.05)

    def __reduce__(self):
        return (RayChannel, (self.name, self._actor, self._fast_path))

    def rpc_only(self) -> RayChannel:
        """A handle on the same channel whose calls all go through Ray RPC, never the same-node
        socket (for comparisons and tests; ``RLINF_CHANNEL_FAST_PATH=0`` does this for a process).

        Example:
            >>> RayChannel("demo", actor=None).rpc_only()._fast_path
            False
        """
        return RayChannel(self.name, self._actor, fast_path=False)

    def close(self) -> None:
        """End the channel: its actor is stopped and every item still queued is dropped; later
        calls on any handle raise :class:`ChannelClosedError`. Closing twice is harmless."""
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        if self._actor is not None:
            fast_client.forget(self._actor)
            ray.kill(self._actor)
            self._actor = None

    # ---- blocking API ---------------------------------------------------------------------
    def declare_queue(self, key: str, maxsize: int) -> None:
        """Set the capacity of sub-queue ``key`` (the reference's ``queue_size``; 0 = unbounded)."""
        self._call(self._live().declare.remote(key, maxsize))

    def put(self, item: Any, key: str = "default", weight: float = 1.0,
            timeout: float | None = None) -> None:
        """Append ``item`` to ``key``; blocks while the sub-queue is full (backpressure).

        Raises:
            ChannelTimeout: still full after ``timeout`` seconds; the item was not added.
            ValueError: ``weight`` is not a finite number >= 0 (checked before anything is sent).
        """
        check_weight(weight)
        queued = to_queue_item(pack(item, _me()))
        rid = uuid.uuid4().hex
        fast = self._fast_client() if isinstance(queued, bytes) else None  # refs stay on Ray RPC
        if fast is not None:
            ok = self._over_socket(fast.put, key, queued, weight, timeout, rid)
        else:
            ref = self._live().put.remote(key, queued, weight, timeout, rid)
            try:
                ok = self._call(ref)
            except BaseException:
                _reclaim_in_background(self._actor, key, rid, None)
                raise
        if not ok:
            raise ChannelTimeout(f"put to {self.name}/{key} timed out after {timeout} s (queue full)")

    def get_batch(self, key: str = "default", count: int | None = None,
                  target_weight: float | None = None, timeout: float | None = None) -> list:
        """Remove ``count`` items, or items until their weights reach ``target_weight``.

        Raises:
            ChannelTimeout: not enough items within ``timeout``; nothing was taken.
            PayloadLostError: some items' tensors died with their producer; the batch's other
                items were put back at the front of the queue.
        """
        check_batch_request(count, target_weight)
        deadline = Deadline(timeout)
        fast = self._fast_client()
        hooks = None if fast is None else GetHooks(
            take_stash=functools.partial(self._take_stash, key),
            unpack=functools.partial(self._unpack, key),
            give_back=functools.partial(_reclaim_in_background, self._actor, key, None, None))
        while True:
            rid = uuid.uuid4().hex
            if fast is not None:  # an interrupted socket get is withdrawn by the server
                try:
                    got = fast.get_batch(key, count, target_weight, deadline.next_slice(), rid, hooks)
                except FastPathBroken as exc:
                    self._socket_lost(exc)
                if got is not SLICE_EXPIRED:  # no call (no signal handler) from the ack to here
                    return got
            else:
                ref = self._live().get_batch.remote(key, count, target_weight, deadline.next_slice(),
                                                    rid)
                try:
                    got = self._call(ref)
                except BaseException:  # interrupted: what the channel handed out must not vanish
                    _reclaim_in_background(self._actor, key, rid, ref)
                    raise
                if not _expired(got):
                    return self._unpack(key, got)
            if deadline.passed():
                raise ChannelTimeout(f"get from {self.name}/{key} timed out after {timeout} s")

    def qsize(self, key: str = "default") -> int:
        """Items waiting in ``key``."""
        fast = self._fast_client()
        if fast is not None:
            return self._over_socket(fast.qsize, key)
        return self._call(self._live().qsize.remote(key))

    def stats(self) -> dict:
        """Per key: queued, blocked_puts, waiting_gets, total_put, total_got, and socket_put /
        socket_got: how many of the items went in / came out over the same-node socket."""
        return self._call(self._live().stats.remote())

    def refused(self) -> int:
        """Connections to the channel's same-node socket closed unread: another user's process, or
        one that did not prove the channel's key (each also named in a warning line)."""
        return self._call(self._live().refused.remote())

    # ---- async API ------------------------------------------------------------------------
    async def async_put(self, item: Any, key: str = "default", weight: float = 1.0,
                        timeout: float | None = None) -> None:
        """``await`` form of :meth:`put`. If the awaiting task is cancelled, a put still blocked
        on a full queue is withdrawn; one the channel already accepted stays (never twice)."""
        check_weight(weight)
        rid = uuid.uuid4().hex
        ref = self._live().put.remote(key, to_queue_item(pack(item, _me())), weight, timeout, rid)
        try:
            ok = await self._acall(ref)
        except asyncio.CancelledError:
            _reclaim_in_background(self._actor, key, rid, None)
            raise
        if not ok:
            raise ChannelTimeout(f"put to {self.name}/{key} timed out after {timeout} s (queue full)")

    async def async_get_batch(self, key: str = "default", count: int | None = None,
                              target_weight: float | None = None,
                              timeout: float | None = None) -> list:
        """``await`` form of :meth:`get_batch`. If the awaiting task is cancelled, nothing is
        lost: a pending get is withdrawn and an undelivered reply goes back to the front."""
        check_batch_request(count, target_weight)
        deadline = Deadline(timeout)
        while True:
            rid = uuid.uuid4().hex
            ref = self._live().get_batch.remote(key, count, target_weight, deadline.next_slice(), rid)
            try:
                got = await self._acall(ref)
            except asyncio.CancelledError:
                _reclaim_in_background(self._actor, key, rid, ref)
                raise
            if not _expired(got):
                return self._unpack(key, got)
            if deadline.passed():
                raise ChannelTimeout(f"get from {self.name}/{key} timed out after {timeout} s")

    # ---- plumbing -------------------------------------------------------------------------
    def _unpack(self, key: str, pairs: list) -> list:
        try:
            return unpack_many([from_queue_item(p) for p, _ in pairs])
        except PayloadLostError as err:
            keep = [pair for i, pair in enumerate(pairs) if i not in err.lost]
            if keep:
                self._call(self._live().requeue_front.remote(key, keep))
            raise PayloadLostError(
                f"{err} ({len(err.lost)} item(s) lost; the batch's other {len(keep)} item(s) "
                f"were put back at the front of {self.name}/{key})", err.lost) from None

    def _live(self):
        """The channel actor; :class:`ChannelClosedError` once :meth:`close` was called here."""
        if self._actor is None:
            raise ChannelClosedError(f"channel {self.name!r} is closed")
        return self._actor

    def _fast_client(self):
        """This process's socket client for the channel, or None: use Ray RPC."""
        if not self._fast_path:
            return None
        return fast_client.client_for(self._live(), self._call)

    def _over_socket(self, operation, *args):
        """``operation(*args)`` on the socket client, with :meth:`_socket_lost` on a lost socket."""
        try:
            return operation(*args)
        except FastPathBroken as exc:
            self._socket_lost(exc)

    def _socket_lost(self, lost: FastPathBroken):
        """Raise :class:`ChannelClosedError` when the actor is gone (the usual reason for a lost
        socket), else ConnectionError."""
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        actor = self._live()
        fast_client.forget(actor)
        try:
            ray.get(actor.info.remote(), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            raise ChannelClosedError(f"channel {self.name!r} is gone: {lost}") from None
        raise ConnectionError(f"channel {self.name!r}: {lost}, although its actor is alive; this "
                              "process now reaches it over Ray RPC (a put in flight may or may not "
                              "have been added; a get took nothing)") from None

    def _take_stash(self, key: str, request_id: str) -> list:
        """Fetch the batch a socket get left on the actor because it carries object-store refs."""
        ref = self._live().take_stash.remote(request_id)
        try:
            return self._call(ref)
        except BaseException:  # the stash may be on its way: give it back to the front
            _reclaim_in_background(self._actor, key, None, ref)
            raise

    def _call(self, ref):
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            raise ChannelClosedError(f"channel {self.name!r} is gone: {exc}") from None

    async def _acall(self, ref):
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        try:
            return await ref
        except ray.exceptions.RayActorError as exc:
            raise ChannelClosedError(f"channel {self.name!r} is gone: {exc}") from None


def _reclaim_in_background(actor, key: str, request_id: str | None, ref,
                           pairs: list | None = None) -> None:
    """After a caller gave up on a call: withdraw it if still pending (``request_id``), and put an
    undelivered get reply (``ref``, or the ``pairs`` themselves) back at the front. Runs in a
    thread: the caller may be unwinding a cancellation."""

    def reclaim() -> None:
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        try:
            if request_id is not None:
                ray.get(actor.cancel.remote(request_id))
            got = ray.get(ref) if ref is not None else pairs
            if got and not _expired(got):
                ray.get(actor.requeue_front.remote(key, got))
        except Exception:  # noqa: BLE001 - the channel is gone: nothing left to give back
            logger.warning("could not give back the items of an abandoned get on %r", key)

    threading.Thread(target=reclaim, name="rlinf-channel-reclaim", daemon=True).start()


def _expired(got) -> bool:
    return isinstance(got, str) and got == SLICE_EXPIRED


def _me() -> str:
    group = os.environ.get("RLINF_GROUP_NAME")
    return f"{group}[{os.environ.get('RANK', '?')}]" if group else f"driver(pid {os.getpid()})"
