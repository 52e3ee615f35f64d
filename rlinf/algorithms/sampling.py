"""Batch shaping on sequence rewards: DAPO dynamic sampling, DAPO overlong penalty, and
the +/- ``reward_scale`` mapping for verifiable (math) rewards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from rlinf.algorithms.utils import check_group_size, check_nonnegative, check_sequence_tensor


class GroupFilterResult(NamedTuple):
    """Outcome of :func:`dynamic_sampling_filter`.

    Attributes:
        group_mask: ``[n_prompts]`` bool, True for kept groups.
        sample_mask: ``[batch]`` bool, True for samples of kept groups.
        sample_indices: ``[n_kept * group_size]`` long, indices of the kept samples, ascending.
        num_kept_groups: Number of kept groups.
    """

    group_mask: torch.Tensor
    sample_mask: torch.Tensor
    sample_indices: torch.Tensor
    num_kept_groups: int


def dynamic_sampling_filter(rewards: torch.Tensor, group_size: int, atol: float = 1e-6) -> GroupFilterResult:
    """DAPO dynamic sampling: keep only groups whose rewards are not all equal.

    A group g is kept iff max_{i in g} r_i - min_{i in g} r_i > ``atol``; groups where every
    sample got (within ``atol``) the same reward give zero group-relative advantage and are
    dropped.

    Args:
        rewards: ``[batch]`` sequence rewards, batch = n_prompts * group_size, groups consecutive.
        group_size: Samples per prompt.
        atol: Tolerance >= 0 (0 means exact equality).

    Returns:
        :class:`GroupFilterResult`.

    >>> res = dynamic_sampling_filter(torch.tensor([1.0, 1.0, 0.0, 1.0]), group_size=2)
    >>> res.group_mask, res.sample_indices, res.num_kept_groups
    (tensor([False,  True]), tensor([2, 3]), 1)
    """
    check_sequence_tensor(rewards)
    check_nonnegative("atol", atol)
    n_prompts = check_group_size(group_size, rewards.shape[0])
    grouped = rewards.detach().view(n_prompts, group_size)
    if not grouped.is_floating_point():
        grouped = grouped.double()
    spread = grouped.max(dim=1).values - grouped.min(dim=1).values
    group_mask = spread > atol
    sample_mask = group_mask.repeat_interleave(group_size)
    sample_indices = sample_mask.nonzero(as_tuple=False).view(-1)
    return GroupFilterResult(group_mask, sample_mask, sample_indices, int(group_mask.sum().item()))


def overlong_penalty(
    response_lengths: torch.Tensor,
    max_length: int,
    cache_length: int,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    """DAPO soft overlong punishment, added to the sequence reward.

    With L the response length, L_max = ``max_length`` and L_cache = ``cache_length``:
    p(L) = 0 if L <= L_max - L_cache; (L_max - L_cache - L) / L_cache if
    L_max - L_cache < L <= L_max; -1 if L > L_max. Returns ``penalty_factor * p(L)``.

    Args:
        response_lengths: ``[batch]`` response lengths in tokens.
        max_length: L_max > 0.
        cache_length: L_cache, 0 <= L_cache <= L_max (0: a hard -1 past L_max only).
        penalty_factor: Scale >= 0.

    Returns:
        ``[batch]`` float penalties in [-penalty_factor, 0].

    >>> overlong_penalty(torch.tensor([6, 8, 9, 10, 11]), max_length=10, cache_length=4)
    tensor([ 0.0000, -0.5000, -0.7500, -1.0000, -1.0000])
    """
    check_sequence_tensor(response_lengths, name="response_lengths")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length <= 0:
        raise ValueError(f"max_length must be a positive int, got {max_length!r}")
    if isinstance(cache_length, bool) or not isinstance(cache_length, int) or not 0 <= cache_length <= max_length:
        raise ValueError(f"cache_length must be an int in [0, max_length={max_length}], got {cache_length!r}")
    check_nonnegative("penalty_factor", penalty_factor)
    lengths = response_lengths.detach().double()
    soft_start = max_length - cache_length
    penalty = torch.zeros_like(lengths)
    if cache_length > 0:
        in_buffer = (lengths > soft_start) & (lengths <= max_length)
        penalty = torch.where(in_buffer, (soft_start - lengths) / cache_length, penalty)
    penalty = torch.where(lengths > max_length, torch.full_like(lengths, -1.0), penalty)
    return (penalty * penalty_factor).float()


def scale_math_rewards(correct: torch.Tensor | Sequence[bool], reward_scale: float = 1.0) -> torch.Tensor:
    """Map verifier outcomes to rewards: correct -> +reward_scale, incorrect -> -reward_scale.

    Args:
        correct: ``[batch]`` bool tensor, 0/1 tensor, or sequence of bools.
        reward_scale: Magnitude >= 0.

    Returns:
        ``[batch]`` float32 rewards.

    >>> scale_math_rewards([True, False], reward_scale=5.0)
    tensor([ 5., -5.])
    """
    check_nonnegative("reward_scale", reward_scale)
    flags = correct if isinstance(correct, torch.Tensor) else torch.as_tensor(list(correct))
    check_sequence_tensor(flags, name="correct")
    if flags.dtype != torch.bool:
        if not bool(((flags == 0) | (flags == 1)).all()):
            raise ValueError("correct must hold only booleans or 0/1 values")
        flags = flags == 1
    scale = torch.full(flags.shape, float(reward_scale), dtype=torch.float32, device=flags.device)
    return torch.where(flags, scale, -scale)
