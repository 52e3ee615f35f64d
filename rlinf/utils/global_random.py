"""One lock for the process-wide random generators (torch's CPU generator, NumPy's and Python's
global ones) when several workers share a process (the local backend runs each group on threads).

Simulators seed and draw from those generators while they reset: ManiSkill's
``reset(seed=s)`` does ``torch.manual_seed(s)`` inside ``torch.random.fork_rng()`` and then
draws the episode's initial state with ``torch.rand``. The local executor swaps each worker's
own generator states in and out at its call boundaries. If a swap lands between that seed and
that draw, the episode starts elsewhere (measured: PushCube episode 1004 returned 0.711 instead
of 0.830 under a two-stage evaluation, once in a few suites). Both sides hold
:data:`GLOBAL_RANDOM_LOCK`: the executor while it swaps, the in-process simulators while they
reset or step, so a seeded reset sees no swap. A worker that draws from the global generators
(rather than its own ``torch.Generator``) at the same moment as an in-process simulator resets
is not covered; the rollout and evaluation paths draw from their own generators.

Example:
    >>> import torch
    >>> with GLOBAL_RANDOM_LOCK:
    ...     with torch.random.fork_rng():
    ...         _ = torch.manual_seed(3)
    ...         first = torch.rand(1)
    >>> with GLOBAL_RANDOM_LOCK, torch.random.fork_rng():
    ...     _ = torch.manual_seed(3)
    ...     bool(torch.rand(1) == first)
    True
"""

from __future__ import annotations

import threading

__all__ = ["GLOBAL_RANDOM_LOCK"]

#: held while a thread seeds-and-draws from, or swaps, the process-wide generators (re-entrant)
GLOBAL_RANDOM_LOCK = threading.RLock()
