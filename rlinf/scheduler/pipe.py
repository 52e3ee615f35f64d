"""Pipes: a direct, ordered message stream between two workers of different groups.

A :class:`~rlinf.scheduler.Channel` is a broker: every ``put`` / ``get`` goes to the channel's
actor (over a Unix socket on its node, else a Ray call), which decouples any number of producers
and consumers but costs a hop through the broker per message. A tight request/response loop
between fixed partners (an env worker and the policy worker that serves it: one small message each
way per step) needs less: a pipe is one TCP connection per pair of workers, made once. A message is
pickled (protocol 5) with tensors and numpy arrays sent out of band, straight from their memory; a
round trip on one node takes tens of microseconds. TCP works across nodes too.

Nothing is unpickled from a peer that has not proved it holds the run's secret: every connection
starts with a mutual HMAC-SHA256 challenge-response (:mod:`rlinf.scheduler.handshake`, proofs
compared with ``hmac.compare_digest``); one that fails or stalls is closed and counted
(:meth:`~rlinf.scheduler.links.PipeLink.refused`) while the real peers go on connecting.

Each pipe is FIFO in both directions. ``send(obj, key=...)`` tags a message; ``recv(key=...)``
checks the tag, so a protocol slip fails loudly instead of pairing the wrong messages. A peer
that exits closes the socket and the waiting side raises :class:`PipeClosedError` at once; a peer
that fails inside its loop calls :meth:`Pipe.send_error` and the waiting side raises
:class:`PipePeerError` with the peer's reason — neither side waits forever on a dead partner.

Driver side (:class:`~rlinf.scheduler.links.PipeLink`, which asks the run's backend: TCP with
the handshake on Ray, socket pairs in this process in local mode)::

    PipeLink.connect("env_policy", env_group, rollout_group, pairs=[(0, 0), (1, 0)])

Worker side::

    pipe = self.pipe("env_policy", peer_rank=0)    # in env worker 0 or 1
    pipe.send(obs, key="obs/0"); actions = pipe.recv(key="act/0")

Example (two ends of a socket pair in one process):
    >>> import socket
    >>> from rlinf.scheduler.pipe import Pipe
    >>> a, b = socket.socketpair()
    >>> left, right = Pipe(a, "demo", "right"), Pipe(b, "demo", "left")
    >>> left.send({"x": [1, 2]}, key="k1")
    >>> right.recv(key="k1")
    {'x': [1, 2]}
"""

from __future__ import annotations

import io
import pickle
import queue
import select
import socket
import struct
import sys
import threading
import time
from typing import Any

from rlinf.scheduler.errors import SchedulerError
from rlinf.scheduler.handshake import AuthError, prove_as_connector, prove_as_listener
from rlinf.scheduler.secret import RunSecret

_HEADER = struct.Struct("!QI")  # pickle length, number of out-of-band buffers
_LENGTH = struct.Struct("!Q")
_SMALL = 64 * 1024  # messages below this are sent with one system call


class PipeClosedError(SchedulerError):
    """The peer closed the pipe (its process exited or closed the pipe)."""


class PipeTimeout(SchedulerError, TimeoutError):
    """No message arrived within the timeout."""


class PipePeerError(SchedulerError):
    """The peer reported a failure through the pipe (:meth:`Pipe.send_error`)."""


class _PeerFailure:
    """The message :meth:`Pipe.send_error` sends."""

    def __init__(self, reason: str):
        self.reason = reason


def _tensor_from_numpy(array):
    # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
    import torch

    return torch.from_numpy(array)


class _Pickler(pickle.Pickler):
    """Pickles CPU tensors as numpy arrays, whose data then travel out of band (no copy)."""

    def reducer_override(self, obj):
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) is torch.Tensor and obj.device.type == "cpu" \
                and not obj.requires_grad and obj.dtype not in _NO_NUMPY:
            return _tensor_from_numpy, (obj.numpy(),)
        return NotImplemented


def _no_numpy_dtypes() -> frozenset:
    torch = sys.modules.get("torch")
    if torch is None:
        return frozenset()
    names = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "complex32", "uint16", "uint32", "uint64")
    return frozenset(getattr(torch, n) for n in names if hasattr(torch, n))


_NO_NUMPY: frozenset = frozenset()


def encode(obj: Any) -> list:
    """``[header, pickle bytes, *buffers]``: what :meth:`Pipe.send` writes."""
    global _NO_NUMPY
    if not _NO_NUMPY:
        _NO_NUMPY = _no_numpy_dtypes()
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    _Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(obj)
    payload = stream.getbuffer()
    views = [b.raw() for b in buffers]
    head = _HEADER.pack(payload.nbytes, len(views)) + b"".join(_LENGTH.pack(v.nbytes) for v in views)
    return [head, payload, *views]


class Pipe:
    """One end of a pipe. Not thread-safe: one thread sends, one thread receives.

    Args:
        sock: a connected stream socket.
        name: the pipe's name (for error messages).
        peer: who is at the other end, e.g. ``"rollout[0]"`` (for error messages).
    """

    def __init__(self, sock: socket.socket, name: str, peer: str):
        sock.setblocking(True)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.name, self.peer = sock, name, peer
        self._buffer = bytearray()

    def __repr__(self) -> str:
        return f"Pipe({self.name!r} to {self.peer})"

    def send(self, obj: Any, key: str | None = None) -> None:
        """Send ``obj`` tagged with ``key``; returns once the bytes are handed to the kernel."""
        parts = encode((key, obj))
        try:
            if sum(memoryview(p).nbytes for p in parts) <= _SMALL:
                self.sock.sendall(b"".join(parts))
            else:
                for part in parts:
                    self.sock.sendall(part)
        except OSError as exc:
            raise PipeClosedError(f"pipe {self.name!r}: cannot send to {self.peer} ({exc}); "
                                  "did its process exit?") from exc

    def send_error(self, reason: str) -> None:
        """Tell the peer this side failed: its next :meth:`recv` raises :class:`PipePeerError`.
        Never raises (the peer may be gone already)."""
        try:
            self.send(_PeerFailure(reason), key=None)
        except SchedulerError:
            pass

    def recv(self, key: str | None = None, timeout: float | None = None) -> Any:
        """The next message. ``key``: the tag it must carry; ``timeout`` (s): wait at most this
        long for it to start arriving (None: until it arrives or the peer goes away)."""
        if timeout is not None and not self._buffer:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                raise PipeTimeout(f"pipe {self.name!r}: nothing from {self.peer} within {timeout:g} s"
                                  + (f" (waiting for {key!r})" if key else ""))
        head = self._read(_HEADER.size)
        size, count = _HEADER.unpack(head)
        lengths = [_LENGTH.unpack(self._read(_LENGTH.size))[0] for _ in range(count)]
        payload = self._read(size)
        buffers = [self._read(n) for n in lengths]
        got_key, obj = pickle.loads(payload, buffers=buffers)
        if isinstance(obj, _PeerFailure):
            raise PipePeerError(f"pipe {self.name!r}: {self.peer} failed: {obj.reason}")
        if key is not None and got_key != key:
            raise SchedulerError(f"pipe {self.name!r}: expected message {key!r} from {self.peer}, "
                                 f"got {got_key!r} (the two sides disagree on the protocol)")
        return obj

    def _read(self, n: int) -> bytearray:
        """Exactly ``n`` bytes. Small reads are served from a buffer refilled with one
        ``recv`` of up to 64 KiB, so a message of many small parts costs one system call."""
        buf = self._buffer
        if len(buf) >= n:
            out = buf[:n]
            del buf[:n]
            return out
        if n - len(buf) < _SMALL:
            while len(buf) < n:
                chunk = self._recv(_SMALL)
                buf += chunk
            out = buf[:n]
            del buf[:n]
            return out
        out = bytearray(n)  # a large part: straight into its own memory
        have = len(buf)
        out[:have] = buf
        buf.clear()
        view = memoryview(out)
        while have < n:
            have += self._recv_into(view[have:])
        return out

    def _recv(self, size: int) -> bytes:
        try:
            chunk = self.sock.recv(size)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            raise self._closed()
        return chunk

    def _recv_into(self, view: memoryview) -> int:
        try:
            k = self.sock.recv_into(view, len(view))
        except (ConnectionResetError, BrokenPipeError):
            k = 0
        if k == 0:
            raise self._closed()
        return k

    def _closed(self) -> PipeClosedError:
        return PipeClosedError(f"pipe {self.name!r}: {self.peer} closed the connection "
                               "(its process exited or failed)")

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _recv_exactly(sock: socket.socket, n: int, what: str) -> bytes:
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except TimeoutError as exc:
            raise PipeTimeout(f"{what} did not arrive") from exc
        if not chunk:
            raise PipeClosedError(f"{what}: the peer closed the connection")
        data += chunk
    return data


#: seconds one connecting peer gets to complete the handshake and say its rank
HANDSHAKE_S = 10.0
#: connections a listener lets wait beyond the expected peers (refused ones do not block real ones)
_EXTRA_BACKLOG = 32


# ---- worker side (called through the Worker base class) -------------------------------------
class PipeEnds:
    """A worker's pipes: ``name -> peer rank -> Pipe``, plus listeners being accepted.

    Args:
        secret: the run's :class:`~rlinf.scheduler.secret.RunSecret`; every connection proves it
            both ways (:mod:`rlinf.scheduler.handshake`) before anything is unpickled.

    Attributes:
        refused: per pipe name, connections closed because they failed the handshake.
    """

    def __init__(self, secret: RunSecret | None = None):
        self.secret = secret
        self.pipes: dict[str, dict[int, Pipe]] = {}
        self.listeners: dict[str, tuple[socket.socket, int, str]] = {}
        self.refused: dict[str, int] = {}

    def _key(self) -> RunSecret:
        if self.secret is None:
            raise SchedulerError("pipes need the run's secret: this worker was not started by a WorkerGroup")
        return self.secret

    def get(self, name: str, peer_rank: int) -> Pipe:
        if name not in self.pipes or peer_rank not in self.pipes[name]:
            known = {n: sorted(p) for n, p in self.pipes.items()} or "none"
            raise KeyError(f"no pipe {name!r} to peer rank {peer_rank} on this worker (pipes: {known}); "
                           "connect it on the driver with PipeLink.connect(...)")
        return self.pipes[name][peer_rank]

    def listen(self, name: str, host: str, expected: int, peer_group: str) -> tuple[str, int]:
        """Open a listening socket for ``expected`` peers; returns its address."""
        self._key()
        self.close(name)
        server = socket.create_server((host, 0), backlog=max(expected, 1) + _EXTRA_BACKLOG)
        self.listeners[name] = (server, expected, peer_group)
        return host, server.getsockname()[1]

    def connect(self, name: str, my_rank: int, peer_rank: int, peer: str, host: str, port: int,
                timeout: float) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            prove_as_connector(sock, self._key(), min(timeout, HANDSHAKE_S))
            sock.sendall(_LENGTH.pack(my_rank))
        except AuthError as exc:
            sock.close()
            raise SchedulerError(f"pipe {name!r}: {host}:{port} is not {peer}'s listener ({exc})") from None
        except BaseException:
            sock.close()
            raise
        self.pipes.setdefault(name, {})[peer_rank] = Pipe(sock, name, peer)

    def accept(self, name: str, timeout: float) -> list[int]:
        """Accept the expected connections; returns the peer ranks that connected.

        Each connection proves the run's secret on a thread of its own, so one that stalls or
        fails (closed and counted in :attr:`refused`) does not hold the real peers up.
        """
        server, expected, peer_group = self.listeners.pop(name)
        secret = self._key()
        deadline = time.monotonic() + timeout
        results: queue.Queue = queue.Queue()
        pending: set[socket.socket] = set()
        lock = threading.Lock()

        def handshake(sock: socket.socket, address) -> None:
            try:
                prove_as_listener(sock, secret, min(HANDSHAKE_S, max(deadline - time.monotonic(), 0.001)))
                rank = _LENGTH.unpack(_recv_exactly(sock, _LENGTH.size, "a peer's rank"))[0]
                results.put((sock, rank, None))
            except (AuthError, SchedulerError, OSError) as exc:
                sock.close()
                results.put((None, address, exc))
            finally:
                with lock:
                    pending.discard(sock)

        def acceptor() -> None:
            while True:
                try:
                    sock, address = server.accept()
                except OSError:  # the listener was closed: accepting is over
                    return
                with lock:
                    pending.add(sock)
                threading.Thread(target=handshake, args=(sock, address), daemon=True,
                                 name=f"rlinf-pipe-handshake {name}").start()

        server.settimeout(None)
        threading.Thread(target=acceptor, daemon=True, name=f"rlinf-pipe-accept {name}").start()
        ranks: list[int] = []
        try:
            while len(ranks) < expected:
                try:
                    sock, rank, error = results.get(timeout=max(deadline - time.monotonic(), 0.001))
                except queue.Empty:
                    refused = self.refused.get(name, 0)
                    raise PipeTimeout(f"pipe {name!r}: {len(ranks)} of {expected} peers connected within "
                                      f"{timeout:g} s" + (f" ({refused} refused connection(s))" if refused
                                                          else "")) from None
                if error is not None:
                    self.refused[name] = self.refused.get(name, 0) + 1
                    print(f"warning: pipe {name!r}: refused a connection from {rank[0]}:{rank[1]} ({error})",
                          file=sys.stderr, flush=True)
                    continue
                if rank in ranks:
                    sock.close()
                    raise SchedulerError(f"pipe {name!r}: {peer_group}[{rank}] connected twice")
                self.pipes.setdefault(name, {})[rank] = Pipe(sock, name, f"{peer_group}[{rank}]")
                ranks.append(rank)
        finally:
            server.close()
            with lock:
                for sock in pending:  # handshakes still running past the end: not ours any more
                    sock.close()
        return ranks

    def close(self, name: str | None = None) -> None:
        for n in [name] if name is not None else list(self.pipes):
            for pipe in self.pipes.pop(n, {}).values():
                pipe.close()
        for n in [name] if name is not None else list(self.listeners):
            if n in self.listeners:
                self.listeners.pop(n)[0].close()
