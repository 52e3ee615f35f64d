"""The channel's same-node socket path: taken when it should be, and every channel guarantee kept."""

from __future__ import annotations

import asyncio
import random
import signal
import sys
import threading
import time

import pytest
import ray
import ray.cloudpickle
import torch

from rlinf.scheduler import Channel, ChannelTimeout, Worker, WorkerGroup, plan_placement
from rlinf.scheduler.channel import ChannelClosedError, KeyedQueues, fast_client

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from test_channel import assert_each_item_once_in_producer_order

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray

N_PER_PRODUCER = 30
BIG = 20_000  # float32 elements: 80 KB, above the 64 KiB inline limit (object store, Ray RPC)


class Producer(Worker):
    def produce(self, channel: Channel, n: int, key: str) -> int:
        for i in range(n):
            payload = torch.full((BIG,), float(i)) if i % 5 == 0 else i
            channel.put({"producer": self.rank, "seq": i, "payload": payload}, key=key)
        return n


class Consumer(Worker):
    def consume(self, channel: Channel, key: str) -> list:
        got = []
        while True:
            batch = channel.get_batch(key=key, count=3, timeout=60) if self.rank == 0 else \
                [channel.get(key=key, timeout=60)]
            for item in batch:
                if item is None:
                    return got
                if isinstance(item["payload"], torch.Tensor):
                    assert torch.equal(item["payload"], torch.full((BIG,), float(item["seq"])))
                got.append((item["producer"], item["seq"]))


def socket_counts(channel: Channel, key: str, expected: tuple[int, int] | None = None) -> tuple:
    """``(socket_put, socket_got)`` of ``key``; with ``expected``, waits a little for the counts
    to reach it (a get's acknowledgement is one-way: the actor may count it just after a stats
    call overtook it)."""
    deadline = time.monotonic() + 5
    while True:
        row = channel.stats()[key]
        counts = row["socket_put"], row["socket_got"]
        if expected is None or counts == expected or time.monotonic() > deadline:
            return counts
        time.sleep(0.02)


def test_mixed_socket_and_rpc_items_from_several_producers_exactly_once_in_order(ray_cluster):
    # producers on node 0 (the channel actor's node: small items over the socket, large ones over
    # Ray RPC); consumer 0 on node 0 (socket gets, stashed batches for large items), consumer 1 on
    # node 1 (Ray RPC only).
    plan = plan_placement({"fp_producer": "0-2", "fp_consumer": "3,8"}, ray_cluster.shape)
    producers = WorkerGroup.launch(ray_cluster, Producer, plan.component("fp_producer"), wait=False)
    consumers = WorkerGroup.launch(ray_cluster, Consumer, plan.component("fp_consumer"), wait=False)
    producers.wait_started()
    consumers.wait_started()
    try:
        channel = Channel.create("fast-mixed")
        channel.declare_queue("items", maxsize=4)  # producers block: socket puts wait too
        consuming = consumers.consume(channel, "items")
        assert producers.produce(channel, N_PER_PRODUCER, "items").wait(timeout=120) == [N_PER_PRODUCER] * 3
        markers, deadline = 0, time.monotonic() + 60
        while not consuming.done() and time.monotonic() < deadline:
            try:
                channel.put(None, key="items", timeout=1)
                markers += 1
            except ChannelTimeout:
                pass
        received = consuming.wait(timeout=60)
    finally:
        producers.shutdown()
        consumers.shutdown()
    assert_each_item_once_in_producer_order(received, producers=3, per_producer=N_PER_PRODUCER)
    assert all(received), "both consumers took items"
    stats = channel.stats()["items"]
    large = 3 * N_PER_PRODUCER // 5
    assert stats["total_put"] == 3 * N_PER_PRODUCER + markers
    assert stats["socket_put"] == stats["total_put"] - large  # only the large ones used Ray RPC
    assert 0 < stats["socket_got"] < stats["total_got"]  # consumer 0 used the socket, 1 did not
    assert stats["blocked_puts"] == 0 and stats["waiting_gets"] == 0
    assert channel.refused() == 0  # the run's processes all proved the channel's key


def test_threads_sharing_a_handle_get_each_item_once(ray_cluster):
    channel = Channel.create("fast-threads")
    got: list[list] = [[] for _ in range(4)]

    def produce(p: int) -> None:
        for i in range(40):
            channel.put((p, i), key="t")

    def consume(c: int) -> None:
        got[c] += channel.get_batch(key="t", count=40, timeout=60)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
    threads += [threading.Thread(target=consume, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert_each_item_once_in_producer_order(got, producers=4, per_producer=40)
    assert socket_counts(channel, "t", (160, 160)) == (160, 160)


def test_timeouts_on_the_socket_path_take_and_add_nothing(ray_cluster):
    channel = Channel.create("fast-timeouts", maxsize=2)
    started = time.monotonic()
    with pytest.raises(ChannelTimeout):
        channel.get(key="k", timeout=0.3)
    assert 0.25 < time.monotonic() - started < 3
    channel.put("a", key="k")
    with pytest.raises(ChannelTimeout):
        channel.get_batch(key="k", count=2, timeout=0.3)  # the partial batch goes back
    channel.put("b", key="k")
    with pytest.raises(ChannelTimeout, match="queue full"):
        channel.put("c", key="k", timeout=0.3)
    assert channel.qsize("k") == 2
    assert channel.get_batch(key="k", count=2, timeout=5) == ["a", "b"]
    assert socket_counts(channel, "k", (2, 2)) == (2, 2)
    stats = channel.stats()["k"]
    assert stats["blocked_puts"] == 0 and stats["waiting_gets"] == 0


class _Interrupted(Exception):
    pass


def _interrupt_after(seconds: float):
    def raise_interrupt(signum, frame):
        raise _Interrupted()

    previous = signal.signal(signal.SIGALRM, raise_interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return previous


def _wait_for_qsize(channel: Channel, key: str, n: int) -> None:
    deadline = time.monotonic() + 10
    while channel.qsize(key) != n and time.monotonic() < deadline:
        time.sleep(0.02)
    assert channel.qsize(key) == n


def test_interrupted_get_and_unacknowledged_replies_lose_nothing(ray_cluster):
    channel = Channel.create("fast-interrupted")
    assert channel.qsize("k") == 0  # the socket is resolved before the alarm is armed
    previous = _interrupt_after(0.3)
    try:
        with pytest.raises(_Interrupted):
            channel.get(key="k")  # interrupted while waiting on the socket
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    channel.put("item-1", key="k")  # arrives while the abandoned get may still be pending
    assert channel.get(key="k", timeout=10) == "item-1"

    # A reply that was sent but never acknowledged (its reader went away) goes back to the front,
    # and so does a batch kept for a Ray call (large items) that nobody came to take.
    client = fast_client.client_for(channel._actor, channel._call)
    big = torch.ones(BIG)
    for item in ("a", "b", big):
        channel.put(item, key="k")
    for count, reply in ((1, "items"), (3, "stashed")):
        pipe = client._connect()
        pipe.send(("get", "k", count, None, 5.0), key=f"raw-{count}")
        assert pipe.recv(key=f"raw-{count}")[0] == reply
        pipe.close()
        _wait_for_qsize(channel, "k", 3)
    a, b, tensor = channel.get_batch(key="k", count=3, timeout=10)
    assert (a, b) == ("a", "b") and torch.equal(tensor, big)
    stats = channel.stats()["k"]
    assert stats["total_put"] == 4 and stats["total_got"] == 4 and stats["queued"] == 0


def test_gets_interrupted_at_random_moments_lose_and_duplicate_nothing(ray_cluster):
    channel = Channel.create("fast-random-interrupts")
    assert channel.qsize() == 0
    n, got, interrupted, in_get = 300, [], 0, [False]

    def produce() -> None:
        for i in range(n):
            channel.put(i)
            if i % 20 == 0:
                time.sleep(0.005)

    def raise_inside_get(signum, frame):
        if in_get[0]:  # only inside the channel call: an item the caller already holds stays held
            raise _Interrupted()

    previous = signal.signal(signal.SIGALRM, raise_inside_get)
    producer = threading.Thread(target=produce)
    producer.start()
    rng = random.Random(0)
    try:
        while len(got) < n:
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.00005, 0.001))
            try:
                in_get[0] = True
                item = channel.get(timeout=10)
                in_get[0] = False
                got.append(item)
            except _Interrupted:
                in_get[0] = False
                interrupted += 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        producer.join(30)
    assert sorted(got) == list(range(n)) and interrupted > 50
    stats = channel.stats()["default"]
    assert stats["total_got"] == n and stats["queued"] == 0


def test_killed_channel_actor_is_channel_closed_on_the_socket_path(ray_cluster):
    channel = Channel.create("fast-killed")
    channel.put(1)
    assert channel.get() == 1 and socket_counts(channel, "default", (1, 1)) == (1, 1)
    outcome = {}

    def wait_for_an_item() -> None:
        try:
            outcome["got"] = channel.get(key="k", timeout=30)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    waiting = threading.Thread(target=wait_for_an_item)
    waiting.start()
    time.sleep(0.5)
    ray.kill(channel._actor)
    waiting.join(20)
    assert isinstance(outcome.get("error"), ChannelClosedError), outcome
    with pytest.raises(ChannelClosedError, match="fast-killed"):
        channel.put(2)
    with pytest.raises(ChannelClosedError):
        channel.qsize()


def test_forced_rpc_works_and_bypasses_the_socket(ray_cluster, monkeypatch):
    channel = Channel.create("fast-forced")
    rpc = channel.rpc_only()
    rpc.put("via rpc", key="k")
    assert rpc.qsize("k") == 1 and rpc.get(key="k", timeout=5) == "via rpc"
    assert socket_counts(channel, "k") == (0, 0)
    monkeypatch.setenv(fast_client.FAST_PATH_ENV, "0")
    channel.put("env off", key="k")
    assert channel.get(key="k", timeout=5) == "env off"
    assert socket_counts(channel, "k") == (0, 0)
    monkeypatch.delenv(fast_client.FAST_PATH_ENV)
    channel.put("default", key="k")
    assert channel.get(key="k", timeout=5) == "default"
    assert socket_counts(channel, "k", (1, 1)) == (1, 1)


def test_nowait_operations_never_overtake_waiting_ones():
    async def main():
        q = KeyedQueues(default_maxsize=1)
        getter = asyncio.ensure_future(q.get_batch("k", count=2))
        await asyncio.sleep(0)
        assert q.put_nowait("k", 0) and q.get_batch_nowait("k", count=1) is None
        assert q.put_nowait("k", 1)  # the waiting getter took 0 and 1: room again
        assert await getter == [0, 1]
        assert q.put_nowait("k", 2) and not q.put_nowait("k", 3)  # full
        blocked = asyncio.ensure_future(q.put("k", 3))
        await asyncio.sleep(0)
        assert q.get_batch_nowait("k", count=1) == [(2, 1.0)]  # and the blocked put is admitted
        await blocked
        assert not q.put_nowait("k", 4)
        return q.get_batch_nowait("k", target_weight=1)

    assert asyncio.run(main()) == [(3, 1.0)]
