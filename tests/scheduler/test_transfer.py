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
