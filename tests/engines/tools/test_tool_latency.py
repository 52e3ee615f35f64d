"""``tools.<name>.latency``: the lognormal's median and 95th percentile, seeded draws that do not
depend on thread scheduling, the pool really waiting (inside the call's time limit) for every
tool, and bad values refused with one line naming the key."""

from __future__ import annotations

import importlib.util
import random
import threading
import time
from pathlib import Path

import pytest

from rlinf.engines.tools.base import Tool, ToolResult, ToolSession, make_tool
from rlinf.engines.tools.latency import ToolLatency, parse_latency
from rlinf.engines.tools.pool import ToolPool
from rlinf.utils.typed_config import ConfigError

CORPUS = Path(__file__).resolve().parents[3] / "examples" / "tool_agent" / "data" / "corpus.jsonl"
HEAVY = {"distribution": "lognormal", "median_s": 0.3, "p95_s": 3.0, "seed": 0}


class Recorder(Tool):
    """Answers at once and records the order it was called in."""

    name = "rec"
    parameters = {"type": "object", "properties": {"x": {"type": "integer"}}}

    def __init__(self, options=None):
        super().__init__(options)
        self.seen: list[int] = []
        self._lock = threading.Lock()

    def call(self, arguments, session):
        with self._lock:
            self.seen.append(arguments.get("x", -1))
        return ToolResult("ok")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def test_lognormal_draws_have_the_asked_median_and_95th_percentile():
    lat = parse_latency(HEAVY, "tools.calculator.latency")
    draws = [lat.draw("calculator", f"{s}.{k}", i) for s in range(500) for k in range(8) for i in range(5)]
    assert len(draws) == 20000
    median, p95 = _quantile(draws, 0.5), _quantile(draws, 0.95)
    assert abs(median / 0.3 - 1) < 0.03, median
    assert abs(p95 / 3.0 - 1) < 0.05, p95
    assert min(draws) > 0
    # the parameters are the docstring's formula
    assert lat.mu == pytest.approx(-1.2039728) and lat.sigma == pytest.approx(2.3025851 / 1.6448536)


def test_same_seed_same_draws_in_any_order_and_a_new_seed_draws_anew():
    lat = parse_latency(HEAVY, "x")
    keys = [(tool, f"{s}.{k}", i) for tool in ("calculator", "search") for s in range(10) for k in range(4)
            for i in range(3)]
    first = {key: lat.draw(*key) for key in keys}
    shuffled = list(keys)
    random.Random(1).shuffle(shuffled)
    again = parse_latency(dict(HEAVY), "x")
    assert {key: again.draw(*key) for key in shuffled} == first
    other = parse_latency({**HEAVY, "seed": 1}, "x")
    assert sum(other.draw(*key) != first[key] for key in keys) == len(keys)
    assert len(set(first.values())) == len(keys)  # tool, session and index each change the draw
    assert parse_latency({"distribution": "fixed", "median_s": 0.02}, "x").draw("a", "b", 7) == 0.02


def test_the_pool_waits_the_fixed_latency_before_the_call():
    tool = Recorder()
    tool.latency = ToolLatency(distribution="fixed", median_s=0.05)
    pool = ToolPool({"rec": tool}, max_concurrency=2, timeout_s=5)
    try:
        t0 = time.perf_counter()
        result = pool.submit("rec", {"x": 1}, ToolSession("ep")).result(timeout=5)
        took = time.perf_counter() - t0
    finally:
        pool.close()
    assert result.status == "ok" and took >= 0.05
    assert result.info["latency_s"] == 0.05 and result.info["seconds"] >= 0.05


def test_pool_draws_are_keyed_by_session_and_submission_order_not_by_threads():
    """Calls of 6 sessions over 4 threads: each call waits the draw of (its session id, its index
    among that session's calls of the tool), whichever thread runs it when."""
    lat = ToolLatency(median_s=0.002, p95_s=0.02, seed=3)

    def run_once() -> dict[tuple[str, int], float]:
        tool = Recorder()
        tool.latency = lat
        pool = ToolPool({"rec": tool}, max_concurrency=4, timeout_s=5)
        sessions = [ToolSession(f"s{j}") for j in range(6)]
        try:
            futures = [((s.episode_id, i), pool.submit("rec", {"x": i}, s)) for i in range(3) for s in sessions]
            waits = {key: f.result(timeout=5).info["latency_s"] for key, f in futures}
        finally:
            pool.close()
        assert sessions[0].calls == {"rec": 3}
        return waits

    first = run_once()
    assert first == {(sid, i): lat.draw("rec", sid, i) for sid, i in first}
    assert run_once() == first


def test_a_wait_past_the_time_limit_is_a_timeout_and_the_tool_never_runs():
    tool = Recorder()
    tool.latency = ToolLatency(distribution="fixed", median_s=30.0)
    pool = ToolPool({"rec": tool}, max_concurrency=1, timeout_s=0.1)
    try:
        t0 = time.perf_counter()
        result = pool.submit("rec", {"x": 1}, ToolSession()).result(timeout=5)
        took = time.perf_counter() - t0
        # the thread stopped waiting: the next call (no latency left to wait out) gets the thread
        tool.latency = None
        assert pool.submit("rec", {"x": 2}, ToolSession()).result(timeout=5).text == "ok"
    finally:
        pool.close()
    assert result.status == "timeout" and took < 2.0
    assert pool.counts["timeouts"] == 1 and tool.seen == [2]


def _built_in(name: str) -> dict:
    if name == "search":
        if importlib.util.find_spec("bm25s") is None:
            pytest.skip("bm25s (the agent extra) is not installed")
        return {"corpus_path": str(CORPUS)}
    if name == "python":
        return {"isolation": "none", "timeout_s": 5}
    return {}


@pytest.mark.parametrize("name, arguments", [
    ("calculator", {"expression": "6*7"}),
    ("python", {"code": "print(6*7)"}),
    ("search", {"query": "Velmora"}),
])
def test_every_built_in_tool_takes_the_key_and_waits(name, arguments):
    tool = make_tool(name, {**_built_in(name), "latency": {"distribution": "fixed", "median_s": 0.05}})
    assert tool.latency == ToolLatency(distribution="fixed", median_s=0.05)
    tool.start()
    pool = ToolPool({name: tool}, max_concurrency=1, timeout_s=10)
    try:
        t0 = time.perf_counter()
        result = pool.submit(name, arguments, ToolSession()).result(timeout=20)
        took = time.perf_counter() - t0
    finally:
        pool.close()
    assert result.status == "ok", result.text
    assert took >= 0.05 and result.info["latency_s"] == 0.05 and result.info["seconds"] >= 0.05
    assert make_tool(name, {**_built_in(name), "latency": None}).latency is None


def test_a_users_tool_by_class_path_takes_it_too():
    tool = make_tool("mine", {"class_path": f"{__name__}:Recorder", "latency": HEAVY})
    assert tool.latency.p95_s == 3.0 and tool.name == "mine"


@pytest.mark.parametrize("latency, key", [
    ({"median_s": 0, "p95_s": 3.0}, "tools.calculator.latency.median_s: must be a finite number > 0"),
    ({"median_s": -0.3, "p95_s": 3.0}, "tools.calculator.latency.median_s: must be a finite number > 0"),
    ({"median_s": 0.3, "p95_s": 0.2}, "tools.calculator.latency.p95_s: must be >= median_s (0.3), got 0.2"),
    ({"median_s": 0.3}, "tools.calculator.latency.p95_s: missing (required by distribution lognormal)"),
    ({"distribution": "fixed", "median_s": 0.3, "p95_s": 3.0}, "tools.calculator.latency.p95_s: has no effect"),
    ({"distribution": "gamma", "median_s": 0.3}, "tools.calculator.latency.distribution: 'gamma' is not allowed"),
    ({"p95_s": 3.0}, "tools.calculator.latency.median_s: missing (required)"),
    ({**HEAVY, "mean_s": 1}, "tools.calculator.latency.mean_s: unknown key"),
    ({**HEAVY, "seed": 0.5}, "tools.calculator.latency.seed: expected an int"),
    (0.3, "tools.calculator.latency: expected a mapping"),
])
def test_bad_latency_is_one_line_naming_the_key(latency, key):
    with pytest.raises(ConfigError) as err:
        make_tool("calculator", {"latency": latency})
    assert str(err.value).startswith(key), str(err.value)
    assert "\n" not in str(err.value)
