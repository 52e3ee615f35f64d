"""Spawned process groups with a deadline: start ``world`` ranks, wait for all of them at most
``timeout_s`` seconds, kill the ones still running. Used where a few gloo processes must run a
function side by side (the converter's logit check, multi-rank tests) without ever hanging.

Example:
    >>> from rlinf.utils.spawn import free_local_port
    >>> 0 < free_local_port() < 65536
    True
"""

from __future__ import annotations

import multiprocessing
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a local rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn_ranks(target: Callable[..., Any], args_per_rank: Sequence[tuple],
                timeout_s: float) -> tuple[list[multiprocessing.process.BaseProcess], list[int]]:
    """Run ``target(*args_per_rank[r])`` in one spawned daemon process per rank and wait for all
    of them until a shared deadline. Returns the (finished) processes and the ranks that were
    still running at the deadline; those were killed."""
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=target, args=args, daemon=True) for args in args_per_rank]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        proc.join(max(deadline - time.monotonic(), 0.1))
    hung = [rank for rank, proc in enumerate(procs) if proc.is_alive()]
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join()
    return procs, hung
