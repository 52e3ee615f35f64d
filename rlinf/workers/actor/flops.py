"""``actor.calculate_flops``: model FLOPs of an update, by the usual dense-transformer estimate.

A training token costs about 6 x N FLOPs (forward 2N, backward 4N) for a model of N parameters
(attention's sequence-length term is left out, as in the common MFU reports).

Example:
    >>> update_flops(num_params=1_000_000, tokens=500, passes=2)
    6000000000.0
"""

from __future__ import annotations


def update_flops(num_params: int, tokens: int, passes: int = 1) -> float:
    """``6 x num_params x tokens x passes``: FLOPs of training on ``tokens`` tokens ``passes`` times."""
    return 6.0 * num_params * tokens * passes


def flops_metrics(num_params: int, tokens: int, seconds: float) -> dict[str, float]:
    """``actor/tflops`` (this process's update) and ``actor/tflops_per_s``.

    >>> flops_metrics(10**9, 1000, 2.0)
    {'actor/tflops': 6.0, 'actor/tflops_per_s': 3.0}
    """
    tflops = update_flops(num_params, tokens) / 1e12
    return {"actor/tflops": tflops, "actor/tflops_per_s": tflops / max(seconds, 1e-9)}
