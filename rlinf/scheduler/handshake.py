"""Mutual challenge-response over a fresh stream socket: both ends prove they hold the run's secret.

Used by pipes (:mod:`rlinf.scheduler.pipe`) and by the channel fast path's Unix socket
(:mod:`rlinf.scheduler.channel.fast_path`, whose server speaks it on an event loop:
:func:`prove_as_listener_async`) before a single pickle byte is read. The listener speaks first;
neither side sends or accepts anything else until both proofs have checked::

    listener -> connector   MAGIC, nonce_l                      (18 + 32 bytes)
    connector -> listener   nonce_c, HMAC(key, "connector", nonce_l, nonce_c)    (32 + 32)
    listener -> connector   HMAC(key, "listener", nonce_c, nonce_l)              (32)

Fresh random nonces from both sides make a recorded exchange useless later; the two labels keep
a proof from being reflected back. What it does not do: encrypt or sign the messages that follow
(someone who can already read and rewrite the traffic on the wire can still do so; see
``docs/security.md``).

Example (the two ends of a socket pair, one thread each):
    >>> import socket, threading
    >>> from rlinf.scheduler.secret import RunSecret
    >>> def listen(sock, key):
    ...     try:
    ...         prove_as_listener(sock, key, 5.0)
    ...     except AuthError:
    ...         sock.close()  # what a pipe listener does: close it, unread
    >>> key = RunSecret.new()
    >>> a, b = socket.socketpair()
    >>> t = threading.Thread(target=listen, args=(a, key)); t.start()
    >>> prove_as_connector(b, key, 5.0); t.join()
    >>> a2, b2 = socket.socketpair()
    >>> t = threading.Thread(target=listen, args=(a2, RunSecret.new())); t.start()
    >>> try:
    ...     prove_as_connector(b2, key, 5.0)
    ... except AuthError:
    ...     print("refused")
    refused
    >>> t.join()
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import socket
import time

from rlinf.scheduler.errors import SchedulerError
from rlinf.scheduler.secret import RunSecret

MAGIC = b"RLINF-PIPE-AUTH/1\n"
NONCE_BYTES = 32
MAC_BYTES = 32


class AuthError(SchedulerError):
    """The other end did not prove it holds the run's secret (or spoke another protocol)."""


def prove_as_listener(sock: socket.socket, secret: RunSecret, timeout: float) -> None:
    """The accepting side; raises :class:`AuthError` (or ``OSError``) and leaves the socket to the
    caller to close. Takes at most ``timeout`` seconds in all, however slowly the peer writes."""
    deadline = time.monotonic() + timeout
    nonce_l = secrets.token_bytes(NONCE_BYTES)
    _send(sock, MAGIC + nonce_l, deadline)
    reply = _recv_exactly(sock, NONCE_BYTES + MAC_BYTES, deadline)
    _send(sock, _listener_proof(secret, nonce_l, reply), deadline)


async def prove_as_listener_async(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                  secret: RunSecret, timeout: float) -> None:
    """:func:`prove_as_listener` for a connection served by an asyncio stream server (same bytes,
    same checks, at most ``timeout`` seconds in all); the caller closes the connection on an
    :class:`AuthError`.

    Example:
        >>> async def demo():
        ...     key = RunSecret.new()
        ...     async def serve(reader, writer):
        ...         await prove_as_listener_async(reader, writer, key, 5.0)
        ...         writer.write(b"ok")
        ...         await writer.drain()
        ...     server = await asyncio.start_server(serve, "127.0.0.1", 0)
        ...     sock = socket.create_connection(server.sockets[0].getsockname())
        ...     loop = asyncio.get_running_loop()
        ...     await loop.run_in_executor(None, prove_as_connector, sock, key, 5.0)
        ...     got = await loop.run_in_executor(None, sock.recv, 2)
        ...     sock.close()
        ...     server.close()
        ...     return got
        >>> asyncio.run(demo())
        b'ok'
    """

    async def exchange() -> None:
        nonce_l = secrets.token_bytes(NONCE_BYTES)
        writer.write(MAGIC + nonce_l)
        await writer.drain()
        try:
            reply = await reader.readexactly(NONCE_BYTES + MAC_BYTES)
        except asyncio.IncompleteReadError:
            raise AuthError("the peer closed the connection during the handshake") from None
        writer.write(_listener_proof(secret, nonce_l, reply))
        await writer.drain()

    try:
        await asyncio.wait_for(exchange(), timeout)
    except TimeoutError:
        raise AuthError("the handshake did not complete in time") from None


def _listener_proof(secret: RunSecret, nonce_l: bytes, reply: bytes) -> bytes:
    """Check the connector's ``nonce_c + proof``; the listener's own proof to send back."""
    nonce_c, proof = reply[:NONCE_BYTES], reply[NONCE_BYTES:]
    if not hmac.compare_digest(proof, secret.mac(b"connector", nonce_l, nonce_c)):
        raise AuthError("the connecting peer did not prove it holds the run's secret")
    return secret.mac(b"listener", nonce_c, nonce_l)


def prove_as_connector(sock: socket.socket, secret: RunSecret, timeout: float) -> None:
    """The connecting side; raises :class:`AuthError` when the listener's proof is wrong."""
    deadline = time.monotonic() + timeout
    hello = _recv_exactly(sock, len(MAGIC) + NONCE_BYTES, deadline)
    if not hello.startswith(MAGIC):
        raise AuthError("the listener does not speak rlinf's pipe handshake")
    nonce_l = hello[len(MAGIC):]
    nonce_c = secrets.token_bytes(NONCE_BYTES)
    _send(sock, nonce_c + secret.mac(b"connector", nonce_l, nonce_c), deadline)
    proof = _recv_exactly(sock, MAC_BYTES, deadline)
    if not hmac.compare_digest(proof, secret.mac(b"listener", nonce_c, nonce_l)):
        raise AuthError("the listener did not prove it holds the run's secret")


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise AuthError("the handshake did not complete in time")
    return left


def _send(sock: socket.socket, data: bytes, deadline: float) -> None:
    sock.settimeout(_left(deadline))
    try:
        sock.sendall(data)
    except TimeoutError:
        raise AuthError("the handshake did not complete in time") from None


def _recv_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    data = b""
    while len(data) < n:
        sock.settimeout(_left(deadline))
        try:
            chunk = sock.recv(n - len(data))
        except TimeoutError:
            raise AuthError("the handshake did not complete in time") from None
        if not chunk:
            raise AuthError("the peer closed the connection during the handshake")
        data += chunk
    return data
