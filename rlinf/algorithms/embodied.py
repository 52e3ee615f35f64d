"""Advantages and shaping for embodied RL: rollouts of ``T`` policy steps over ``N`` envs.

Conventions: time-major tensors ``[T, N]`` (one entry per policy step = one action chunk) or
``[T, N, K]`` (one entry per action of a chunk of ``K`` actions); ``dones[t, n]`` is true when the
episode of env ``n`` ended with step ``t`` (terminated or truncated), so step ``t + 1`` starts a
new episode and nothing is bootstrapped across it. Log-probs of a chunk are ``[..., K, A]`` (one
per action dimension, "token").

>>> import torch
>>> chunk_rewards(torch.tensor([[[1.0, 2.0]]]), "chunk_level")
tensor([[3.]])
"""

from __future__ import annotations

from typing import Literal

import torch

from rlinf.algorithms.registry import AdvantageInputs, AdvantageOutputs, register_embodied_advantage
from rlinf.algorithms.utils import check_group_size, check_unit_interval

RewardType = Literal["chunk_level", "action_level"]
LogprobType = Literal["token_level", "action_level", "chunk_level"]


def chunk_rewards(rewards: torch.Tensor, reward_type: RewardType) -> torch.Tensor:
    """Per-action rewards ``[T, N, K]`` at the granularity of ``algorithm.reward_type``.

    chunk_level: r[t, n] = sum_k r[t, n, k] -> ``[T, N]``; action_level: unchanged ``[T, N, K]``.
    """
    if reward_type == "chunk_level":
        return rewards.sum(dim=-1)
    if reward_type == "action_level":
        return rewards
    raise ValueError(f"reward_type must be chunk_level or action_level, got {reward_type!r}")


def flatten_actions(x: torch.Tensor, dones: torch.Tensor | None = None):
    """Action-level tensors ``[T, N, K]`` as a time axis of ``T*K`` steps ``[T*K, N]``; ``dones``
    ``[T, N]`` move to the last action of each chunk. Returns ``x`` or ``(x, dones)``.

    >>> x, d = flatten_actions(torch.arange(4.0).view(1, 1, 4).expand(2, 1, 4),
    ...                        torch.tensor([[True], [False]]))
    >>> x.squeeze(1).tolist(), d.squeeze(1).tolist()
    ([0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0], [False, False, False, True, False, False, False, False])
    """
    T, N, K = x.shape
    flat = x.permute(0, 2, 1).reshape(T * K, N)
    if dones is None:
        return flat
    flat_dones = torch.zeros(T, K, N, dtype=torch.bool, device=dones.device)
    flat_dones[:, -1] = dones.bool()
    return flat, flat_dones.reshape(T * K, N)


def compute_embodied_gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor,
                         gamma: float = 0.99, lam: float = 0.95,
                         normalize_advantages: bool = True, eps: float = 1e-8):
    """GAE over a time-major rollout that may span several episodes per env.

    With c_t = 1 - dones_t (0 when the episode ended at step t):
    delta_t = r_t + gamma * c_t * V_{t+1} - V_t and A_t = delta_t + gamma * lam * c_t * A_{t+1},
    where V_T (``values[T]``) is the value of the observation after the last step (the bootstrap).
    returns_t = A_t + V_t. If ``normalize_advantages``, A is whitened over all T*N entries
    (unbiased std). A truncated episode (time limit) should have gamma * V(final obs) already
    added to its last reward by the caller, since the next row belongs to a new episode.

    Args:
        rewards: ``[T, N]``.
        values: ``[T + 1, N]``.
        dones: ``[T, N]`` bool.

    Returns:
        ``(advantages, returns)``, both ``[T, N]``, detached.

    >>> adv, ret = compute_embodied_gae(torch.tensor([[1.0], [1.0]]), torch.tensor([[0.5], [0.5], [2.0]]),
    ...                                 torch.tensor([[True], [False]]), gamma=0.5, lam=1.0,
    ...                                 normalize_advantages=False)
    >>> adv.squeeze(1).tolist()  # A_1 = 1 + .5*2 - .5 = 1.5; A_0 = 1 - .5 (done: no bootstrap)
    [0.5, 1.5]
    >>> ret.squeeze(1).tolist()
    [1.0, 2.0]
    """
    check_unit_interval("gamma", gamma)
    check_unit_interval("lam", lam)
    T = rewards.shape[0]
    if values.shape[0] != T + 1 or values.shape[1:] != rewards.shape[1:] or dones.shape != rewards.shape:
        raise ValueError(f"expected rewards [T, N], values [T+1, N], dones [T, N]; got "
                         f"{tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(dones.shape)}")
    r, v = rewards.detach().float(), values.detach().float()
    cont = 1.0 - dones.float()
    adv = torch.zeros_like(r)
    next_adv = torch.zeros_like(r[0])
    for t in reversed(range(T)):
        delta = r[t] + gamma * cont[t] * v[t + 1] - v[t]
        next_adv = delta + gamma * lam * cont[t] * next_adv
        adv[t] = next_adv
    returns = adv + v[:T]
    if normalize_advantages and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + eps)
    return adv, returns


def compute_embodied_grpo(episode_returns: torch.Tensor, group_size: int,
                          normalize_advantages: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Group-relative advantage of each env's episode; envs ``g*G .. g*G+G-1`` share one reset
    state (a group).

    A_n = R_n - mean_group(R), divided by (std_group(R) + eps) (unbiased std) when
    ``normalize_advantages``; groups whose returns are all equal get 0.

    >>> compute_embodied_grpo(torch.tensor([1.0, 0.0, 2.0, 2.0]), 2, normalize_advantages=False)
    tensor([ 0.5000, -0.5000,  0.0000,  0.0000])
    """
    check_group_size(group_size, episode_returns.shape[0])
    r = episode_returns.detach().float().view(-1, group_size)
    adv = r - r.mean(dim=1, keepdim=True)
    if normalize_advantages and group_size > 1:
        adv = adv / (r.std(dim=1, keepdim=True) + eps)
    return adv.view(-1)


@register_embodied_advantage("grpo", needs_groups=True)
def embodied_grpo_estimator(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Embodied GRPO: each env's first-episode return R_n = sum_t r_{t,n} * alive_{t,n}
    (``alive`` = :func:`episode_mask`; action-level rewards summed over the chunk first),
    A_n = (R_n - mean_g) / (std_g + 1e-6) over the ``group_size`` envs that share a reset state
    (unbiased std; only the mean without ``normalize_advantages``), broadcast over the alive
    steps (and the actions of a chunk): A_{t,n(,k)} = A_n * alive_{t,n}; returns are 0 (no value
    head). See :func:`compute_embodied_grpo`.

    >>> out = embodied_grpo_estimator(AdvantageInputs(
    ...     torch.tensor([[1.0, 0.0], [5.0, 0.0]]), dones=torch.tensor([[True, False], [False, True]]),
    ...     group_size=2, normalize_advantages=False))
    >>> out.advantages.tolist()  # R = (1, 0): A = (+.5, -.5); env 0 is done after step 0
    [[0.5, -0.5], [0.0, -0.5]]
    """
    rewards = inputs.rewards
    alive = episode_mask(inputs.dones).float()
    per_step = rewards if rewards.dim() == 2 else rewards.sum(-1)
    episode_returns = (per_step * alive).sum(dim=0)
    adv_env = compute_embodied_grpo(episode_returns, inputs.group_size,
                                    normalize_advantages=inputs.normalize_advantages)
    adv = adv_env.unsqueeze(0) * alive
    if rewards.dim() == 3:
        adv = adv.unsqueeze(-1).expand_as(rewards)
    return AdvantageOutputs(adv, torch.zeros_like(adv))


@register_embodied_advantage("gae", needs_critic=True)
def embodied_gae_estimator(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Embodied PPO's GAE (:func:`compute_embodied_gae`) with the value head's values: the
    bootstrap gamma * V(final obs) of a time-limit cut (``bootstrap_values``) is added to that
    step's reward (to the last action of the chunk when action-level), then with
    c_t = 1 - dones_t: delta_t = r_t + gamma * c_t * V_{t+1} - V_t,
    A_t = delta_t + gamma * lam * c_t * A_{t+1}, returns_t = A_t + V_t; A whitened over the
    whole rollout with ``normalize_advantages``. Action-level rewards ``[T, N, K]`` run as a time
    axis of T*K steps (:func:`flatten_actions`) and come back as ``[T, N, K]``.

    >>> out = embodied_gae_estimator(AdvantageInputs(
    ...     torch.tensor([[1.0]]), values=torch.tensor([[0.5], [2.0]]), dones=torch.tensor([[False]]),
    ...     gamma=0.5, lam=1.0, normalize_advantages=False))
    >>> out.advantages.tolist(), out.returns.tolist()  # 1 + .5 * 2 - .5; A + V
    ([[1.5]], [[2.0]])
    """
    rewards, values, dones, gamma = inputs.rewards, inputs.values, inputs.dones, inputs.gamma
    if values is None:
        raise ValueError("gae needs values: the policy has no value head (critic.use_critic_model)")
    boot = gamma * (inputs.bootstrap_values if inputs.bootstrap_values is not None
                    else torch.zeros_like(dones, dtype=torch.float32))
    if rewards.dim() == 2:
        return AdvantageOutputs(*compute_embodied_gae(rewards + boot, values, dones, gamma, inputs.lam,
                                                      inputs.normalize_advantages))
    T, N, K = rewards.shape
    rewards = rewards.clone()
    rewards[:, :, -1] += boot
    flat_r, flat_d = flatten_actions(rewards, dones)
    flat_v = torch.cat([flatten_actions(values[:T]), values[T][:, :1].T], dim=0)
    adv, ret = compute_embodied_gae(flat_r, flat_v, flat_d, gamma, inputs.lam, inputs.normalize_advantages)
    unflat = lambda x: x.reshape(T, K, N).permute(0, 2, 1)  # noqa: E731
    return AdvantageOutputs(unflat(adv), unflat(ret))


def episode_mask(dones: torch.Tensor) -> torch.Tensor:
    """``[T, N]`` 1 up to and including each env's first done, 0 after (steps that belong to the
    first episode — the one a GRPO group is scored on).

    >>> episode_mask(torch.tensor([[False, False], [True, False], [False, True]])).int().T.tolist()
    [[1, 1, 0], [1, 1, 1]]
    """
    d = dones.bool().int()
    after = (d.cumsum(dim=0) - d) > 0
    return ~after


def aggregate_logprobs(logprobs: torch.Tensor, logprob_type: LogprobType) -> torch.Tensor:
    """Chunk log-probs ``[..., K, A]`` at the granularity of the importance ratio.

    token_level: unchanged (one ratio per action dimension); action_level: sum over A -> ``[..., K]``
    (one ratio per action); chunk_level: sum over K and A -> ``[...]`` (one ratio per chunk).

    >>> lp = torch.tensor([[[-1.0, -2.0], [-3.0, -4.0]]])
    >>> aggregate_logprobs(lp, "action_level").tolist(), aggregate_logprobs(lp, "chunk_level").tolist()
    ([[-3.0, -7.0]], [-10.0])
    """
    if logprob_type == "token_level":
        return logprobs
    if logprob_type == "action_level":
        return logprobs.sum(dim=-1)
    if logprob_type == "chunk_level":
        return logprobs.sum(dim=(-2, -1))
    raise ValueError(f"logprob_type must be token_level, action_level or chunk_level, got {logprob_type!r}")


def expand_like(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Broadcast ``x`` (a prefix of ``target``'s shape) over ``target``'s trailing dims.

    >>> expand_like(torch.tensor([1.0, 2.0]), torch.zeros(2, 3)).tolist()
    [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]
    """
    if target.shape[:x.dim()] != x.shape:
        raise ValueError(f"shape {tuple(x.shape)} is not a prefix of {tuple(target.shape)}")
    return x.reshape(*x.shape, *([1] * (target.dim() - x.dim()))).expand_as(target)


def relative_rewards(rewards: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """``use_rel_reward``: the change of a dense reward since the previous step, r_t - r_{t-1}.

    >>> relative_rewards(torch.tensor([0.5, 1.0]), torch.tensor([0.0, 1.0])).tolist()
    [0.5, 0.0]
    """
    return rewards - previous
