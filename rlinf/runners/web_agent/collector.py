"""Many episodes in flight with straggler control (seed 000's ``server_size``,
``completion_threshold``, ``completion_grace_period`` and ``task_timeout_minutes``).

:func:`collect` runs ``await run_one(item, stop)`` for every item, at most ``concurrency`` at
once, starting the next item as soon as one ends. ``run_one`` returns a dict (a trajectory);
``stop`` is an ``asyncio.Event`` it should watch: once set, it should return what it has.

- **Threshold and grace.** When ``ceil(completion_threshold * len(items))`` items have finished
  (returned, failed or timed out), the rest (running or not yet started; items keep starting
  meanwhile) get ``grace_period_s`` more seconds. Then every running item's ``stop`` is set and
  it has ``stop_wait_s`` to return a partial result, else it is cancelled; items never started
  are not started. All of these end with status ``straggler``. ``completion_threshold: 1.0``
  waits for every item.
- **Timeout.** An item running longer than ``task_timeout_s`` is stopped the same way, status
  ``timeout``.
- **Errors.** An exception of ``run_one`` (or a result that is not a dict) becomes a record with
  status ``error`` and the message; the other items go on. An exception of a ``fatal`` type (a
  dead policy worker: nothing after it could succeed) is raised instead, the running items
  cancelled and nothing more recorded, so a restarted batch redoes them.

A stopped item keeps the dict ``run_one`` returned on stop, its ``status`` overwritten with
``straggler`` / ``timeout``; without one, ``make_record(item, status, message)`` builds the
record (default: ``{"item", "status", "error"}``). A result returned normally gets
``status: done`` only when it has no status. Results come back in item order;
``on_finished(item, result)`` (sync or async) is called once per item as it ends, stragglers
included, so a store can save as the batch goes (an exception there stops the collection and is
raised).

>>> import asyncio
>>> async def run_one(n, stop):
...     await asyncio.sleep(0.01 * n)
...     return {"value": n * n}
>>> [r["value"] for r in asyncio.run(collect([1, 2, 3], run_one, concurrency=2))]
[1, 4, 9]
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

STRAGGLER, TIMEOUT, ERROR, DONE = "straggler", "timeout", "error", "done"

RunOne = Callable[[Any, asyncio.Event], Awaitable[dict]]


def default_record(item: Any, status: str, error: str | None) -> dict:
    """The record of an item that left no result of its own.

    >>> default_record("t1", "straggler", "cancelled")
    {'item': 't1', 'status': 'straggler', 'error': 'cancelled'}
    """
    return {"item": item, "status": status, "error": error}


def _check(concurrency: int, completion_threshold: float, grace_period_s: float,
           task_timeout_s: float | None, stop_wait_s: float) -> None:
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency (server_size): expected an integer >= 1, got {concurrency!r}")
    if not 0 < completion_threshold <= 1:
        raise ValueError(f"completion_threshold: expected a fraction in (0, 1], got {completion_threshold!r}")
    if grace_period_s < 0:
        raise ValueError(f"grace_period_s (completion_grace_period): expected >= 0, got {grace_period_s!r}")
    if task_timeout_s is not None and task_timeout_s <= 0:
        raise ValueError(f"task_timeout_s: expected > 0 or None, got {task_timeout_s!r}")
    if stop_wait_s < 0:
        raise ValueError(f"stop_wait_s: expected >= 0, got {stop_wait_s!r}")


def _outcome(item: Any, inner: asyncio.Future, status: str | None,
             make_record: Callable[[Any, str, str | None], dict], fatal: tuple = ()) -> dict:
    """The result of a finished ``run_one`` future; ``status`` set = it was stopped."""
    if inner.cancelled():
        return make_record(item, status or ERROR, "cancelled")
    exc = inner.exception()
    if fatal and isinstance(exc, fatal):
        raise exc
    if exc is not None:
        return make_record(item, status or ERROR, f"{type(exc).__name__}: {exc}")
    value = inner.result()
    if not isinstance(value, dict):
        return make_record(item, ERROR, f"run_one returned {type(value).__name__}, expected a dict")
    if status is not None:
        value["status"] = status
    else:
        value.setdefault("status", DONE)
    return value


async def collect(items: Sequence[Any], run_one: RunOne, *, concurrency: int, completion_threshold: float = 1.0,
                  grace_period_s: float = 30.0, task_timeout_s: float | None = None,
                  on_finished: Callable[[Any, dict], Any] | None = None,
                  make_record: Callable[[Any, str, str | None], dict] = default_record,
                  stop_wait_s: float = 2.0, fatal: tuple[type[BaseException], ...] = ()) -> list[dict]:
    """Run every item (module docstring); returns one dict per item, in item order; an
    exception of a ``fatal`` type from ``run_one`` is raised."""
    _check(concurrency, completion_threshold, grace_period_s, task_timeout_s, stop_wait_s)
    items = list(items)
    n = len(items)
    results: list[dict | None] = [None] * n
    stops = [asyncio.Event() for _ in items]
    reasons: list[str | None] = [None] * n
    need = max(1, math.ceil(completion_threshold * n - 1e-9))
    loop = asyncio.get_running_loop()

    async def run_item(i: int) -> dict:
        item, stop = items[i], stops[i]
        try:
            inner = asyncio.ensure_future(run_one(item, stop))
        except Exception as exc:  # noqa: BLE001 - run_one failed before giving a coroutine: one record
            return make_record(item, ERROR, f"{type(exc).__name__}: {exc}")
        waiter = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({inner, waiter}, timeout=task_timeout_s, return_when=asyncio.FIRST_COMPLETED)
            if inner.done():
                return _outcome(item, inner, None, make_record, fatal)
            status = reasons[i] = reasons[i] or TIMEOUT
            stop.set()
            await asyncio.wait({inner}, timeout=stop_wait_s)
            if inner.done():
                return _outcome(item, inner, status, make_record, fatal)
            inner.cancel()
            await asyncio.wait({inner}, timeout=stop_wait_s)
            return make_record(item, status, f"{status}: no result within {stop_wait_s:g} s of the stop; cancelled")
        finally:
            waiter.cancel()
            if not inner.done():
                inner.cancel()

    finished = 0

    async def finish(i: int, task: asyncio.Task) -> None:
        nonlocal finished
        try:
            value = task.result()
        except fatal:
            raise
        except Exception as exc:  # noqa: BLE001 - a fault of the wrapper itself; never lose the item
            value = make_record(items[i], ERROR, f"collector: {type(exc).__name__}: {exc}")
        results[i] = value
        finished += 1
        if on_finished is not None:
            called = on_finished(items[i], value)
            if inspect.isawaitable(called):
                await called

    pending = deque(range(n))
    running: dict[asyncio.Task, int] = {}
    deadline: float | None = None
    try:
        while pending or running:
            while pending and len(running) < concurrency:
                i = pending.popleft()
                running[asyncio.create_task(run_item(i))] = i
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait(running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=running.__getitem__):
                await finish(running.pop(task), task)
            if deadline is None and finished >= need:
                deadline = loop.time() + grace_period_s
            if deadline is not None and loop.time() >= deadline:
                break
        for i in running.values():
            reasons[i] = STRAGGLER
            stops[i].set()
        if running:
            await asyncio.wait(running)
        for task, i in sorted(running.items(), key=lambda pair: pair[1]):
            await finish(i, task)
        running.clear()
        for i in pending:
            results[i] = make_record(items[i], STRAGGLER, "not started: stopped by the completion grace period")
            if on_finished is not None:
                called = on_finished(items[i], results[i])
                if inspect.isawaitable(called):
                    await called
    finally:
        for task in running:
            task.cancel()
    return results  # type: ignore[return-value]
