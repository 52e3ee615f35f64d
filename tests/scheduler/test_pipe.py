"""Pipes: direct ordered worker-to-worker message streams (PipeLink / Worker.pipe)."""

from __future__ import annotations

import os
import socket
import sys
import threading

import numpy as np
import pytest
import ray.cloudpickle
import torch

from rlinf.scheduler import (
    PipeClosedError,
    PipeLink,
    PipePeerError,
    PipeTimeout,
    Worker,
    WorkerError,
    WorkerGroup,
    plan_placement,
)
from rlinf.scheduler.errors import SchedulerError
from rlinf.scheduler.pipe import Pipe

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _pair():
    a, b = socket.socketpair()
    return Pipe(a, "t", "B"), Pipe(b, "t", "A")


def test_tensors_arrays_and_nested_values_round_trip_exactly():
    left, right = _pair()
    big = torch.randn(600, 700)  # 1.6 MiB: sent out of band in several pieces
    msg = {"f32": torch.arange(6, dtype=torch.float32).view(2, 3).t(),  # non-contiguous view
           "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),    # no numpy dtype: pickled
           "bool": torch.tensor([True, False]), "i64": torch.tensor([1 << 40]),
           "np": np.arange(5, dtype=np.int16), "big": big, "none": None, "text": ["a", "b"]}
    out: dict = {}
    reader = threading.Thread(target=lambda: out.update(got=right.recv(key="m")))
    reader.start()
    left.send(msg, key="m")
    reader.join(10)
    got = out["got"]
    for k in ("f32", "bf16", "bool", "i64", "big"):
        assert got[k].dtype == msg[k].dtype and torch.equal(got[k], msg[k]), k
    assert got["f32"].shape == (3, 2)
    np.testing.assert_array_equal(got["np"], msg["np"])
    assert got["none"] is None and got["text"] == ["a", "b"]
    before = float(big[0, 0])
    got["big"][0, 0] = before + 1.0  # received tensors are writable copies, not views of the sender's
    assert float(big[0, 0]) == before and got["big"].numpy().flags.writeable


def test_order_is_kept_and_a_wrong_key_fails_loudly():
    left, right = _pair()
    for i in range(50):
        left.send(torch.tensor([i]), key=f"k{i}")
    assert [int(right.recv(key=f"k{i}")) for i in range(50)] == list(range(50))
    left.send(1, key="obs/0")
    with pytest.raises(SchedulerError, match="expected message 'act/0' from A, got 'obs/0'"):
        right.recv(key="act/0")


def test_timeout_closed_peer_and_peer_error_are_reported_not_waited_on():
    left, right = _pair()
    with pytest.raises(PipeTimeout, match="nothing from A within 0.05 s"):
        right.recv(key="x", timeout=0.05)
    left.send_error("simulator process 3 (PushCube-v1) hung")
    with pytest.raises(PipePeerError, match="A failed: simulator process 3 .* hung"):
        right.recv()
    left.close()
    with pytest.raises(PipeClosedError, match="A closed the connection"):
        right.recv()
    right.send_error("ignored: the peer is gone")  # never raises


class Env(Worker):
    def serve(self, steps: int) -> list[int]:
        pipe = self.pipe("loop", self.rank % 2)
        got = []
        for t in range(steps):
            pipe.send({"obs": torch.full((3,), float(t)), "rank": self.rank, "pid": os.getpid()},
                      key=f"obs{t}")
            got.append(int(pipe.recv(key=f"act{t}")))
        return got

    def fail(self) -> None:
        self.pipe("loop", self.rank % 2).send_error(f"env {self.rank} crashed")
        raise RuntimeError("boom")

    def node(self) -> int:
        return self.node_rank


class Policy(Worker):
    def serve(self, env_ranks: list[int], steps: int) -> list[tuple[int, int]]:
        seen = []
        for t in range(steps):
            for e in env_ranks:
                msg = self.pipe("loop", e).recv(key=f"obs{t}", timeout=30)
                assert msg["rank"] == e and float(msg["obs"][0]) == t
                seen.append((e, msg["pid"] != os.getpid()))
                self.pipe("loop", e).send(torch.tensor(100 * e + t), key=f"act{t}")
        return seen

    def wait_one(self, env_rank: int):
        return self.pipe("loop", env_rank).recv(timeout=30)

    def missing(self):
        return self.pipe("nope", 0)


@pytest.mark.ray
def test_pipes_between_groups_across_two_fake_nodes(ray_cluster):
    plan = plan_placement({"env": "0-3", "rollout": "8,9"}, ray_cluster.shape)  # rollout on node 1
    env = WorkerGroup.launch(ray_cluster, Env, plan.component("env"))
    pol = WorkerGroup.launch(ray_cluster, Policy, plan.component("rollout"))
    try:
        assert env.node().wait() == [0, 0, 0, 0]
        PipeLink.connect("loop", env, pol, pairs=[(e, e % 2) for e in range(4)])
        envs = env.serve(5)
        served = pol.execute_each("serve", [([0, 2], 5), ([1, 3], 5)]).wait()
        assert envs.wait() == [[100 * e + t for t in range(5)] for e in range(4)]
        assert served[0] == [(e, True) for _ in range(5) for e in (0, 2)]
        # a failing env tells its policy worker, which raises instead of waiting
        waiting = pol.execute("wait_one", 1, ranks=[1])
        with pytest.raises(WorkerError, match="boom"):
            env.execute("fail", ranks=[1]).wait(timeout=30)
        with pytest.raises(WorkerError, match="env\\[1\\] failed: env 1 crashed"):
            waiting.wait(timeout=30)
        with pytest.raises(WorkerError, match="no pipe 'nope' to peer rank 0"):
            pol.execute("missing", ranks=[0]).wait(timeout=30)
        with pytest.raises(ValueError, match="a pair appears twice"):
            PipeLink.connect("x", env, pol, pairs=[(0, 0), (0, 0)])
        with pytest.raises(IndexError, match="rollout has ranks 0-1, not 5"):
            PipeLink.connect("x", env, pol, pairs=[(0, 5)])
    finally:
        env.shutdown()
        pol.shutdown()
