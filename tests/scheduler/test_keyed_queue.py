"""KeyedQueues semantics (pure asyncio): FIFO, backpressure, batches, timeouts, exactly-once."""

from __future__ import annotations

import asyncio
import random

import pytest

from rlinf.scheduler.channel import KeyedQueues, QueueTimeout


def run(coro):
    return asyncio.run(coro)


def test_fifo_per_key_and_keys_are_independent():
    async def main():
        q = KeyedQueues()
        for i in range(3):
            await q.put("a", f"a{i}")
            await q.put("b", f"b{i}")
        return [await q.get("b") for _ in range(3)], await q.get_batch("a", count=3)

    assert run(main()) == (["b0", "b1", "b2"], ["a0", "a1", "a2"])


def test_bounded_queue_blocks_producer_until_consumer_takes():
    async def main():
        q = KeyedQueues(default_maxsize=2)
        await q.put("k", 0)
        await q.put("k", 1)
        blocked = asyncio.ensure_future(q.put("k", 2))
        await asyncio.sleep(0.05)
        was_blocked = not blocked.done()
        first = await q.get("k")
        await asyncio.wait_for(blocked, 1)
        return was_blocked, first, await q.get_batch("k", count=2)

    assert run(main()) == (True, 0, [1, 2])


def test_put_timeout_adds_nothing():
    async def main():
        q = KeyedQueues(default_maxsize=1)
        await q.put("k", "kept")
        with pytest.raises(QueueTimeout, match="queue full"):
            await q.put("k", "dropped", timeout=0.05)
        return q.qsize("k"), await q.get("k"), q.stats()["k"]["blocked_puts"]

    assert run(main()) == (1, "kept", 0)


def test_blocked_puts_are_admitted_in_arrival_order():
    async def main():
        q = KeyedQueues(default_maxsize=1)
        await q.put("k", 0)
        waiters = [asyncio.ensure_future(q.put("k", i)) for i in range(1, 6)]
        await asyncio.sleep(0)
        out = [await q.get("k") for _ in range(6)]
        await asyncio.gather(*waiters)
        return out

    assert run(main()) == [0, 1, 2, 3, 4, 5]


def test_get_timeout_returns_partial_batch_to_the_front():
    async def main():
        q = KeyedQueues()
        await q.put("k", "x")
        await q.put("k", "y")
        with pytest.raises(QueueTimeout):
            await q.get_batch("k", count=3, timeout=0.05)
        await q.put("k", "z")
        return await q.get_batch("k", count=3)

    assert run(main()) == ["x", "y", "z"]


def test_batch_by_weight_and_batch_larger_than_capacity():
    async def main():
        q = KeyedQueues(default_maxsize=2)

        async def produce():
            for i, w in enumerate([3, 1, 2, 5, 1]):
                await q.put("k", i, weight=w)

        task = asyncio.ensure_future(produce())
        heavy = await q.get_batch("k", target_weight=6)  # 3+1+2 reaches 6
        rest = await q.get_batch("k", count=2)  # count 2 == capacity, still completes
        await task
        return heavy, rest

    assert run(main()) == ([0, 1, 2], [3, 4])


def test_invalid_arguments_are_rejected():
    async def main():
        q = KeyedQueues()
        with pytest.raises(ValueError, match="exactly one"):
            await q.get_batch("k")
        with pytest.raises(ValueError, match="count must be an int >= 1"):
            await q.get_batch("k", count=0)
        for bad in (2.5, True):
            with pytest.raises(ValueError, match="count must be an int >= 1"):
                await q.get_batch("k", count=bad)
        for bad in ("x", float("nan"), -1, True, float("inf")):
            with pytest.raises(ValueError, match="weight must be a finite number >= 0"):
                await q.put("k", "item", weight=bad)
        with pytest.raises(ValueError, match="target_weight must be a finite number > 0"):
            await q.get_batch("k", target_weight=float("nan"))
        assert q.qsize("k") == 0  # nothing was admitted by the rejected puts
        with pytest.raises(ValueError, match="queue_size of 'k' must be >= 0"):
            q.declare("k", -1)

    run(main())
    with pytest.raises(ValueError):
        KeyedQueues(default_maxsize=-3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exactly_once_and_per_producer_fifo_under_concurrency(seed):
    """8 producers, 4 consumers, a small bounded queue, random interleavings."""
    rng = random.Random(seed)
    per_producer = 50

    async def main():
        q = KeyedQueues(default_maxsize=3)
        received: dict[int, list] = {c: [] for c in range(4)}

        async def producer(p):
            for i in range(per_producer):
                await q.put("k", (p, i))
                if rng.random() < 0.3:
                    await asyncio.sleep(0)

        async def consumer(c):
            while True:
                batch = await q.get_batch("k", count=rng.choice([1, 2, 3]), timeout=0.2) \
                    if rng.random() < 0.5 else [await q.get("k", timeout=0.2)]
                received[c].extend(batch)

        async def guarded(c):
            try:
                await consumer(c)
            except QueueTimeout:
                pass

        consumers = [asyncio.ensure_future(guarded(c)) for c in range(4)]
        await asyncio.gather(*(producer(p) for p in range(8)))
        await asyncio.gather(*consumers)
        return received, q.qsize("k")

    received, left = run(main())
    every = [item for items in received.values() for item in items]
    assert left == 0
    assert sorted(every) == [(p, i) for p in range(8) for i in range(per_producer)]
    for items in received.values():  # each consumer sees each producer's items in order
        for p in range(8):
            seq = [i for (pp, i) in items if pp == p]
            assert seq == sorted(seq)


def test_cancel_withdraws_a_pending_get_and_gives_its_items_back():
    async def main():
        q = KeyedQueues()
        await q.put("k", "a")
        waiting = asyncio.ensure_future(q.get_batch("k", count=2, request_id="r1"))
        await asyncio.sleep(0)
        assert q.cancel("r1") is True
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert q.cancel("r1") is False  # nothing pending any more
        await q.put("k", "b")
        return await q.get_batch("k", count=2), q.stats()["k"]

    got, stats = run(main())
    assert got == ["a", "b"] and stats["total_got"] == 2 and stats["total_put"] == 2


def test_cancel_withdraws_a_blocked_put():
    async def main():
        q = KeyedQueues(default_maxsize=1)
        await q.put("k", "kept")
        blocked = asyncio.ensure_future(q.put("k", "withdrawn", request_id="p1"))
        await asyncio.sleep(0)
        assert q.cancel("p1") is True
        with pytest.raises(asyncio.CancelledError):
            await blocked
        return await q.get("k"), q.qsize("k")

    assert run(main()) == ("kept", 0)


def test_requeue_front_restores_order_and_counts():
    async def main():
        q = KeyedQueues()
        for i in range(4):
            await q.put("k", i, weight=i + 1)
        taken = await q.get_batch("k", count=2, with_weights=True)
        q.requeue_front("k", taken)  # the reply never reached its caller
        return taken, await q.get_batch("k", count=4), q.stats()["k"]["total_got"]

    taken, again, total_got = run(main())
    assert taken == [(0, 1), (1, 2)] and again == [0, 1, 2, 3] and total_got == 4
