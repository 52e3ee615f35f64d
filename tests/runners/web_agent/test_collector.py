"""The collector runs real asyncio tasks that sleep controlled amounts: concurrency cap,
completion threshold + grace (stragglers stopped, partial results kept, or cancelled), items never
started after the cut-off, per-item timeouts, errors that do not kill the others, item order and
the on_finished callback."""

from __future__ import annotations

import asyncio
import time

import pytest

from rlinf.runners.web_agent.collector import collect

SLOW = {3, 7, 11, 15, 19}


def _runner(slow=frozenset(), cooperative=True, fast_s=0.02, slow_s=10.0, started=None, peak=None):
    """run_one: fast items sleep fast_s; slow ones sleep slow_s, returning a partial result on stop
    (cooperative) or ignoring stop."""
    state = {"now": 0}

    async def run_one(item, stop):
        if started is not None:
            started.append(item)
        state["now"] += 1
        if peak is not None:
            peak[0] = max(peak[0], state["now"])
        try:
            if item not in slow:
                await asyncio.sleep(fast_s)
                return {"item": item, "steps": [1, 2]}
            if not cooperative:
                await asyncio.sleep(slow_s)
                return {"item": item, "steps": "all"}
            try:
                await asyncio.wait_for(stop.wait(), slow_s)
            except TimeoutError:
                return {"item": item, "steps": "all"}
            return {"item": item, "steps": [1], "status": "straggler-by-episode"}
        finally:
            state["now"] -= 1

    return run_one


def _collect(items, run_one, **kw):
    ended = {}

    def on_finished(item, result):
        ended[item] = (time.monotonic(), result["status"])

    start = time.monotonic()
    results = asyncio.run(collect(items, run_one, on_finished=on_finished, **kw))
    return results, ended, start, time.monotonic()


@pytest.mark.parametrize("cooperative", [True, False])
def test_threshold_then_grace_stops_stragglers(cooperative):
    peak = [0]
    results, ended, _, end = _collect(list(range(20)), _runner(SLOW, cooperative, peak=peak), concurrency=8,
                                      completion_threshold=0.75, grace_period_s=0.3, stop_wait_s=0.2)
    fifteenth = sorted(t for item, (t, _) in ended.items() if item not in SLOW)[14]
    assert 0.3 <= end - fifteenth <= 1.0   # grace 0.3 (+ stop_wait 0.2 when not cooperative)
    assert [r["item"] for r in results] == list(range(20))   # item order
    assert [i for i, r in enumerate(results) if r["status"] == "straggler"] == sorted(SLOW)
    assert all(r["status"] == "done" and r["steps"] == [1, 2] for i, r in enumerate(results) if i not in SLOW)
    if cooperative:   # the partial result returned on stop is kept, its status overwritten
        assert all(results[i]["steps"] == [1] for i in SLOW)
    else:             # cancelled: a record built by the factory
        assert all(results[i]["error"] == "straggler: no result within 0.2 s of the stop; cancelled" for i in SLOW)
    assert sorted(ended) == list(range(20)) and peak[0] <= 8


def test_concurrency_cap_is_respected_and_reached():
    peak = [0]
    results, _, start, end = _collect(list(range(10)), _runner(peak=peak, fast_s=0.05), concurrency=3)
    assert peak[0] == 3 and all(r["status"] == "done" for r in results)
    assert end - start >= 0.05 * 4 - 0.01   # ceil(10 / 3) = 4 waves


def test_threshold_one_waits_for_every_item():
    async def run_one(item, stop):
        await asyncio.sleep(item)
        return {"item": item, "stopped": stop.is_set()}

    results, _, start, end = _collect([0.0, 0.05, 0.4], run_one, concurrency=3, completion_threshold=1.0,
                                      grace_period_s=0.0)
    assert [r["status"] for r in results] == ["done"] * 3 and not any(r["stopped"] for r in results)
    assert end - start >= 0.4


def test_items_not_started_before_the_cut_off_are_stragglers():
    started = []
    slow = frozenset(range(2, 10))
    results, ended, _, _ = _collect(list(range(10)), _runner(slow, started=started), concurrency=2,
                                    completion_threshold=0.2, grace_period_s=0.1)
    assert sorted(started) == [0, 1, 2, 3]
    assert [r["status"] for r in results] == ["done"] * 2 + ["straggler"] * 8
    assert [results[i]["steps"] for i in (2, 3)] == [[1], [1]]
    assert all(results[i] == {"item": i, "status": "straggler",
                              "error": "not started: stopped by the completion grace period"} for i in range(4, 10))
    assert sorted(ended) == list(range(10))


def test_task_timeout_stops_one_item():
    def record(item, status, error):
        return {"task": item, "status": status, "error": error, "steps": []}

    run_one = _runner(slow=frozenset({1}), cooperative=True, slow_s=5.0)
    results, _, start, end = _collect([0, 1, 3], run_one, concurrency=3, task_timeout_s=0.2)
    assert [r["status"] for r in results] == ["done", "timeout", "done"] and results[1]["steps"] == [1]
    stubborn = _runner(slow=frozenset({1}), cooperative=False, slow_s=5.0)
    results, _, start, end = _collect([0, 1], stubborn, concurrency=2, task_timeout_s=0.2, stop_wait_s=0.1,
                                      make_record=record)
    assert results[1] == {"task": 1, "status": "timeout", "steps": [],
                          "error": "timeout: no result within 0.1 s of the stop; cancelled"}
    assert end - start < 1.5


def test_errors_become_records_and_the_others_finish():
    async def run_one(item, stop):
        await asyncio.sleep(0.01)
        if item == "bad":
            raise ValueError("page exploded")
        if item == "odd":
            return ["not", "a", "dict"]
        return {"item": item, "status": "answered"}

    results, ended, _, _ = _collect(["a", "bad", "odd", "b"], run_one, concurrency=2)
    assert results[0] == {"item": "a", "status": "answered"} and results[3]["status"] == "answered"
    assert results[1] == {"item": "bad", "status": "error", "error": "ValueError: page exploded"}
    assert results[2]["status"] == "error" and results[2]["error"] == "run_one returned list, expected a dict"
    assert ended["bad"][1] == "error"


def test_async_on_finished_and_a_failing_callback():
    seen = []

    async def saver(item, result):
        await asyncio.sleep(0)
        seen.append(item)

    asyncio.run(collect([1, 2, 3], _runner(), concurrency=1, on_finished=saver))
    assert seen == [1, 2, 3]

    def broken(item, result):
        raise OSError("disk full")

    start = time.monotonic()
    with pytest.raises(OSError, match="disk full"):
        asyncio.run(collect([0, 1, 2], _runner(slow=frozenset({1, 2})), concurrency=3, on_finished=broken))
    assert time.monotonic() - start < 2.0


def test_bad_settings_name_the_key():
    run_one = _runner()
    for kw, msg in [({"concurrency": 0}, "concurrency (server_size): expected an integer >= 1"),
                    ({"concurrency": 2, "completion_threshold": 1.5}, "completion_threshold: expected a fraction"),
                    ({"concurrency": 2, "grace_period_s": -1}, "grace_period_s"),
                    ({"concurrency": 2, "task_timeout_s": 0}, "task_timeout_s: expected > 0")]:
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            asyncio.run(collect([1], run_one, **kw))
    assert asyncio.run(collect([], run_one, concurrency=1)) == []
