"""Body of one math-verify child process of :class:`~rlinf.rewards.MathVerifier`.

The pool runs this file with ``runpy.run_path`` (``run_name=CHILD_RUN_NAME``) rather than
importing it, so a child imports math-verify and the standard library only: never ``rlinf``
(whose ``rlinf.algorithms`` package, used by the math reward, pulls in torch).

Protocol over a duplex ``multiprocessing`` pipe:

* child -> parent, once: ``("ready", pid)`` after importing math-verify, or
  ``("error", text)`` when that import fails (the parent then raises).
* parent -> child: ``(batch_id, job, gold, answer)`` with both strings already wrapped in
  ``$...$``; child -> parent: ``(batch_id, job, ok)``. ``None`` asks the child to exit.

The child runs math-verify on its own main thread but with math-verify's ``signal.alarm``
timeouts switched off (``parsing_timeout=None``, ``timeout_seconds=None``): the parent owns
the time budget and kills a child that overruns it. Every exception (``RecursionError``,
``MemoryError`` included) scores the pair as incorrect.
"""

from __future__ import annotations

import logging
import os
import signal

GOLD_CACHE_SIZE = 4096
CHILD_RUN_NAME = "__rlinf_math_verify_child__"


def check_pair(gold: str, answer: str, gold_cache: dict) -> bool:
    """Parse both sides with math-verify and compare; no timeout of its own.

    Args:
        gold: Reference answer, LaTeX wrapped in ``$...$``.
        answer: Candidate answer, LaTeX wrapped in ``$...$``.
        gold_cache: Parsed golds by string (the same gold repeats across a sampling group).

    Returns:
        ``True`` when math-verify finds the answer equal to the gold.

    Example:
        >>> check_pair("$1/2$", "$0.5$", {}), check_pair("$3$", "$x = 3$", {})
        (True, True)
    """
    # lazy: the child imports math-verify in worker_main's try, so a failed import reaches the parent
    from math_verify import parse, verify

    parsed_gold = gold_cache.get(gold)
    if parsed_gold is None:
        if len(gold_cache) >= GOLD_CACHE_SIZE:
            gold_cache.clear()
        parsed_gold = gold_cache[gold] = parse(gold, parsing_timeout=None)
    if not parsed_gold:
        return False
    parsed_answer = parse(answer, parsing_timeout=None)
    if not parsed_answer:
        return False
    return bool(verify(parsed_gold, parsed_answer, timeout_seconds=None))


def _limit_address_space(headroom_mb: int | None) -> None:
    """Cap this process's virtual memory at its current size plus ``headroom_mb`` (Linux)."""
    if not headroom_mb:
        return
    try:
        # lazy: resource is Unix-only; without it the cap is skipped
        import resource

        with open("/proc/self/status") as status:
            size_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
        limit = size_kb * 1024 + int(headroom_mb) * 2**20
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError, StopIteration, ImportError):
        pass  # no /proc or no RLIMIT_AS: run without the cap


def worker_main(conn, memory_headroom_mb: int | None) -> None:
    """Serve verification requests on ``conn`` until ``None`` arrives or the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        # lazy: the child imports math-verify in worker_main's try, so a failed import reaches the parent
        import math_verify  # noqa: F401

        # math-verify warns once per process that its own timeouts are off; that is intended.
        logging.getLogger("math_verify").setLevel(logging.ERROR)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    _limit_address_space(memory_headroom_mb)
    conn.send(("ready", os.getpid()))
    gold_cache: dict = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        batch_id, job, gold, answer = message
        try:
            ok = check_pair(gold, answer, gold_cache)
        except BaseException:  # noqa: BLE001 - hostile input must never kill the protocol
            ok = False
        conn.send((batch_id, job, ok))


if __name__ == CHILD_RUN_NAME:  # run by the pool: the two names come from init_globals
    worker_main(child_conn, memory_headroom_mb)  # noqa: F821
