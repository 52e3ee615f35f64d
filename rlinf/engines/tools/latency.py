"""Simulated latency of tool calls: the ``tools.<name>.latency`` key every tool takes.

A real tool (a web search, a remote sandbox) answers after a wait with a long tail; the tools
shipped here answer in milliseconds. ``latency`` makes any tool wait first:
:class:`~.pool.ToolPool` sleeps a drawn number of seconds before it calls the tool, inside the
call's time limit (``agentloop.tool_timeout_s``), as a slow service would.

.. code-block:: yaml

    tools:
      calculator:
        latency: {distribution: lognormal, median_s: 0.3, p95_s: 3.0, seed: 0}

``lognormal``: ``exp(mu + sigma * z)``, z standard normal, with

    mu    = ln(median_s)
    sigma = (ln(p95_s) - ln(median_s)) / 1.6449      (1.6449 = the normal's 95th percentile)

so half the calls wait less than ``median_s`` and 95 % less than ``p95_s``. ``fixed``: every call
waits ``median_s`` (for tests). A draw depends only on ``(seed, tool name, session id, call index)``
(the index counts the session's calls of that tool in the order they were submitted), through a
hash, not a shared random state: a rerun draws the same waits whatever the thread scheduling.

Example:
    >>> lat = parse_latency({"median_s": 0.3, "p95_s": 3.0}, "tools.calculator.latency")
    >>> round(lat.mu, 4), round(lat.sigma, 4)
    (-1.204, 1.3999)
    >>> lat.draw("calculator", "ep-7", 0) == lat.draw("calculator", "ep-7", 0)
    True
    >>> lat.draw("calculator", "ep-7", 0) != lat.draw("calculator", "ep-7", 1)
    True
    >>> parse_latency({"distribution": "fixed", "median_s": 0.05}, "x").draw("calculator", "ep-7", 3)
    0.05
    >>> parse_latency({"median_s": 0.3, "p95_s": 0.1}, "tools.search.latency")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: tools.search.latency.p95_s: must be >= median_s (0.3), got 0.1
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

from rlinf.utils.typed_config import check, parse_section

__all__ = ["ToolLatency", "parse_latency", "Z95"]

#: the standard normal's 95th percentile (1.6449)
Z95 = NormalDist().inv_cdf(0.95)
_NORMAL = NormalDist()


@dataclass(frozen=True, kw_only=True)
class ToolLatency:
    """``tools.<name>.latency``: a wait before each call of the tool (null: none).

    Attributes:
        distribution: ``lognormal`` (median ``median_s``, 95th percentile ``p95_s``) or
            ``fixed`` (always ``median_s``).
        median_s: median wait in seconds (> 0).
        p95_s: 95th percentile in seconds (>= ``median_s``); required by ``lognormal``, refused
            by ``fixed``.
        seed: seed of the draws (with the tool name, session id and call index).
    """

    distribution: Literal["lognormal", "fixed"] = "lognormal"
    median_s: float
    p95_s: float | None = None
    seed: int = 0

    def validate(self, path: str) -> None:
        check(math.isfinite(self.median_s) and self.median_s > 0, f"{path}.median_s",
              f"must be a finite number > 0, got {self.median_s:g}")
        if self.distribution == "fixed":
            check(self.p95_s is None, f"{path}.p95_s",
                  "has no effect with distribution fixed (every call waits median_s); remove it")
            return
        check(self.p95_s is not None, f"{path}.p95_s", "missing (required by distribution lognormal)")
        check(math.isfinite(self.p95_s) and self.p95_s >= self.median_s, f"{path}.p95_s",
              f"must be >= median_s ({self.median_s:g}), got {self.p95_s:g}")

    @property
    def mu(self) -> float:
        """ln(median_s)."""
        return math.log(self.median_s)

    @property
    def sigma(self) -> float:
        """(ln(p95_s) - ln(median_s)) / 1.6449; 0 for ``fixed``."""
        if self.distribution == "fixed":
            return 0.0
        return (math.log(self.p95_s) - math.log(self.median_s)) / Z95

    def uniform(self, tool: str, session_id: str, call_index: int) -> float:
        """A number in (0, 1), a hash of (seed, tool, session id, call index)."""
        key = f"{self.seed}\x1f{tool}\x1f{session_id}\x1f{int(call_index)}".encode()
        bits = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
        return (bits + 0.5) / 2.0**64

    def draw(self, tool: str, session_id: str, call_index: int) -> float:
        """Seconds call ``call_index`` of tool ``tool`` in session ``session_id`` waits."""
        if self.distribution == "fixed":
            return self.median_s
        z = _NORMAL.inv_cdf(self.uniform(tool, session_id, call_index))
        return math.exp(self.mu + self.sigma * z)


def parse_latency(raw: Any, path: str) -> ToolLatency | None:
    """``tools.<name>.latency`` from YAML (null: None); a bad value is a
    :class:`~rlinf.utils.typed_config.ConfigError` naming the key under ``path``."""
    if raw is None:
        return None
    return parse_section(ToolLatency, raw, path)
