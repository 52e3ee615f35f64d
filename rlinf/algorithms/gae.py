"""Generalised advantage estimation (GAE) for PPO with a critic: :func:`compute_gae_advantages`
over token rewards, and :func:`gae_estimator`, the ``adv_type: gae`` of math runs."""

from __future__ import annotations

import torch

from rlinf.algorithms.advantages import rewards_to_last_token
from rlinf.algorithms.registry import AdvantageInputs, AdvantageOutputs, register_advantage
from rlinf.algorithms.utils import (
    check_mask,
    check_nonnegative,
    check_same_shape,
    check_unit_interval,
    float_mask,
    masked_whiten,
)


def compute_gae_advantages(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    normalize_advantages: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the valid tokens of each row.

    For valid t, with n = next(t) the next valid position after t:
    delta_t = r_t + gamma * V_n - V_t and A_t = delta_t + gamma * lam * A_n,
    where V_n = A_n = 0 when t is the last valid token (the response ends there).
    Masked positions are skipped: their reward and value are ignored, they cost no discount
    step, and A = returns = 0 there. Padding at the end and masked spans in the middle
    (e.g. tool output between turns) follow the same rule.

    returns_t = A_t + V_t (before whitening). If ``normalize_advantages``, A is whitened over
    all valid tokens of the batch: (A - mean) / (std + eps), unbiased std.

    Args:
        token_rewards: ``[batch, seq]`` per-token rewards (outcome reward at the last token,
            minus any KL penalty).
        values: ``[batch, seq]`` critic values V_t.
        response_mask: ``[batch, seq]`` mask of response tokens.
        gamma: Discount in [0, 1].
        lam: GAE lambda in [0, 1].
        normalize_advantages: Whiten the advantages over the batch.
        eps: Added to the std, >= 0.

    Returns:
        ``(advantages, returns)``, both ``[batch, seq]``, detached.

    >>> adv, ret = compute_gae_advantages(
    ...     torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.5]]), torch.ones(1, 2),
    ...     normalize_advantages=False)
    >>> adv  # A_1 = 1 - 0.5 = 0.5; A_0 = (0 + 0.5 - 0.5) + 0.5 = 0.5
    tensor([[0.5000, 0.5000]])
    >>> ret
    tensor([[1., 1.]])
    """
    check_mask(response_mask)
    check_same_shape(response_mask, "response_mask", token_rewards=token_rewards, values=values)
    check_unit_interval("gamma", gamma)
    check_unit_interval("lam", lam)
    check_nonnegative("eps", eps)
    r = token_rewards.detach()
    r = r if r.is_floating_point() else r.float()
    v = values.detach().to(r.dtype)
    m = float_mask(response_mask, r)

    next_value = torch.zeros_like(r[:, 0])
    next_adv = torch.zeros_like(r[:, 0])
    columns = []
    for t in reversed(range(r.shape[1])):
        valid = m[:, t] > 0
        delta = r[:, t] + gamma * next_value - v[:, t]
        adv_t = delta + gamma * lam * next_adv
        columns.append(torch.where(valid, adv_t, torch.zeros_like(adv_t)))
        next_value = torch.where(valid, v[:, t], next_value)
        next_adv = torch.where(valid, adv_t, next_adv)
    advantages = torch.stack(columns[::-1], dim=1)
    returns = (advantages + v) * m
    if normalize_advantages:
        advantages = masked_whiten(advantages, m, eps)
    return advantages, returns


@register_advantage("gae", needs_critic=True)
def gae_estimator(inputs: AdvantageInputs) -> AdvantageOutputs:
    """PPO's GAE on a token batch: token reward r_t = R [t = last valid token] - kl_penalty_t,
    delta_t = r_t + gamma * V_next(t) - V_t, A_t = delta_t + gamma * lam * A_next(t) (0 past
    the last valid token), returns_t = A_t + V_t; A whitened over the batch's valid tokens with
    ``normalize_advantages``. See :func:`compute_gae_advantages`.

    >>> out = gae_estimator(AdvantageInputs(
    ...     torch.tensor([1.0]), torch.tensor([[1, 1, 0]]), values=torch.tensor([[0.5, 0.5, 9.0]]),
    ...     normalize_advantages=False))
    >>> out.advantages, out.returns  # A_1 = 1 - .5; A_0 = (0 + .5 - .5) + .5; padding 0
    (tensor([[0.5000, 0.5000, 0.0000]]), tensor([[1., 1., 0.]]))
    """
    if inputs.values is None:
        raise ValueError("adv_type gae needs critic values (AdvantageInputs.values)")
    token_rewards = rewards_to_last_token(inputs.rewards, inputs.response_mask).to(inputs.values.dtype)
    if inputs.kl_penalty is not None:
        token_rewards = token_rewards - inputs.kl_penalty
    return AdvantageOutputs(*compute_gae_advantages(
        token_rewards, inputs.values, inputs.response_mask, gamma=inputs.gamma, lam=inputs.lam,
        normalize_advantages=inputs.normalize_advantages))
