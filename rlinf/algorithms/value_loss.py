"""Clipped value loss for the PPO critic."""

from __future__ import annotations

import torch

from rlinf.algorithms.loss_agg import aggregate_loss
from rlinf.algorithms.utils import check_mask, check_nonnegative, check_same_shape, masked_mean


def compute_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    value_clip_eps: float | None = 0.2,
    loss_agg_func: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO critic loss with value clipping.

    V_clip = V_old + clip(V - V_old, -eps, eps);
    l_t = 0.5 * max((V_t - R_t)^2, (V_clip_t - R_t)^2), or 0.5 * (V_t - R_t)^2 when
    ``value_clip_eps`` is None; loss = aggregate_loss(l, mask, loss_agg_func).

    Args:
        values: ``[batch, seq]`` current critic values (with grad).
        old_values: ``[batch, seq]`` values at rollout time.
        returns: ``[batch, seq]`` targets R (e.g. from GAE).
        response_mask: ``[batch, seq]`` mask of response tokens.
        value_clip_eps: Clip range >= 0, or None for no clipping.
        loss_agg_func: See :func:`rlinf.algorithms.loss_agg.aggregate_loss`.

    Returns:
        ``(loss, metrics)`` with ``vf_clip_frac`` (share of valid tokens where the clipped term
        is strictly larger) and ``value_mean``.

    >>> loss, m = compute_value_loss(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[2.0]]),
    ...     torch.ones(1, 1))
    >>> loss  # V_clip = 0.2: 0.5 * max(1, 3.24)
    tensor(1.6200)
    """
    check_mask(response_mask)
    check_same_shape(response_mask, "response_mask", values=values, old_values=old_values, returns=returns)
    check_nonnegative("value_clip_eps", value_clip_eps, allow_none=True)
    returns = returns.detach()
    unclipped = (values - returns).square()
    if value_clip_eps is None:
        token_loss = 0.5 * unclipped
        clipped = torch.zeros_like(unclipped, dtype=torch.bool)
    else:
        old = old_values.detach()
        v_clip = old + (values - old).clamp(-value_clip_eps, value_clip_eps)
        clipped_sq = (v_clip - returns).square()
        token_loss = 0.5 * torch.maximum(unclipped, clipped_sq)
        clipped = clipped_sq > unclipped
    loss = aggregate_loss(token_loss, response_mask, loss_agg_func)
    metrics = {
        "vf_clip_frac": masked_mean(clipped.float(), response_mask),
        "value_mean": masked_mean(values.detach(), response_mask),
    }
    return loss, metrics
