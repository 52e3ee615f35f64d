"""Confidence intervals for success rates (the evaluation's ``eval/success_rate_low`` / ``_high``)."""

from __future__ import annotations

import math

__all__ = ["Z_95", "wilson_interval"]

#: the two-sided 95 % quantile of the standard normal distribution
Z_95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a success rate: ``successes`` of ``n`` Bernoulli trials.

    With ``p = successes / n``::

        centre    = (p + z^2 / (2n)) / (1 + z^2 / n)
        half      = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / (4 n^2))
        interval  = [centre - half, centre + half]      (clipped to [0, 1] against rounding)

    Unlike ``p +- z sqrt(p (1 - p) / n)`` it stays inside [0, 1] and is not empty at ``p = 0`` or
    ``p = 1`` (e.g. 32 of 32 still leaves room below 1). ``n = 0`` gives ``(0, 1)``: nothing known.

    Args:
        successes: successful episodes, ``0 <= successes <= n``.
        n: episodes.
        z: the normal quantile of the confidence level (default 95 %).

    Example (8 of 10: centre 0.9921 / 1.3842 = 0.7167, half 0.3136 / 1.3842 = 0.2266):
        >>> lo, hi = wilson_interval(8, 10)
        >>> round(lo, 4), round(hi, 4)
        (0.4902, 0.9433)
        >>> wilson_interval(0, 0)
        (0.0, 1.0)
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)
