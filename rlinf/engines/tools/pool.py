"""Run tool calls of many episodes at once, with a concurrency limit, a time limit per call and
counts of what went wrong.

:class:`ToolPool` runs each call on a thread of its own pool (``max_concurrency`` threads); the
Python tool's thread only waits on its sandbox process, so calls overlap with generation. Every
failure becomes a :class:`~.base.ToolResult` the model reads, never an exception: an unknown tool
name, arguments that do not fit the schema, a tool that raises, returns something other than text
or runs past ``timeout_s`` (its thread is abandoned and the call answered as timed out; the Python
tool also kills its process). Outputs longer than ``max_output_chars`` are cut in the middle.

A tool with a ``latency`` (``tools.<name>.latency``, :mod:`~.latency`) waits its drawn seconds on
the call's thread before it runs, inside the call's time limit: a wait past ``timeout_s`` is
answered as timed out, as a slow service's would be (the thread stops waiting then). The call
index of the draw is counted when the call is submitted, so the draws do not depend on which
thread runs first. ``info["latency_s"]`` gives the wait, ``info["seconds"]`` includes it.

Example:
    >>> from rlinf.engines.tools.calculator import CalculatorTool
    >>> pool = ToolPool({"calculator": CalculatorTool()}, max_concurrency=2, timeout_s=5)
    >>> pool.submit("calculator", {"expression": "12*34"}, ToolSession()).result().text
    '408'
    >>> pool.submit("nope", {}, ToolSession()).result().status
    'error'
    >>> pool.counts["unknown_tool"], pool.counts["calls"]
    (1, 2)
    >>> pool.close()
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor

from rlinf.engines.tools.base import Tool, ToolResult, ToolSession, check_arguments

__all__ = ["ToolPool", "truncate_middle"]


def truncate_middle(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters by dropping its middle (head and tail kept,
    the number of characters left out said in between).

    >>> truncate_middle("a" * 10 + "b" * 10, 12)
    'aaaaaa\\n...[8 characters cut]...\\nbbbbbb'
    >>> truncate_middle("short", 12)
    'short'
    """
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n...[{cut} characters cut]...\n{text[len(text) - tail:]}"


class ToolPool:
    """Runs calls of the given tools (see the module docstring).

    Args:
        tools: tool objects by the name the model calls them with.
        max_concurrency: calls running at once (more wait in a queue).
        timeout_s: wall-clock limit of one call, queueing not counted.
        max_output_chars: longest text a call returns (cut in the middle); 0 = no cut.
    """

    def __init__(self, tools: dict[str, Tool], max_concurrency: int = 8, timeout_s: float = 30.0,
                 max_output_chars: int = 0):
        self.tools = dict(tools)
        self.timeout_s = float(timeout_s)
        self.max_output_chars = int(max_output_chars)
        self._executor = ThreadPoolExecutor(max_workers=max(1, max_concurrency), thread_name_prefix="rlinf-tool")
        self._lock = threading.Lock()
        self._waits: set[threading.Event] = set()  # latency waits under way (close wakes them)
        self._closed = False
        self.counts: Counter[str] = Counter()

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def submit(self, name: str, arguments, session: ToolSession) -> Future:
        """Start one call; the future gives a :class:`ToolResult` (never raises)."""
        self._count("calls")
        done: Future = Future()
        tool = self.tools.get(name)
        if tool is None:
            self._count("unknown_tool")
            known = ", ".join(sorted(self.tools)) or "none"
            done.set_result(ToolResult(f"Error: unknown tool {name!r}; available tools: {known}.", "error"))
            return done
        problem = check_arguments(tool.parameters, arguments)
        if problem is not None:
            self._count("bad_arguments")
            done.set_result(ToolResult(f"Error: {name}: {problem}.", "error"))
            return done
        index = session.next_call_index(name)
        inner = self._executor.submit(self._run, tool, arguments, session, done, index)
        inner.add_done_callback(lambda f: self._settle(done, f))
        return done

    def _start_clock(self, done: Future, name: str) -> threading.Timer:
        """Answer ``done`` as timed out ``timeout_s`` (+0.5 s, so a tool's own limit fires
        first) after the call starts running; its thread is left to finish on its own."""
        def expire():
            if not done.done():
                self._count("timeouts")
                self._set(done, ToolResult(f"Error: {name} did not finish within {self.timeout_s:g} s.", "timeout"))
        timer = threading.Timer(self.timeout_s + 0.5, expire)
        timer.daemon = True
        timer.start()
        return timer

    @staticmethod
    def _set(done: Future, result: ToolResult) -> None:
        try:
            done.set_result(result)
        except Exception:  # noqa: BLE001 - already settled by the other side of the race
            pass

    def _settle(self, done: Future, inner: Future) -> None:
        if done.done():
            return
        exc = inner.exception()
        if exc is not None:
            self._count("errors")
            self._set(done, ToolResult(f"Error: {type(exc).__name__}: {exc}", "error"))
            return
        self._set(done, inner.result())

    def _wait(self, done: Future, seconds: float) -> bool:
        """Sleep ``seconds`` unless ``done`` is settled first (the call timed out) or the pool
        closes; True when the whole wait passed."""
        woken = threading.Event()
        with self._lock:
            if self._closed:
                return False
            self._waits.add(woken)
        done.add_done_callback(lambda _f: woken.set())
        try:
            return not woken.wait(seconds)
        finally:
            with self._lock:
                self._waits.discard(woken)

    def _run(self, tool: Tool, arguments: dict, session: ToolSession, done: Future, index: int = 0) -> ToolResult:
        t0 = time.perf_counter()
        timer = self._start_clock(done, tool.name)
        delay = None
        try:
            if tool.latency is not None:
                delay = tool.latency.draw(tool.name, session.episode_id, index)
                if not self._wait(done, delay):  # timed out (already answered) or the pool closed
                    return ToolResult(f"Error: the tool pool closed before {tool.name} ran.", "error")
            out = tool.call(arguments, session)
        finally:
            timer.cancel()
        if isinstance(out, str):
            out = ToolResult(out)
        if not isinstance(out, ToolResult) or not isinstance(out.text, str):
            self._count("errors")
            return ToolResult(f"Error: {tool.name} returned {type(out).__name__}, not text.", "error")
        if out.status == "timeout":
            self._count("timeouts")
        elif out.status == "error":
            self._count("errors")
        out.text = truncate_middle(out.text, self.max_output_chars)
        if delay is not None:
            out.info["latency_s"] = delay
            if "seconds" in out.info:  # the tool's own figure (e.g. the sandbox's run) plus the wait
                out.info["seconds"] += delay
        out.info.setdefault("seconds", time.perf_counter() - t0)
        return out

    def close(self) -> None:
        """Stop taking calls and close every tool (running calls are not waited for; latency
        waits end at once)."""
        with self._lock:
            self._closed = True
            for woken in self._waits:
                woken.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
        for tool in self.tools.values():
            tool.close()
