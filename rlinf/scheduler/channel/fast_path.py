"""Same-node fast path of a channel: a Unix-domain socket server on the channel actor's event loop.

A Ray call costs hundreds of microseconds each way, and a channel round trip (put, get on the
other side, put back, get) is built from several. Clients on the channel actor's node send their
synchronous ``put`` / ``get`` / ``get_batch`` / ``qsize`` over a Unix-domain socket instead (see
:mod:`rlinf.scheduler.channel.fast_client`). The server runs as coroutines on the actor's own event
loop, so it works on the very :class:`KeyedQueues` the Ray methods use, with no locks. Its address
is in the Linux abstract namespace (``"\\0rlinf-ch-<uuid>"``: no file to clean up), which has no
file mode: any process in the node's network namespace can connect. So a connection is served only
once its peer is a process of the actor's own user (``SO_PEERCRED``) *and* has proved the channel's
key with the pipes' mutual HMAC challenge-response (:mod:`rlinf.scheduler.handshake`), before a
single byte from it is unpickled. The key is the channel actor's (``ChannelActor.fast_address``
hands it out with the address, over Ray). A connection that fails either check, or stays silent
for ``handshake_s``, is closed unread, counted (:attr:`FastPathServer.refused`, the channel's
``stats()``) and named in a warning line (its pid and uid).

Frames are :mod:`rlinf.scheduler.pipe`'s (length-prefixed pickle protocol 5), each ``(request id,
message)``; one request at a time per connection::

    client -> server                                      server -> client
    ("put", key, blob, weight, timeout)                   ("ok", accepted)   (False: timed out)
    ("get", key, count, target_weight, wait_s)            ("items", [(blob, weight), ...]),
                                                          ("stashed", None) or ("expired", None)
    ("ack",)        after every "items" reply
    ("qsize", key)                                        ("ok", n)

``blob`` is an item as :func:`~rlinf.scheduler.channel.payload.to_queue_item` makes it: only
inline items (no object-store ref) travel over the socket. When a get hands out an item that
carries an object-store ref (put over Ray RPC), the server does not pickle the ref: it keeps the
batch under the request id and replies ``"stashed"``; the client takes it with one Ray call
(``ChannelActor.take_stash``).

Nothing is lost to a client that goes away: when its connection closes mid-request, a pending put
or get is withdrawn (a get's items go back to the front); a get reply counts as delivered only once
its ``"ack"`` arrives (the client sends it after unpacking the items, as its last step), otherwise
the items go back to the front; a stash nobody took goes back too.

Example (needs a running Ray; see docs/scheduler.md):
    >>> server = FastPathServer(KeyedQueues())          # doctest: +SKIP
    >>> address = await server.start()                  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import socket
import struct
import sys
import uuid
from typing import Any

from rlinf.scheduler.channel.keyed_queue import KeyedQueues, QueueTimeout
from rlinf.scheduler.handshake import AuthError, prove_as_listener_async
from rlinf.scheduler.pipe import _HEADER, _LENGTH, encode
from rlinf.scheduler.secret import RunSecret

logger = logging.getLogger(__name__)

_PEER_CREDENTIALS = struct.Struct("3i")  # pid, uid, gid (SO_PEERCRED)
_CONNECTION_GONE = (asyncio.IncompleteReadError, ConnectionError, EOFError)
#: seconds a connecting peer gets to complete the handshake (as a pipe's)
HANDSHAKE_S = 10.0


async def read_message(reader: asyncio.StreamReader) -> Any:
    """One frame written by :meth:`rlinf.scheduler.pipe.Pipe.send`: its ``(key, obj)`` tuple.

    Raises:
        asyncio.IncompleteReadError: the peer closed the connection.
    """
    size, count = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    lengths = [_LENGTH.unpack(await reader.readexactly(_LENGTH.size))[0] for _ in range(count)]
    payload = await reader.readexactly(size)
    buffers = [await reader.readexactly(n) for n in lengths]
    return pickle.loads(payload, buffers=buffers)


class FastPathServer:
    """Serves a channel's :class:`KeyedQueues` over a Unix-domain socket (see the module docstring).

    Args:
        queues: the channel actor's queues; the server must run on the loop that owns them.
        secret: the key every client proves before its first request (:mod:`rlinf.scheduler.handshake`).
        handshake_s: seconds a client gets to complete that proof.

    Attributes:
        socket_counts: per key, ``{"socket_put": n, "socket_got": n}``: items put over the socket,
            and items handed out in acknowledged socket replies (an item that an interrupted
            caller gave back and that went out again counts twice).
        refused: connections closed unread: another user's, or a failed or stalled handshake.
    """

    def __init__(self, queues: KeyedQueues, secret: RunSecret, handshake_s: float = HANDSHAKE_S):
        if not isinstance(secret, RunSecret):
            raise TypeError(f"the fast path needs the channel's RunSecret, got {type(secret).__name__}")
        self.queues = queues
        self.secret, self.handshake_s = secret, handshake_s
        self.refused = 0
        self.socket_counts: dict[str, dict[str, int]] = {}
        self._stashes: dict[str, tuple[str, list]] = {}
        self._listening: asyncio.Future | None = None

    async def start(self) -> str | None:
        """Listen (once, on the running loop); returns the socket's address, None off Linux.

        Example:
            >>> async def demo():
            ...     server = FastPathServer(KeyedQueues(), RunSecret.new())
            ...     first, again = await server.start(), await server.start()
            ...     server.close()
            ...     return first == again and first.startswith("\\0rlinf-ch-")
            >>> asyncio.run(demo()) if sys.platform.startswith("linux") else True
            True
        """
        if not sys.platform.startswith("linux"):
            return None  # no abstract namespace: every client stays on Ray RPC
        if self._listening is None:
            self._listening = asyncio.ensure_future(self._listen())
        return await asyncio.shield(self._listening)

    async def _listen(self) -> str:
        address = f"\0rlinf-ch-{uuid.uuid4().hex}"
        self._server = await asyncio.start_unix_server(self._serve, path=address)
        return address

    def close(self) -> None:
        """Stop accepting connections (open ones are served until they close)."""
        if self._listening is not None and self._listening.done():
            self._server.close()

    def take_stash(self, request_id: str) -> list:
        """The ``(item, weight)`` pairs stashed for ``request_id``; [] when there are none (the
        stash went back to the queue because its connection closed first)."""
        entry = self._stashes.pop(request_id, None)
        return [] if entry is None else entry[1]

    def counts(self, key: str) -> dict[str, int]:
        """Items of ``key`` put and got over the socket so far."""
        return dict(self.socket_counts.get(key, {"socket_put": 0, "socket_got": 0}))

    # ---- one connection -------------------------------------------------------------------
    async def _admitted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """True once the peer is this user's and proved the key; else it is refused (counted and
        named in a warning) and the caller closes the connection unread."""
        pid, uid = _peer_credentials(writer)
        try:
            if uid != os.getuid():
                raise AuthError(f"uid {uid} is not this user's ({os.getuid()})")
            await prove_as_listener_async(reader, writer, self.secret, self.handshake_s)
            return True
        except (AuthError, *_CONNECTION_GONE) as exc:
            self.refused += 1
            print(f"warning: channel fast path: refused a connection from pid {pid} (uid {uid}): "
                  f"{exc or type(exc).__name__}", file=sys.stderr, flush=True)
            return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not await self._admitted(reader, writer):
            writer.close()
            return
        stashed_here: list[str] = []
        read_ahead: asyncio.Task | None = None
        try:
            while True:
                rid, request = await (read_ahead or read_message(reader))
                read_ahead = None
                kind, value = self._answer_now(request, rid)
                if kind == "wait":
                    # Read ahead while the request waits: the client sends nothing meanwhile, so
                    # what arrives is the connection closing, and the request is withdrawn.
                    read_ahead = asyncio.get_running_loop().create_task(read_message(reader))
                    waiting = asyncio.get_running_loop().create_task(self._wait(request, rid))
                    await asyncio.wait({waiting, read_ahead}, return_when=asyncio.FIRST_COMPLETED)
                    if not waiting.done():
                        await self._withdraw(waiting, request[1])
                        return
                    kind, value = waiting.result()
                if kind == "items" and not all(isinstance(item, bytes) for item, _ in value):
                    self._stashes[rid] = (request[1], value)  # object-store refs: never pickled here
                    stashed_here[:] = [r for r in stashed_here if r in self._stashes] + [rid]
                    kind, value = "stashed", None
                await _write(writer, encode((rid, (kind, value))))
                if kind == "items":
                    acked = await self._acknowledged(read_ahead or read_message(reader), rid,
                                                     request[1], value)
                    read_ahead = None
                    if not acked:
                        return
        except _CONNECTION_GONE:
            pass
        except Exception:
            logger.exception("channel fast path: dropping a connection after a protocol error")
        finally:
            if read_ahead is not None:
                read_ahead.cancel()
            for rid in stashed_here:
                if rid in self._stashes:  # never taken: its client is gone
                    key, pairs = self._stashes.pop(rid)
                    self.queues.requeue_front(key, pairs)
            writer.close()

    def _answer_now(self, request: tuple, rid: str) -> tuple[str, Any]:
        """The reply ``(kind, value)`` to a request that completes at once; ``("wait", None)``
        for a put on a full queue or a get that queued items cannot fill yet."""
        op, key = request[0], request[1]
        try:
            if op == "put":
                if not self.queues.put_nowait(key, request[2], request[3]):
                    return "wait", None
                self._count(key, "socket_put", 1)
                return "ok", True
            if op == "get":
                pairs = self.queues.get_batch_nowait(key, request[2], request[3])
                return ("wait", None) if pairs is None else ("items", pairs)
            if op == "qsize":
                return "ok", self.queues.qsize(key)
            return "error", f"unknown channel request {op!r}"
        except (ValueError, TypeError) as exc:
            return "error", f"{type(exc).__name__}: {exc}"

    async def _wait(self, request: tuple, rid: str) -> tuple[str, Any]:
        """The reply to a put or get that has to wait (up to its timeout)."""
        op, key = request[0], request[1]
        if op == "put":
            _, _, blob, weight, timeout = request
            try:
                await self.queues.put(key, blob, weight, timeout, rid)
            except QueueTimeout:
                return "ok", False
            self._count(key, "socket_put", 1)
            return "ok", True
        _, _, count, target_weight, wait_s = request
        try:
            pairs = await self.queues.get_batch(key, count, target_weight, wait_s, rid,
                                                with_weights=True)
        except QueueTimeout:
            return "expired", None
        return "items", pairs

    async def _withdraw(self, waiting: asyncio.Task, key: str) -> None:
        """The client hung up mid-request: withdraw it; a get that had just completed gives its
        items back to the front (a put the queue already accepted stays)."""
        waiting.cancel()
        await asyncio.wait({waiting})
        if waiting.cancelled() or waiting.exception() is not None:
            return
        kind, value = waiting.result()
        if kind == "items":
            self.queues.requeue_front(key, value)

    async def _acknowledged(self, next_message, rid: str, key: str, pairs: list) -> bool:
        """Wait for the ack of a get reply; without it (connection gone) the items go back."""
        try:
            ack = await next_message
        except _CONNECTION_GONE:
            ack = None
        if ack != (rid, ("ack",)):
            self.queues.requeue_front(key, pairs)
            return False
        self._count(key, "socket_got", len(pairs))
        return True

    def _count(self, key: str, field: str, n: int) -> None:
        row = self.socket_counts.setdefault(key, {"socket_put": 0, "socket_got": 0})
        row[field] += n


async def _write(writer: asyncio.StreamWriter, parts: list) -> None:
    """Send a reply; a connection that is gone is noticed by the next read, not here."""
    try:
        writer.writelines(parts)
        await writer.drain()
    except ConnectionError:
        pass


def _peer_credentials(writer: asyncio.StreamWriter) -> tuple[int | None, int | None]:
    """``(pid, uid)`` of the connected process (``SO_PEERCRED``); ``(None, None)`` if unknown."""
    sock = writer.get_extra_info("socket")
    try:
        credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER_CREDENTIALS.size)
    except (OSError, AttributeError):
        return None, None
    pid, uid, _ = _PEER_CREDENTIALS.unpack(credentials)
    return pid, uid
