"""Channels between worker groups on a real Ray cluster."""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import time

import pytest
import ray.cloudpickle
import torch

from rlinf.scheduler import Channel, ChannelTimeout, Worker, WorkerDiedError, WorkerGroup, plan_placement
from rlinf.scheduler.channel import PayloadLostError

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray

N_PER_PRODUCER = 40
Obs = collections.namedtuple("Obs", "image step")


class Producer(Worker):
    def produce(self, channel: Channel, n: int, key: str):
        for i in range(n):
            # every 10th item carries a tensor large enough to go through the object store
            payload = torch.full((20_000,), float(i)) if i % 10 == 0 else i
            channel.put({"producer": self.rank, "seq": i, "payload": payload}, key=key)
        return n

    def put_and_report(self, channel: Channel, items: list, key: str):
        for item in items:
            channel.put(item, key=key)
        return os.getpid()


class Consumer(Worker):
    def consume(self, channel: Channel, key: str):
        got = []
        while True:
            batch = channel.get_batch(key=key, count=3, timeout=30) if self.rank % 2 else \
                [channel.get(key=key, timeout=30)]
            for item in batch:
                if item is None:
                    return got
                payload = item["payload"]
                if isinstance(payload, torch.Tensor):
                    assert torch.equal(payload, torch.full((20_000,), float(item["seq"])))
                got.append((item["producer"], item["seq"]))

    def pid(self):
        return os.getpid()

    def get_one(self, channel: Channel, key: str, timeout: float):
        return channel.get(key=key, timeout=timeout)


def assert_each_item_once_in_producer_order(received: list, producers: int, per_producer: int):
    """``received``: per consumer, the ``(producer, seq)`` pairs it got, in the order it got them."""
    every = sorted(x for got in received for x in got)
    assert every == [(p, i) for p in range(producers) for i in range(per_producer)]
    for got in received:
        for p in range(producers):
            seq = [i for (pp, i) in got if pp == p]
            assert seq == sorted(seq), f"producer {p} out of order at a consumer"


@pytest.fixture(scope="module")
def groups(ray_cluster):
    plan = plan_placement({"producer": "0-3:0-7", "consumer": "8-11"}, ray_cluster.shape)
    producers = WorkerGroup.launch(ray_cluster, Producer, plan.component("producer"))
    consumers = WorkerGroup.launch(ray_cluster, Consumer, plan.component("consumer"))
    yield producers, consumers
    producers.shutdown()
    consumers.shutdown()


def test_8_producers_4_consumers_exactly_once_fifo_with_backpressure(groups):
    producers, consumers = groups
    channel = Channel.create("stress")
    channel.declare_queue("items", maxsize=4)  # small: producers block on a full queue
    consuming = consumers.consume(channel, "items")
    assert producers.produce(channel, N_PER_PRODUCER, "items").wait(timeout=240) == [N_PER_PRODUCER] * 8
    # End markers until every consumer has stopped (a batch may swallow several markers).
    deadline = time.monotonic() + 120
    while not consuming.done() and time.monotonic() < deadline:
        try:
            channel.put(None, key="items", timeout=1)
        except ChannelTimeout:
            pass
    received = consuming.wait(timeout=240)
    assert_each_item_once_in_producer_order(received, producers=8, per_producer=N_PER_PRODUCER)
    stats = channel.stats()["items"]
    assert stats["blocked_puts"] == 0 and stats["waiting_gets"] == 0


def test_bounded_queue_backpressure_and_put_timeout(ray_cluster):
    channel = Channel.create("bounded", maxsize=2)
    channel.put("a")
    channel.put("b")
    with pytest.raises(ChannelTimeout, match="queue full"):
        channel.put("c", timeout=0.3)
    assert channel.qsize() == 2
    assert channel.get() == "a"
    channel.put("c", timeout=5)
    assert channel.get_batch(count=2) == ["b", "c"]


def test_get_timeout_and_consumer_wakes_when_data_arrives(groups):
    _, consumers = groups
    channel = Channel.create("wake")
    with pytest.raises(ChannelTimeout):
        channel.get(key="k", timeout=0.2)
    waiting = consumers.execute("get_one", channel, "k", 30, ranks=[0])
    time.sleep(0.5)
    assert not waiting.done()
    channel.put("hello", key="k")
    assert waiting.wait(timeout=30) == ["hello"]


def test_tensor_payloads_nested_and_zero_copy(ray_cluster):
    channel = Channel.create("tensors")
    big = torch.randn(1024, 1024)  # 4 MiB: through the object store
    item = {"obs": [big, torch.arange(3)], "meta": ("ep", 7), "reward": torch.tensor(1.5)}
    channel.put(item, weight=2)
    got = channel.get()
    assert torch.equal(got["obs"][0], big) and torch.equal(got["obs"][1], torch.arange(3))
    assert got["meta"] == ("ep", 7) and got["reward"].item() == 1.5
    assert got["obs"][0].data_ptr() != big.data_ptr()


def test_get_batch_by_weight(ray_cluster):
    channel = Channel.create("weights")
    for i, w in enumerate([2, 2, 1, 4]):
        channel.put(i, weight=w)
    assert channel.get_batch(target_weight=5) == [0, 1, 2]
    assert channel.get_batch(target_weight=1) == [3]


def test_async_put_and_get(ray_cluster):
    channel = Channel.create("async")

    async def main():
        await asyncio.gather(*(channel.async_put(i, key="a") for i in range(1)))
        await channel.async_put(1, key="a")
        first = await channel.async_get(key="a")
        rest = await channel.async_get_batch(key="a", count=1)
        with pytest.raises(ChannelTimeout):
            await channel.async_get(key="a", timeout=0.2)
        return first, rest

    assert asyncio.run(main()) == (0, [1])


def test_dead_consumer_does_not_wedge_the_channel(ray_cluster, groups):
    _, consumers = groups
    channel = Channel.create("dead-consumer")
    plan = plan_placement({"doomed": "12"}, ray_cluster.shape)
    doomed = WorkerGroup.launch(ray_cluster, Consumer, plan.component("doomed"))
    pid = doomed.pid().wait(timeout=30)[0]
    blocked = doomed.get_one(channel, "k", 60)
    time.sleep(0.5)
    os.kill(pid, 9)
    with pytest.raises(WorkerDiedError):
        blocked.wait(timeout=30)
    time.sleep(1.5)  # longer than one server-side wait slice (GET_SLICE_S)
    for i in range(3):
        channel.put(i, key="k")
    got = [consumers.execute("get_one", channel, "k", 30, ranks=[0]).wait(timeout=30)[0]
           for _ in range(3)]
    assert got == [0, 1, 2]


def test_dead_producer_loses_only_its_tensors_and_says_so(ray_cluster):
    channel = Channel.create("dead-producer")
    plan = plan_placement({"shortlived": "13"}, ray_cluster.shape)
    group = WorkerGroup.launch(ray_cluster, Producer, plan.component("shortlived"))
    pid = group.put_and_report(channel, [{"small": 1}, {"big": torch.ones(100_000)}], "k").wait(30)[0]
    os.kill(pid, 9)
    time.sleep(1.0)
    channel.put("from the driver", key="k")
    assert channel.get(key="k", timeout=10) == {"small": 1}
    with pytest.raises(PayloadLostError, match=r"shortlived\[0\].*1 item\(s\) lost") as err:
        channel.get_batch(key="k", count=2, timeout=30)
    assert err.value.lost == [0]
    # the batch's good item went back to the front: only the dead producer's tensors are gone
    assert channel.get(key="k", timeout=10) == "from the driver"
    channel.put("still works", key="k")
    assert channel.get(key="k", timeout=10) == "still works"
    group.shutdown()  # a dead group left registered would be blamed for later failures


def test_cancelled_async_get_loses_nothing(ray_cluster):
    channel = Channel.create("cancelled-get")

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(channel.async_get(key="k"), 0.2)  # the caller gives up
        channel.put("item-1", key="k")  # arrives while the abandoned get may still be pending
        return await channel.async_get(key="k", timeout=10)

    assert asyncio.run(main()) == "item-1"
    stats = channel.stats()["k"]
    assert stats["total_put"] == 1 and stats["total_got"] == 1 and stats["queued"] == 0


def test_cancelled_async_put_on_a_full_queue_is_withdrawn(ray_cluster):
    channel = Channel.create("cancelled-put", maxsize=1)
    channel.put("kept")

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(channel.async_put("withdrawn"), 0.3)

    asyncio.run(main())
    deadline = time.monotonic() + 10
    while channel.stats()["default"]["blocked_puts"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert channel.get(timeout=5) == "kept"
    with pytest.raises(ChannelTimeout):
        channel.get(timeout=1.5)  # the withdrawn put never arrives


def test_bad_arguments_fail_before_anything_is_sent(ray_cluster):
    channel = Channel.create("bad-args")
    for weight in ("x", float("nan"), -1.0, True):
        with pytest.raises(ValueError, match="weight must be a finite number >= 0"):
            channel.put("item", weight=weight)
    with pytest.raises(ValueError, match="count must be an int >= 1"):
        channel.get_batch(count=2.5)
    assert channel.qsize() == 0
    with pytest.raises(ValueError, match="already exists with maxsize 0, not 3"):
        Channel.create("bad-args", maxsize=3)


def test_payload_types_identity_and_small_views(ray_cluster):
    import collections
    import pickle

    from rlinf.scheduler.channel.payload import pack, unpack_many

    big = torch.randn(256, 256)  # 256 KiB: object store
    item = {
        "ordered": collections.OrderedDict([("b", 1), ("a", big)]),
        "counts": collections.defaultdict(int, {"x": 2}),
        "obs": Obs(big, 3),
        "twice": [big, big],
        "view": torch.randn(1_000_000)[:10],  # 10 floats of a 4 MB storage
    }
    packed = pack(item)
    assert len(pickle.dumps(packed.skeleton)) < 10_000  # the 4 MB storage did not ride along
    got = unpack_many([packed])[0]
    assert type(got["ordered"]) is collections.OrderedDict and list(got["ordered"]) == ["b", "a"]
    assert type(got["counts"]) is collections.defaultdict and got["counts"]["missing"] == 0
    assert isinstance(got["obs"], Obs) and got["obs"].step == 3 and torch.equal(got["obs"].image, big)
    assert got["twice"][0] is got["twice"][1] and torch.equal(got["twice"][0], big)
    assert got["ordered"]["a"] is got["obs"].image  # one tensor object per tensor sent
    assert torch.equal(got["view"], item["view"])


def test_close_ends_the_channel_for_every_handle(ray_cluster):
    from rlinf.scheduler.channel import ChannelClosedError

    ch = Channel.create("closing-test")
    ch.put(1)
    other = Channel.connect("closing-test")
    assert other.get(timeout=10) == 1
    ch.close()
    ch.close()  # twice is harmless
    with pytest.raises(ChannelClosedError, match="closing-test"):
        ch.put(2)
    with pytest.raises(ChannelClosedError):
        other.qsize()
    again = Channel.create("closing-test")  # the name is free again
    assert again.qsize() == 0
    again.close()
