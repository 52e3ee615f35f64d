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

from rlinf.algorithms import (
    AdvantageInputs,
    compute_decoupled_ppo_loss,
    compute_ppo_loss,
    compute_value_loss,
    get_advantage_estimator,
)
from rlinf.algorithms.embodied import aggregate_logprobs, chunk_rewards, expand_like
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.embodied_batch import Trajectory


def embodied_ppo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                      algo: AlgorithmConfig, entropy: torch.Tensor | None = None,
                      values: torch.Tensor | None = None, old_values: torch.Tensor | None = None,
                      returns: torch.Tensor | None = None, value_clip: float | None = 0.2,
                      prox_logprobs: torch.Tensor | None = None):
    """loss = ppo_clip(ratio at ``logprob_type``) + value_loss_coef * value_loss
    - entropy_bonus * entropy (at ``entropy_type``), each aggregated with ``loss_agg_func``.

    ``algorithm.loss_type: decoupled_ppo`` (with ``prox_logprobs``): the ratio is taken against the
    proximal policy (the weights at the start of this update) and clipped around it, and each term
    is weighted by ``pi_prox / pi_behav`` (:func:`compute_decoupled_ppo_loss`): data one version
    stale (``max_head_offpolicyness: 1``) is clipped to a trust region around the policy being
    updated instead of the one that acted.

    Args:
        logprobs, old_logprobs: ``[M, K, A]`` (``old``: the behaviour policy's, recorded at rollout).
        prox_logprobs: ``[M, K, A]``; needed with ``decoupled_ppo``, refused with ``ppo``.
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
    if (algo.loss_type == "decoupled_ppo") != (prox_logprobs is not None):
        given = "given" if prox_logprobs is not None else "None"
        raise ValueError(f"loss_type {algo.loss_type} with prox_logprobs {given}: "
                         "decoupled_ppo needs the proximal log-probs, ppo takes none")
    if prox_logprobs is not None:
        prox = aggregate_logprobs(prox_logprobs, algo.logprob_type)
        loss, metrics = compute_decoupled_ppo_loss(
            flat(lp), flat(prox).detach(), flat(old).detach(), flat(adv).detach(), mask,
            ratio_clip_eps=algo.ratio_clip_eps, clip_eps_high=algo.clip_ratio_high, clip_ratio_c=algo.clip_ratio_c,
            loss_agg_func=algo.loss_agg_func)
    else:
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
    rollout, from the embodied estimator registered as ``algo.adv_type``
    (:data:`rlinf.algorithms.registry.EMBODIED_ADVANTAGES`: grpo over episodes of the same start
    state, ``group_size`` envs = ``env.train.group_size``; gae with the value head's values and
    bootstrap values)."""
    estimator = get_advantage_estimator(algo.adv_type, "embodied")
    if estimator.needs_critic and traj.values is None:
        raise ValueError(f"{estimator.name} needs values: the policy has no value head (critic.use_critic_model)")
    out = estimator(AdvantageInputs(
        rewards=chunk_rewards(traj.rewards, algo.reward_type), values=traj.values, dones=traj.dones,
        bootstrap_values=traj.bootstrap_values, group_size=group_size, gamma=algo.gamma, lam=algo.lam,
        normalize_advantages=algo.normalize_advantages))
    return out.advantages, out.returns
