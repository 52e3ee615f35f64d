"""Group-to-group tensor transfer over torch.distributed (gloo) across two fake nodes."""

from __future__ import annotations

import sys

import pytest
import ray.cloudpickle
import torch

from rlinf.scheduler import TensorLink, Worker, WorkerError, WorkerGroup, plan_placement

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray


def make_state(version: int) -> dict:
    g = torch.Generator().manual_seed(version)
    return {
        "embed.weight": torch.randn(300, 64, generator=g),  # 75 KiB fp32
        "layer.0.bias": torch.randn(64, generator=g).to(torch.bfloat16),
        "layer.0.weight": torch.randn(64, 64, generator=g).to(torch.bfloat16),
        "big.weight": torch.randn(512, 1024, generator=g),  # 2 MiB: larger than the bucket
        "step": torch.tensor([version], dtype=torch.int64),
        "mask": torch.rand(10, generator=g) > 0.5,
    }


class Sender(Worker):
    def push(self, version: int) -> int:
        return self.send_tensors("weights", make_state(version))

    def push_bad(self) -> int:
        return self.send_tensors("weights", {"w": torch.ones(3), "_extra_state": b"bytes"})

    def pull(self):
        return self.recv_tensors("weights")


class Receiver(Worker):
    def pull_and_check(self, version: int) -> dict:
        got = self.recv_tensors("weights")
        want = make_state(version)
        return {
            "names": list(got),
            "equal": all(torch.equal(got[k], want[k]) and got[k].dtype == want[k].dtype for k in want),
            "node": self.node_rank,
        }


@pytest.fixture(scope="module")
def linked(ray_cluster):
    plan = plan_placement({"actor": "0-1", "rollout": "2,9,15"}, ray_cluster.shape)
    actor = WorkerGroup.launch(ray_cluster, Sender, plan.component("actor"))
    rollout = WorkerGroup.launch(ray_cluster, Receiver, plan.component("rollout"))
    TensorLink.connect("weights", actor, 1, rollout, bucket_bytes=1 << 20, timeout_s=60)
    yield actor, rollout
    actor.shutdown()
    rollout.shutdown()


def test_state_dict_reaches_every_rank_of_the_other_group_twice(linked):
    actor, rollout = linked
    for version in (1, 2):  # a second sync replaces the first
        receiving = rollout.pull_and_check(version)
        sent = actor.execute("push", version, ranks=[1]).wait(timeout=120)[0]
        results = receiving.wait(timeout=120)
        assert [r["node"] for r in results] == [0, 1, 1]
        assert all(r["equal"] for r in results)
        assert results[0]["names"] == list(make_state(version))
        assert sent == sum(t.numel() * t.element_size() for t in make_state(version).values())


def test_misuse_is_reported_clearly(linked):
    actor, rollout = linked
    with pytest.raises(WorkerError, match="no tensor link named 'weights'.*TensorLink.connect"):
        actor.execute("push", 0, ranks=[0]).wait(timeout=30)  # rank 0 is not in the link
    with pytest.raises(WorkerError, match="its source \\(rank 0\\) cannot receive"):
        actor.execute("pull", ranks=[1]).wait(timeout=30)


def test_unsendable_dict_fails_both_sides_at_once(linked):
    actor, rollout = linked
    receiving = rollout.pull_and_check(0)
    with pytest.raises(WorkerError, match="'_extra_state' is a bytes, not a tensor"):
        actor.execute("push_bad", ranks=[1]).wait(timeout=30)
    # the receivers fail now, not after the link's 60 s timeout
    with pytest.raises(WorkerError, match="the sender aborted: '_extra_state' is a bytes"):
        receiving.wait(timeout=30)
    # and the link still works afterwards
    receiving = rollout.pull_and_check(3)
    actor.execute("push", 3, ranks=[1]).wait(timeout=60)
    assert all(r["equal"] for r in receiving.wait(timeout=60))


def test_a_worker_cannot_be_on_both_ends(linked):
    actor, _ = linked
    with pytest.raises(ValueError, match="appears twice"):
        TensorLink.connect("self-link", actor, 0, actor, dst_ranks=[0, 1])


class LazyState:
    """A LazyTensors source that records the order in which its tensors are made."""

    def __init__(self, version: int):
        self.state, self.made = make_state(version), []

    def tensor_specs(self):
        return [(n, tuple(t.shape), t.dtype) for n, t in self.state.items()]

    def __getitem__(self, name):
        self.made.append(name)
        return self.state[name]


class StreamSender(Worker):
    def push_lazy(self, version: int) -> dict:
        from rlinf.scheduler.transfer import send_order

        source = LazyState(version)
        sent = self.send_tensors("one-host", source)
        specs = source.tensor_specs()
        link = self._rlinf_link("one-host")
        return {"sent": sent, "made": source.made, "order": [specs[i][0] for i in send_order(specs)],
                "one_host": link.one_host, "staging_path": link.staging.path}

    def push(self, version: int) -> int:
        return self.send_tensors("one-host", make_state(version))

    def link_reads_in_place(self) -> bool:
        return self._rlinf_link("one-host").cma


class StreamReceiver(Worker):
    def pull_stream(self, version: int, stop_after: int | None = None) -> dict:
        import os

        want, seen, equal = make_state(version), [], True
        with self.recv_tensor_stream("one-host") as stream:
            specs = [s[0] for s in stream.specs]
            for name, tensor in stream:
                equal = equal and torch.equal(tensor, want[name]) and tensor.dtype == want[name].dtype
                seen.append(name)
                if stop_after is not None and len(seen) == stop_after:
                    break  # leaving the block receives the rest
        link = self._rlinf_link("one-host")
        return {"specs": specs, "seen": seen, "equal": equal,
                "staging_file_left": os.path.exists(link.staging.path)}

    def pull_dict(self, version: int) -> bool:
        got, want = self.recv_tensors("one-host"), make_state(version)
        return list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)


def _cma_works_between_processes() -> bool:
    """Whether this machine lets a process read another's memory (process_vm_readv)."""
    import subprocess

    from rlinf.scheduler.cma import probe

    child = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, ctypes; b = ctypes.create_string_buffer(bytes(range(16)), 16); "
         "print(os.getpid(), ctypes.addressof(b), flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid, address = map(int, child.stdout.readline().split())
        return probe(pid, address, bytes(range(16)))
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def test_one_host_link_streams_through_shared_memory_and_stays_in_step(ray_cluster):
    """Every member on node 0. A lazy source without stable memory goes through the two-slot
    /dev/shm staging (the file's name is removed once mapped), made once per tensor in send order;
    a dict source is read in place by the receivers (cross-memory attach) where the machine allows
    it; a receiver that stops early still leaves the link in step for the next send."""
    plan = plan_placement({"actor": "0", "rollout": "1-2"}, ray_cluster.shape)
    actor = WorkerGroup.launch(ray_cluster, StreamSender, plan.component("actor"))
    rollout = WorkerGroup.launch(ray_cluster, StreamReceiver, plan.component("rollout"))
    try:
        TensorLink.connect("one-host", actor, 0, rollout, bucket_bytes=1 << 16, timeout_s=60)
        assert actor.link_reads_in_place().wait(timeout=30) == [_cma_works_between_processes()]
        receiving = rollout.pull_stream(1)
        pushed = actor.push_lazy(1).wait(timeout=60)[0]
        results = receiving.wait(timeout=60)
        assert pushed["one_host"] and pushed["made"] == pushed["order"]
        assert pushed["sent"] == sum(t.numel() * t.element_size() for t in make_state(1).values())
        for r in results:
            assert r["equal"] and r["seen"] == pushed["order"] and set(r["specs"]) == set(make_state(1))
            assert not r["staging_file_left"]
        # rank 0 stops after two tensors; rank 1 reads all; then a dict receive of the next send
        receiving = [rollout.execute("pull_stream", 2, stop_after=2, ranks=[0]),
                     rollout.execute("pull_stream", 2, ranks=[1])]
        actor.push(2).wait(timeout=60)
        early, full = receiving[0].wait(timeout=60)[0], receiving[1].wait(timeout=60)[0]
        assert early["equal"] and len(early["seen"]) == 2 and full["equal"] and len(full["seen"]) == 6
        receiving = rollout.pull_dict(3)
        actor.push(3).wait(timeout=60)
        assert receiving.wait(timeout=60) == [True, True]
    finally:
        actor.shutdown()
        rollout.shutdown()


def test_shared_memory_is_refused_for_a_link_across_nodes(linked):
    actor, rollout = linked
    with pytest.raises(ValueError, match="shared_memory=True needs every member on the source's node"):
        TensorLink.connect("forced", actor, 1, rollout, shared_memory=True)
