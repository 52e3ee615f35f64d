"""Outcome-reward advantage estimators: GRPO, REINFORCE++, REINFORCE++-baseline and RLOO.

Each has a tensor function (``compute_*_advantages``, returning ``(advantages, returns)``) and,
beside it, its registered estimator (``<name>_estimator(AdvantageInputs) -> AdvantageOutputs``,
the ``algorithm.adv_type`` of that name; see :mod:`rlinf.algorithms.registry`). Outputs are
``[batch, seq]``, zero outside ``response_mask`` and detached from the autograd graph. Sequence
rewards are ``[batch]``; with groups, the batch is ``n_prompts * group_size`` with each prompt's
``group_size`` samples consecutive.

Masked positions are *transparent* for discounting: a token's return skips masked positions
(no reward taken from them, no discount step spent on them), so padding at the end and masked
spans in the middle (e.g. tool output in a multi-turn response) are handled alike.
"""

from __future__ import annotations

import torch

from rlinf.algorithms.registry import AdvantageInputs, AdvantageOutputs, register_advantage
from rlinf.algorithms.utils import (
    check_group_size,
    check_mask,
    check_nonnegative,
    check_same_shape,
    check_sequence_tensor,
    check_unit_interval,
    float_mask,
    masked_whiten,
)


def _float(x: torch.Tensor) -> torch.Tensor:
    return x.detach() if x.is_floating_point() else x.detach().float()


def group_mean_baseline(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Subtract each group's mean reward: r_i - mean_{j in g(i)} r_j.

    >>> group_mean_baseline(torch.tensor([1.0, 0.0, 2.0, 2.0]), group_size=2)
    tensor([ 0.5000, -0.5000,  0.0000,  0.0000])
    """
    check_sequence_tensor(rewards)
    n_prompts = check_group_size(group_size, rewards.shape[0])
    grouped = _float(rewards).view(n_prompts, group_size)
    return (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)


def rewards_to_last_token(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Place each sequence reward at the last valid token of its row.

    out[i, t] = rewards[i] if t is the largest index with mask[i, t] = 1, else 0. Rows with no
    valid token get no reward.

    >>> rewards_to_last_token(torch.tensor([5.0, 7.0]), torch.tensor([[1, 1, 0], [0, 0, 0]]))
    tensor([[0., 5., 0.],
            [0., 0., 0.]])
    """
    check_mask(response_mask)
    check_sequence_tensor(rewards, response_mask.shape[0])
    valid = response_mask.bool()
    seq_len = valid.shape[1]
    last = seq_len - 1 - valid.flip(dims=[1]).int().argmax(dim=1)
    out = torch.zeros(valid.shape, dtype=_float(rewards).dtype, device=rewards.device)
    has_tokens = valid.any(dim=1)
    rows = torch.arange(valid.shape[0], device=rewards.device)
    out[rows[has_tokens], last[has_tokens]] = _float(rewards)[has_tokens]
    return out


def discounted_returns(token_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Per-token discounted return over valid tokens, skipping masked positions.

    G_t = r_t + gamma * G_{next(t)} for valid t, where next(t) is the next *valid* position
    after t (G = 0 past the last one); G_t = 0 at masked t, and r at masked t is ignored.

    >>> discounted_returns(torch.tensor([[1.0, 9.0, 2.0]]), torch.tensor([[1, 0, 1]]), gamma=0.5)
    tensor([[2., 0., 2.]])
    """
    check_mask(response_mask)
    check_same_shape(response_mask, "response_mask", token_rewards=token_rewards)
    check_unit_interval("gamma", gamma)
    r = _float(token_rewards)
    m = float_mask(response_mask, r)
    if gamma == 1.0:
        # Reverse cumulative sum of the valid rewards, which is the same recursion with gamma = 1.
        return (r * m).flip(dims=[1]).cumsum(dim=1).flip(dims=[1]) * m
    running = torch.zeros_like(r[:, 0])
    columns = []
    for t in reversed(range(r.shape[1])):
        valid = m[:, t] > 0
        running = torch.where(valid, r[:, t] + gamma * running, running)
        columns.append(torch.where(valid, running, torch.zeros_like(running)))
    return torch.stack(columns[::-1], dim=1)


def compute_grpo_advantages(
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_size: int,
    normalize_advantages: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO group-relative advantages, broadcast to the response tokens.

    For sample i of group g (``group_size`` consecutive samples):
    A_i = (r_i - mean_g) / (std_g + eps) if ``normalize_advantages`` else r_i - mean_g,
    where std_g is the *unbiased* sample std (divides by group_size - 1). A group whose rewards
    are all exactly equal gets A = 0 (so does ``group_size`` 1). Token advantage
    A_{i,t} = A_i * mask_{i,t}; returns equal the advantages. A group keeps ONE baseline
    whatever policy versions produced its members (fully asynchronous training: mean_g and
    std_g are over the whole group, never per version); the decoupled PPO loss corrects for
    the mixed behaviour policies token by token.

    Args:
        rewards: ``[batch]`` sequence rewards, batch = n_prompts * group_size.
        response_mask: ``[batch, seq]`` mask of response tokens.
        group_size: Samples per prompt.
        normalize_advantages: Divide by the group std.
        eps: Added to the std, >= 0.

    Returns:
        ``(advantages, returns)``, both ``[batch, seq]``.

    >>> adv, _ = compute_grpo_advantages(torch.tensor([1.0, 0.0]), torch.ones(2, 2), group_size=2, eps=0.0)
    >>> adv  # mean 0.5, unbiased std sqrt(0.5) = 0.7071
    tensor([[ 0.7071,  0.7071],
            [-0.7071, -0.7071]])
    """
    check_mask(response_mask)
    check_sequence_tensor(rewards, response_mask.shape[0])
    check_nonnegative("eps", eps)
    n_prompts = check_group_size(group_size, rewards.shape[0])
    grouped = _float(rewards).view(n_prompts, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if normalize_advantages:
        if group_size > 1:
            std = grouped.std(dim=1, unbiased=True, keepdim=True)
        else:
            std = torch.zeros_like(grouped[:, :1])
        scores = centred / (std + eps)
    else:
        scores = centred
    all_equal = (grouped.max(dim=1, keepdim=True).values == grouped.min(dim=1, keepdim=True).values)
    scores = torch.where(all_equal, torch.zeros_like(scores), scores)
    advantages = scores.view(-1, 1) * float_mask(response_mask, scores)
    return advantages, advantages.clone()


@register_advantage("grpo", needs_groups=True)
def grpo_estimator(inputs: AdvantageInputs) -> AdvantageOutputs:
    """GRPO: A_{i,t} = (R_i - mean_g) / (std_g + 1e-6) * mask_{i,t} (std_g unbiased; without
    ``normalize_advantages`` only the mean is subtracted; a group of equal rewards gets 0);
    returns = advantages. Ignores ``kl_penalty`` (GRPO puts the KL in the loss).
    See :func:`compute_grpo_advantages`."""
    return AdvantageOutputs(*compute_grpo_advantages(
        inputs.rewards, inputs.response_mask, inputs.group_size,
        normalize_advantages=inputs.normalize_advantages))


def compute_reinpp_advantages(
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    kl_penalty: torch.Tensor | None = None,
    normalize_advantages: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted token returns, normalised over all valid tokens of the batch.

    Token reward: r_{i,t} = R_i * [t = last valid token of i] - kl_penalty_{i,t}.
    Return: G_{i,t} = r_{i,t} + gamma * G_{i,next(t)} (see :func:`discounted_returns`;
    masked positions are skipped). Advantage: A = (G - mean) / (std + eps) with mean and
    unbiased std over every valid token in the batch (see ``masked_whiten``); A = G when
    ``normalize_advantages`` is False.

    Args:
        rewards: ``[batch]`` sequence rewards.
        response_mask: ``[batch, seq]`` mask of response tokens.
        gamma: Discount in [0, 1].
        kl_penalty: Optional ``[batch, seq]`` per-token penalty, already scaled
            (e.g. beta * kl from :func:`rlinf.algorithms.kl.compute_kl`).
        normalize_advantages: Whiten the returns over the batch.
        eps: Added to the std, >= 0.

    Returns:
        ``(advantages, returns)``, both ``[batch, seq]``.

    >>> adv, ret = compute_reinpp_advantages(torch.tensor([1.0, 0.0]), torch.ones(2, 2), eps=0.0)
    >>> ret
    tensor([[1., 1.],
            [0., 0.]])
    >>> adv  # mean 0.5, unbiased std over 4 tokens sqrt(1/3) = 0.5774
    tensor([[ 0.8660,  0.8660],
            [-0.8660, -0.8660]])
    """
    check_mask(response_mask)
    check_sequence_tensor(rewards, response_mask.shape[0])
    check_nonnegative("eps", eps)
    token_rewards = rewards_to_last_token(rewards, response_mask)
    if kl_penalty is not None:
        check_same_shape(response_mask, "response_mask", kl_penalty=kl_penalty)
        token_rewards = token_rewards - _float(kl_penalty) * float_mask(response_mask, token_rewards)
    returns = discounted_returns(token_rewards, response_mask, gamma)
    advantages = masked_whiten(returns, response_mask, eps) if normalize_advantages else returns.clone()
    return advantages, returns


@register_advantage("reinpp")
def reinpp_estimator(inputs: AdvantageInputs) -> AdvantageOutputs:
    """REINFORCE++: token reward r_{i,t} = R_i [t = last valid token] - kl_penalty_{i,t},
    return G_{i,t} = r_{i,t} + gamma * G_{i,next(t)}, advantage = G whitened over every valid
    token of the batch ((G - mean) / (std + 1e-6), unbiased std; G itself without
    ``normalize_advantages``). See :func:`compute_reinpp_advantages`."""
    return AdvantageOutputs(*compute_reinpp_advantages(
        inputs.rewards, inputs.response_mask, gamma=inputs.gamma, kl_penalty=inputs.kl_penalty,
        normalize_advantages=inputs.normalize_advantages))


def compute_reinpp_baseline_advantages(
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_size: int,
    gamma: float = 1.0,
    kl_penalty: torch.Tensor | None = None,
    normalize_advantages: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: group-mean baseline, then REINFORCE++ batch normalisation.

    R'_i = R_i - mean_{j in g(i)} R_j, then exactly :func:`compute_reinpp_advantages` on R'.
    With gamma = 1 and no KL penalty every valid token of sample i gets
    A_{i,t} = (R'_i - mu) / (sigma + eps), mu and sigma (unbiased) taken over all valid tokens.

    Args:
        rewards: ``[batch]`` sequence rewards, batch = n_prompts * group_size.
        response_mask: ``[batch, seq]`` mask of response tokens.
        group_size: Samples per prompt.
        gamma: Discount in [0, 1].
        kl_penalty: Optional ``[batch, seq]`` scaled per-token penalty.
        normalize_advantages: Whiten the returns over the batch.
        eps: Added to the std, >= 0.

    Returns:
        ``(advantages, returns)``, both ``[batch, seq]``; returns use the centred rewards.

    >>> adv, ret = compute_reinpp_baseline_advantages(
    ...     torch.tensor([3.0, 1.0]), torch.ones(2, 1), group_size=2, normalize_advantages=False)
    >>> ret  # group mean 2
    tensor([[ 1.],
            [-1.]])
    """
    check_mask(response_mask)
    check_sequence_tensor(rewards, response_mask.shape[0])
    centred = group_mean_baseline(rewards, group_size)
    return compute_reinpp_advantages(
        centred,
        response_mask,
        gamma=gamma,
        kl_penalty=kl_penalty,
        normalize_advantages=normalize_advantages,
        eps=eps,
    )


@register_advantage("reinpp_baseline", needs_groups=True)
def reinpp_baseline_estimator(inputs: AdvantageInputs) -> AdvantageOutputs:
    """REINFORCE++-baseline (Hu et al., arXiv 2501.03262; OpenRLHF's ``reinforce_baseline``):
    subtract the group mean of the scalar rewards, R'_i = R_i - mean_{j in g(i)} R_j, then
    REINFORCE++ on R': token reward r_{i,t} = R'_i [t = last valid token] - kl_penalty_{i,t},
    G_{i,t} = r_{i,t} + gamma * G_{i,next(t)}, advantage = (G - mean) / (std + 1e-6) over
    every valid token of the batch (unbiased std). With gamma = 1 and no KL every valid token
    of sample i gets (R'_i - mu) / (sigma + 1e-6). Unlike GRPO the scale is the batch's, not
    the group's, so a group of near-equal rewards is not blown up.
    See :func:`compute_reinpp_baseline_advantages`."""
    return AdvantageOutputs(*compute_reinpp_baseline_advantages(
        inputs.rewards, inputs.response_mask, inputs.group_size, gamma=inputs.gamma,
        kl_penalty=inputs.kl_penalty, normalize_advantages=inputs.normalize_advantages))


def compute_rloo_advantages(
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_size: int,
    normalize_advantages: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out (RLOO): each sample's baseline is the mean reward of the OTHER
    samples of its group.

    A_i = r_i - (1 / (k - 1)) * sum_{j in g(i), j != i} r_j  =  k / (k - 1) * (r_i - mean_g),
    with k = ``group_size`` >= 2; with ``normalize_advantages`` the advantages are whitened over
    the batch's valid tokens afterwards. Token advantage A_{i,t} = A_i * mask_{i,t}; returns
    equal the advantages.

    >>> adv, _ = compute_rloo_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.ones(3, 1), group_size=3)
    >>> adv.view(-1)  # 1 - (0 + 0) / 2, 0 - (1 + 0) / 2, 0 - (1 + 0) / 2
    tensor([ 1.0000, -0.5000, -0.5000])
    """
    check_mask(response_mask)
    check_sequence_tensor(rewards, response_mask.shape[0])
    n_prompts = check_group_size(group_size, rewards.shape[0])
    if group_size < 2:
        raise ValueError(f"rloo needs group_size >= 2 (a baseline from the other samples), got {group_size}")
    grouped = _float(rewards).view(n_prompts, group_size)
    others = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
    scores = (grouped - others).view(-1, 1)
    mask = float_mask(response_mask, scores)
    adv = scores * mask
    if normalize_advantages:
        adv = masked_whiten(adv, mask) * mask
    return adv, adv.clone()


@register_advantage("rloo", needs_groups=True)
def rloo_estimator(inputs: AdvantageInputs) -> AdvantageOutputs:
    """RLOO: A_i = R_i - mean of the other k - 1 rewards of the group = k / (k - 1) * (R_i -
    mean_g), k = ``group_size`` >= 2, broadcast over the response tokens and, with
    ``normalize_advantages``, whitened over the batch's valid tokens; returns = advantages.
    Ignores ``kl_penalty``. See :func:`compute_rloo_advantages`."""
    return AdvantageOutputs(*compute_rloo_advantages(
        inputs.rewards, inputs.response_mask, inputs.group_size,
        normalize_advantages=inputs.normalize_advantages))
