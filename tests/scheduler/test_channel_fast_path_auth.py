"""The channel fast path's socket serves only peers that prove the channel's key, before a byte
from them is unpickled; the others are closed, counted and named. No Ray: the server runs on an
event loop thread of this process, as it does on the channel actor's loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import socket
import threading
import time

import pytest

from rlinf.scheduler.channel import KeyedQueues
from rlinf.scheduler.channel.fast_client import FastPathBroken, FastPathClient, GetHooks
from rlinf.scheduler.channel.fast_path import FastPathServer
from rlinf.scheduler.pipe import encode
from rlinf.scheduler.secret import RunSecret

pytestmark = pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="Linux abstract sockets")


class _Plant:
    """Unpickling this creates a file: the proof that a pickle from the peer was read."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


@contextlib.contextmanager
def served(secret: RunSecret, handshake_s: float):
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = FastPathServer(KeyedQueues(), secret, handshake_s=handshake_s)
    try:
        yield server, asyncio.run_coroutine_threadsafe(server.start(), loop).result(5)
    finally:
        async def stop():
            server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:  # connections still served
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def _connect(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    sock.settimeout(5)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """Read what the server sent (its challenge) until it closes the connection."""
    while True:
        try:
            if not sock.recv(4096):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def test_peers_without_the_key_are_refused_unread_counted_and_named(tmp_path, capfd):
    key = RunSecret.new()
    plant = str(tmp_path / "planted")
    with served(key, handshake_s=0.5) as (server, address):
        # a peer that sends a booby-trapped request at once, as an old client would
        blind = _connect(address)
        blind.sendall(b"".join(bytes(p) for p in encode(("r0", ("put", "k", _Plant(plant), 1.0, None)))))
        # a client holding another key: its connection fails, and it never trusts the server
        with pytest.raises(FastPathBroken, match="did not prove|closed the connection"):
            FastPathClient(address, RunSecret.new()).qsize("k")
        silent = _connect(address)  # says nothing: closed once handshake_s has passed
        # the real client, meanwhile, is served
        client = FastPathClient(address, key)
        assert client.put("k", pickle.dumps({"x": 1}), 1.0, None, "r1") is True  # an inline item's bytes
        assert client.qsize("k") == 1
        hooks = GetHooks(take_stash=lambda rid: [], give_back=lambda pairs: None,
                         unpack=lambda pairs: [pickle.loads(blob) for blob, _ in pairs])
        assert client.get_batch("k", 1, None, 1.0, "r2", hooks) == [{"x": 1}]
        assert _closed_by_server(blind) and _closed_by_server(silent)
        deadline = time.monotonic() + 5
        while server.refused < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.refused == 3
        assert server.counts("k") == {"socket_put": 1, "socket_got": 1}  # the real client's only
        client.close()
    assert not os.path.exists(plant), "a pickle from a peer without the key was read"
    warnings = [line for line in capfd.readouterr().err.splitlines() if "refused a connection" in line]
    assert len(warnings) == 3
    assert all(f"from pid {os.getpid()} (uid {os.getuid()})" in line for line in warnings)


def test_the_server_refuses_to_start_without_a_key():
    with pytest.raises(TypeError, match="RunSecret"):
        FastPathServer(KeyedQueues(), None)
