"""Pipes prove the run's secret both ways before a byte is unpickled; rogue peers are refused and counted."""

from __future__ import annotations

import os
import socket
import struct
import sys
import tempfile
import threading
import time

import pytest
import ray.cloudpickle
import torch

from rlinf.scheduler import PipeLink, Worker, WorkerGroup, plan_placement
from rlinf.scheduler.errors import SchedulerError
from rlinf.scheduler.handshake import MAGIC, AuthError, prove_as_connector
from rlinf.scheduler.pipe import PipeEnds, encode
from rlinf.scheduler.secret import RunSecret

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _Plant:
    """Unpickling this creates a file: the proof that a pickle from the peer was read."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def _rogue(address, path, mode):
    """Connect like a peer that does not hold the secret: send a rank and a booby-trapped pickle
    at once (``blind``), or answer the challenge with a wrong proof (``guess``), or stay silent."""
    sock = socket.create_connection(address, timeout=5)
    if mode == "blind":
        sock.sendall(struct.pack("!Q", 0) + b"".join(bytes(p) for p in encode(("k", _Plant(path)))))
    elif mode == "guess":
        try:
            prove_as_connector(sock, RunSecret.new(), 5.0)
        except AuthError:
            pass
    return sock


def test_rogue_peers_first_are_refused_and_counted_real_peers_still_connect():
    secret = RunSecret.new()
    plant = os.path.join(tempfile.mkdtemp(), "planted")
    listener, peers = PipeEnds(secret), [PipeEnds(secret), PipeEnds(secret)]
    address = listener.listen("p", "127.0.0.1", 2, "env")
    got = {}
    accepting = threading.Thread(target=lambda: got.update(ranks=listener.accept("p", timeout=30)))
    accepting.start()
    rogues = [_rogue(address, plant, "silent"), _rogue(address, plant, "blind")]
    guesser = threading.Thread(target=lambda: rogues.append(_rogue(address, plant, "guess")))
    guesser.start()
    guesser.join(10)  # its wrong proof was answered by closing the connection
    for rank, ends in enumerate(peers):
        ends.connect("p", rank, 0, "rollout[0]", *address, timeout=10)
    accepting.join(30)
    assert sorted(got["ranks"]) == [0, 1]
    assert not os.path.exists(plant), "a pickle from an unauthenticated peer was read"
    assert listener.refused["p"] == 2  # blind and guess; the silent one is closed when accepting ends
    for rank, ends in enumerate(peers):
        ends.get("p", 0).send(torch.tensor([rank]), key="x")
        assert int(listener.get("p", rank).recv(key="x", timeout=5)) == rank
    for sock in rogues:
        sock.close()


def test_a_listener_without_the_secret_is_not_trusted_by_the_connector():
    fake = socket.create_server(("127.0.0.1", 0))

    def impostor():  # plays the listener's part without the key: its proof is a guess
        sock, _ = fake.accept()
        sock.sendall(MAGIC + os.urandom(32))
        sock.recv(64)
        sock.sendall(os.urandom(32))
        time.sleep(1)
        sock.close()

    threading.Thread(target=impostor, daemon=True).start()
    with pytest.raises(SchedulerError, match="is not rollout\\[0\\]'s listener .*did not prove"):
        PipeEnds(RunSecret.new()).connect("p", 0, 0, "rollout[0]", *fake.getsockname(), timeout=5)
    fake.close()


def test_a_non_rlinf_listener_is_named_and_pipes_need_a_secret():
    with pytest.raises(SchedulerError, match="not started by a WorkerGroup"):
        PipeEnds(None).listen("p", "127.0.0.1", 1, "env")
    fake = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=lambda: fake.accept()[0].sendall(b"HTTP/1.1 400 Bad\r\n" + b"x" * 64),
                     daemon=True).start()
    with pytest.raises(SchedulerError, match="does not speak rlinf's pipe handshake"):
        PipeEnds(RunSecret.new()).connect("p", 0, 0, "rollout[0]", *fake.getsockname(), timeout=5)


class Talker(Worker):
    def send(self, value):
        self.pipe("auth", 0).send(value, key="v")

    def recv(self, peer):
        return self.pipe("auth", peer).recv(key="v", timeout=30)

    def planted(self, path):
        return os.path.exists(path)


@pytest.mark.ray
def test_a_rogue_client_connecting_first_to_a_workers_listener_is_refused(ray_cluster):
    plan = plan_placement({"env": "0,1", "rollout": "8"}, ray_cluster.shape)
    env = WorkerGroup.launch(ray_cluster, Talker, plan.component("env"))
    pol = WorkerGroup.launch(ray_cluster, Talker, plan.component("rollout"))
    plant = os.path.join(tempfile.mkdtemp(), "planted")
    try:
        # The listening side as PipeLink.connect drives it, with a rogue connection put first.
        node = ray_cluster.node(pol.placement.processes[0].node)
        address = tuple(pol._execute("_rlinf_pipe_listen", "auth", node.ip, 2, "env").wait(timeout=30)[0])
        rogue = _rogue(address, plant, "blind")
        accepting = pol._execute("_rlinf_pipe_accept", "auth", 30.0)
        for a in (0, 1):
            env._execute("_rlinf_pipe_connect", "auth", 0, "rollout[0]", *address, 30.0, ranks=[a]).wait(timeout=40)
        accepting.wait(timeout=40)
        link = PipeLink("auth", env, pol, [(0, 0), (1, 0)])
        assert link.refused() == 1
        assert pol.planted(plant).wait() == [False]
        env.execute("send", 7, ranks=[1]).wait(timeout=30)
        assert pol.recv(1).wait(timeout=30) == [7]
        rogue.close()
        # The ordinary path still connects and refuses nothing more (the count is the run's total).
        link = PipeLink.connect("auth", env, pol, pairs=[(0, 0), (1, 0)])
        env.execute("send", 5, ranks=[0]).wait(timeout=30)
        assert pol.recv(0).wait(timeout=30) == [5] and link.refused() == 1
    finally:
        env.shutdown()
        pol.shutdown()
