"""Client side of a channel's same-node fast path (the server is in :mod:`.fast_path`).

Each process finds out once per channel whether it runs on the channel actor's Ray node; if so,
its synchronous ``put`` / ``get`` / ``get_batch`` / ``qsize`` go over a Unix-domain socket to the
actor instead of Ray RPC. Each new connection first proves the channel's key (the pipes' mutual
challenge-response, :mod:`rlinf.scheduler.handshake`; the actor hands the key out with the
socket's address, over Ray); one whose proof fails is never used. Connections are pooled: a caller
takes an idle one or opens a new one, so threads sharing a :class:`~rlinf.scheduler.Channel` each
get their own. A caller interrupted while
waiting (``KeyboardInterrupt``, any exception) closes its connection instead of returning it: the
server then withdraws the request and puts back any reply the caller did not acknowledge; a caller
interrupted just after its acknowledgement went out gives the items back itself (one Ray call).

Set ``RLINF_CHANNEL_FAST_PATH=0`` (or ``false`` / ``no`` / ``off``) in a process's environment to
keep all its channel calls on Ray RPC; :meth:`Channel.rpc_only` does the same for one handle.

Example (needs a running Ray; see docs/scheduler.md):
    >>> client = client_for(channel._actor, channel._call)   # doctest: +SKIP
    >>> client.qsize("obs") if client is not None else "this process uses Ray RPC"   # doctest: +SKIP
    0
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlinf.scheduler.channel.actor import SLICE_EXPIRED
from rlinf.scheduler.channel.fast_path import HANDSHAKE_S
from rlinf.scheduler.channel.payload import PayloadLostError
from rlinf.scheduler.handshake import AuthError, prove_as_connector
from rlinf.scheduler.pipe import Pipe, PipeClosedError, encode
from rlinf.scheduler.secret import RunSecret

logger = logging.getLogger(__name__)

#: Environment switch of the fast path (default on).
FAST_PATH_ENV = "RLINF_CHANNEL_FAST_PATH"

# actor id -> (pid that resolved it, client or None = use Ray RPC)
_CLIENTS: dict[str, tuple[int, FastPathClient | None]] = {}
_RESOLVING = threading.Lock()


class FastPathBroken(ConnectionError):
    """The socket to the channel actor failed (the actor most likely died)."""


@dataclass(frozen=True)
class GetHooks:
    """What a socket get needs from its :class:`~rlinf.scheduler.Channel` (Ray calls, unpacking).

    Attributes:
        take_stash: ``request_id -> pairs``: fetch a batch the server kept back (Ray call).
        unpack: ``pairs -> items``.
        give_back: ``pairs -> None``: put delivered pairs back at the front (Ray call).
    """

    take_stash: Callable[[str], list]
    unpack: Callable[[list], list]
    give_back: Callable[[list], None]


def fast_path_enabled() -> bool:
    """False when ``RLINF_CHANNEL_FAST_PATH`` is 0 / false / no / off in this process.

    Example:
        >>> saved = os.environ.get(FAST_PATH_ENV)
        >>> os.environ[FAST_PATH_ENV] = "off"
        >>> fast_path_enabled()
        False
        >>> os.environ[FAST_PATH_ENV] = "1"
        >>> fast_path_enabled()
        True
        >>> if saved is None:
        ...     del os.environ[FAST_PATH_ENV]
        ... else:
        ...     os.environ[FAST_PATH_ENV] = saved
    """
    return os.environ.get(FAST_PATH_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def client_for(actor, call: Callable) -> FastPathClient | None:
    """This process's fast-path client for channel ``actor``, or None when calls must use Ray RPC
    (switched off, another node, no socket). Resolved once per process and actor.

    Args:
        actor: the channel's Ray actor handle.
        call: turns a Ray object ref into its value (and a dead actor into ChannelClosedError).

    Example:
        >>> client = client_for(channel._actor, channel._call)   # doctest: +SKIP
    """
    if not fast_path_enabled():
        return None
    actor_key = actor._actor_id.hex()
    entry = _CLIENTS.get(actor_key)
    if entry is None or entry[0] != os.getpid():
        with _RESOLVING:
            entry = _CLIENTS.get(actor_key)
            if entry is None or entry[0] != os.getpid():
                entry = (os.getpid(), _resolve(actor, call))
                _CLIENTS[actor_key] = entry
    return entry[1]


def forget(actor) -> None:
    """Drop this process's client for ``actor`` and close its idle connections (after the actor
    is gone); the next call resolves again."""
    entry = _CLIENTS.pop(actor._actor_id.hex(), None)
    if entry is not None and entry[1] is not None:
        entry[1].close()


def _resolve(actor, call: Callable) -> FastPathClient | None:
    # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
    import ray

    if not ray.is_initialized():
        return None
    where = call(actor.fast_address.remote())
    if where is None or where[0] != ray.get_runtime_context().get_node_id():
        return None
    client = FastPathClient(where[1], where[2])
    try:
        client._release(client._connect())  # reachable from here (e.g. same network namespace)?
    except FastPathBroken as exc:
        logger.warning("channel fast path unreachable, using Ray RPC: %s", exc)
        return None
    return client


class FastPathClient:
    """Pooled connections to one channel actor's socket server.

    Args:
        address: the server's Unix-domain socket address (from ``ChannelActor.fast_address``).
        secret: the channel's key, proved on every new connection (from the same call).

    Example:
        >>> client = FastPathClient("\\0rlinf-ch-...", key)                # doctest: +SKIP
        >>> client.put("obs", to_queue_item(pack(1)), 1.0, None, rid)       # doctest: +SKIP
        True
    """

    def __init__(self, address: str, secret: RunSecret, handshake_s: float = HANDSHAKE_S):
        self.address, self.secret, self.handshake_s = address, secret, handshake_s
        self._idle: list[Pipe] = []
        self._lock = threading.Lock()

    def put(self, key: str, blob: bytes, weight: float, timeout: float | None,
            request_id: str) -> bool:
        """Append ``blob`` (an inline queue item) to ``key``; False when still full after
        ``timeout`` seconds (nothing was added)."""
        with self._connection() as pipe:
            return self._exchange(pipe, request_id, ("put", key, blob, weight, timeout))

    def get_batch(self, key: str, count: int | None, target_weight: float | None, wait_s: float,
                  request_id: str, hooks: GetHooks) -> Any:
        """The items of a batch, or SLICE_EXPIRED when ``wait_s`` passed without a result.

        The reply is unpacked (``hooks.unpack``) before it is acknowledged, so a caller
        interrupted until then takes nothing: the server puts the items back when the connection
        closes. An interruption after the acknowledgement gives them back (``hooks.give_back``).
        A batch the server kept back because it carries object-store refs is fetched with
        ``hooks.take_stash`` (one Ray call).
        """
        pipe = self._acquire()
        ours = None  # pairs the channel counts as handed to this caller
        try:
            kind, value = self._exchange(pipe, request_id,
                                         ("get", key, count, target_weight, wait_s), whole=True)
            if kind == "items":
                items = hooks.unpack(value)
                ack = b"".join(encode((request_id, ("ack",))))
                ours = value  # no signal handler runs between here and the send (only after calls)
                try:
                    pipe.sock.sendall(ack)
                except OSError as exc:  # not acknowledged: the server puts the items back
                    ours = None
                    raise FastPathBroken(f"lost the socket to the channel actor ({exc})") from None
            elif kind == "stashed":
                ours = hooks.take_stash(request_id)
                items = hooks.unpack(ours) if ours else SLICE_EXPIRED  # []: it went back already
            else:
                items = SLICE_EXPIRED
            self._release(pipe)
            return items
        except BaseException as exc:
            pipe.close()  # a call in doubt: closing makes the server withdraw it; never reused
            if ours and not isinstance(exc, PayloadLostError):  # (that one gave back what it could)
                hooks.give_back(ours)
            raise

    def qsize(self, key: str) -> int:
        """Items waiting in ``key``."""
        with self._connection() as pipe:
            return self._exchange(pipe, "qsize", ("qsize", key))

    def close(self) -> None:
        """Close the idle connections (ones in use are closed by their callers' exit)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for pipe in idle:
            pipe.close()

    # ---- plumbing -------------------------------------------------------------------------
    @contextlib.contextmanager
    def _connection(self):
        pipe = self._acquire()
        try:
            yield pipe
        except BaseException:
            pipe.close()  # a call in doubt: closing makes the server withdraw it; never reused
            raise
        self._release(pipe)

    def _acquire(self) -> Pipe:
        """An idle connection, or a new one."""
        with self._lock:
            while self._idle:
                pipe = self._idle.pop()
                if pipe.sock.fileno() != -1:  # (closed by a caller interrupted while releasing it)
                    return pipe
        return self._connect()

    def _release(self, pipe: Pipe) -> None:
        with self._lock:
            self._idle.append(pipe)

    def _connect(self) -> Pipe:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.address)
            prove_as_connector(sock, self.secret, self.handshake_s)
        except (OSError, AuthError) as exc:
            sock.close()
            raise FastPathBroken(f"cannot connect to the channel actor's socket ({exc})") from None
        return Pipe(sock, "channel fast path", "the channel actor")

    def _exchange(self, pipe: Pipe, request_id: str, message: tuple, whole: bool = False) -> Any:
        """Send one request and read its reply: the reply's value, or ``(kind, value)`` if
        ``whole``."""
        try:
            pipe.send(message, key=request_id)
            kind, value = pipe.recv(key=request_id)
        except (PipeClosedError, OSError) as exc:
            raise FastPathBroken(f"lost the socket to the channel actor ({exc})") from None
        if kind == "error":
            raise RuntimeError(f"channel fast path: the channel actor refused a request: {value}")
        return (kind, value) if whole else value
