"""How fast this (shared, virtual) machine is right now: a fixed single-thread torch workload,
timed, so that a long bench can show that the machine's speed drifted between its arms.

The workload is the kind of arithmetic the CPU learners and the simulation bench do: ``rounds``
products of a ``[128, 256]`` by ``[256, 256]`` float32 matrix, with a ReLU, in one thread. On the
2-core VM of this project a probe took 22-36 ms on 2026-11-29 evening (and 54 ms once), with the
VM's load average unchanged: a neighbour on the same host, which ``loadavg`` here does not see,
makes it slower. Runs that are compared should have probes within a few percent of each other.

Example:
    >>> ms = probe_ms(rounds=5, repeats=3)
    >>> ms > 0
    True
"""

from __future__ import annotations

import statistics
import time


def probe_ms(rounds: int = 200, repeats: int = 5) -> float:
    """The median over ``repeats`` of the milliseconds ``rounds`` matrix products take in one
    thread (the caller's thread count is restored)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        x, w = torch.randn(128, 256, generator=gen), torch.randn(256, 256, generator=gen) / 16
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            y = x
            for _ in range(rounds):
                y = torch.relu(y @ w)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    print(f"{probe_ms():.1f} ms")
