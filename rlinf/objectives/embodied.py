"""The embodied PPO loss of one micro-batch: clipped policy loss at the ``logprob_type``
granularity, value loss, entropy bonus.

Example:
    >>> import torch
    >>> from rlinf.config.algorithm import AlgorithmConfig
    >>> lp = torch.zeros(2, 1, 3)
    >>> loss, m = embodied_ppo_loss(lp, lp, torch.tensor([1.0, -1.0]), AlgorithmConfig(logprob_type="chunk_level"))
    >>> abs(float(loss)), m["clip_frac"]   # ratio 1: loss = -mean(adv) = 0
    (0.0, 0.0)
"""

from __future__ import annotations

import torch

from rlinf.algorithms import compute_ppo_loss, compute_value_loss
from rlinf.algorithms.embodied import (
    aggregate_logprobs,
    chunk_rewards,
    compute_embodied_gae,
    compute_embodied_grpo,
    episode_mask,
    expand_like,
    flatten_actions,
)
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.embodied_batch import Trajectory


def embodied_ppo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                      algo: AlgorithmConfig, entropy: torch.Tensor | None = None,
                      values: torch.Tensor | None = None, old_values: torch.Tensor | None = None,
                      returns: torch.Tensor | None = None, value_clip: float | None = 0.2):
    """loss = ppo_clip(ratio at ``logprob_type``) + value_loss_coef * value_loss
    - entropy_bonus * entropy (at ``entropy_type``), each aggregated with ``loss_agg_func``.

    Args:
        logprobs, old_logprobs: ``[M, K, A]``.
        advantages: ``[M]`` or ``[M, K]`` (broadcast over the finer log-prob units).
        entropy: ``[M, K, A]`` or None.
        values, old_values, returns: ``[M]`` or ``[M, K]``; the value term is skipped when None.

    Returns:
        ``(loss, metrics)`` with float metrics.
    """
    lp = aggregate_logprobs(logprobs, algo.logprob_type)
    old = aggregate_logprobs(old_logprobs, algo.logprob_type)
    adv = advantages
    if adv.dim() > lp.dim():  # action-level advantages with a chunk-level ratio
        adv = adv.mean(dim=-1)
    adv = expand_like(adv, lp) if adv.dim() < lp.dim() else adv
    M = lp.shape[0]
    flat = lambda x: x.reshape(M, -1)  # noqa: E731
    mask = torch.ones_like(flat(lp))
    loss, metrics = compute_ppo_loss(flat(lp), flat(old).detach(), flat(adv).detach(), mask,
                                     ratio_clip_eps=algo.ratio_clip_eps, clip_eps_high=algo.clip_ratio_high,
                                     clip_ratio_c=algo.clip_ratio_c, loss_agg_func=algo.loss_agg_func)
    out = {k: float(v) for k, v in metrics.items()}
    out["policy_loss"] = float(loss.detach())
    if values is not None and returns is not None:
        v_loss, v_metrics = compute_value_loss(flat(values), flat(old_values if old_values is not None
                                                                  else values.detach()),
                                               flat(returns), torch.ones_like(flat(values)),
                                               value_clip_eps=value_clip, loss_agg_func=algo.loss_agg_func)
        loss = loss + algo.value_loss_coef * v_loss
        out.update({f"value/{k}": float(v) for k, v in v_metrics.items()})
        out["value_loss"] = float(v_loss.detach())
    if entropy is not None:
        ent = aggregate_logprobs(entropy, algo.entropy_type)
        ent_mean = ent.mean()
        out["entropy"] = float(ent_mean.detach())
        if algo.entropy_bonus > 0:
            loss = loss - algo.entropy_bonus * ent_mean
    return loss, out


def embodied_advantages(traj: Trajectory, algo: AlgorithmConfig, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` ``[T, N]`` (chunk-level) or ``[T, N, K]`` (action-level) of a
    rollout: grpo over episodes of the same start state (``group_size`` envs,
    ``env.train.group_size``), else GAE with the value head's values and bootstrap values."""
    rewards = chunk_rewards(traj.rewards, algo.reward_type)
    if algo.adv_type == "grpo":
        alive = episode_mask(traj.dones).float()
        per_step = rewards if rewards.dim() == 2 else rewards.sum(-1)
        episode_returns = (per_step * alive).sum(dim=0)
        adv_env = compute_embodied_grpo(episode_returns, group_size,
                                        normalize_advantages=algo.normalize_advantages)
        adv = adv_env.unsqueeze(0) * alive
        if rewards.dim() == 3:
            adv = adv.unsqueeze(-1).expand_as(rewards)
        return adv, torch.zeros_like(adv)
    if traj.values is None:
        raise ValueError("gae needs values: the policy has no value head (critic.use_critic_model)")
    boot = algo.gamma * (traj.bootstrap_values if traj.bootstrap_values is not None
                         else torch.zeros_like(traj.dones, dtype=torch.float32))
    if rewards.dim() == 2:
        return compute_embodied_gae(rewards + boot, traj.values, traj.dones, algo.gamma, algo.lam,
                                    algo.normalize_advantages)
    T, N, K = rewards.shape
    rewards = rewards.clone()
    rewards[:, :, -1] += boot
    flat_r, flat_d = flatten_actions(rewards, traj.dones)
    flat_v = torch.cat([flatten_actions(traj.values[:T]), traj.values[T][:, :1].T], dim=0)
    adv, ret = compute_embodied_gae(flat_r, flat_v, flat_d, algo.gamma, algo.lam, algo.normalize_advantages)
    unflat = lambda x: x.reshape(T, K, N).permute(0, 2, 1)  # noqa: E731
    return unflat(adv), unflat(ret)
