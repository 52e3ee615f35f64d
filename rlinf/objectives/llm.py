"""From ``algorithm:`` settings to the advantages and the per-micro-batch loss of an update.

Example:
    >>> import torch
    >>> from rlinf.config.algorithm import AlgorithmConfig
    >>> from rlinf.data.rollout_batch import RolloutBatch
    >>> batch = RolloutBatch.from_token_lists([[1], [1]], [[2, 3], [4]], pad_token_id=0, group_size=2)
    >>> batch.rewards = torch.tensor([1.0, -1.0])
    >>> add_advantages(batch, AlgorithmConfig(group_size=2, normalize_advantages=False))
    >>> (batch.advantages + 0.0).tolist()  # r - group mean on response tokens, 0 on padding
    [[1.0, 1.0], [-1.0, 0.0]]
"""

from __future__ import annotations

import torch

from rlinf.algorithms import (
    AdvantageInputs,
    compute_decoupled_ppo_loss,
    compute_entropy_loss,
    compute_kl,
    compute_kl_loss,
    compute_ppo_loss,
    get_advantage_estimator,
    masked_mean,
)
from rlinf.algorithms.reward_shaping import clip_rewards, normalize_rewards
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.base import LossFn


def add_advantages(batch: RolloutBatch, algo: AlgorithmConfig) -> None:
    """Fill ``batch.advantages`` / ``batch.returns`` with the estimator registered as
    ``algo.adv_type`` (:mod:`rlinf.algorithms.registry`), after ``reward_clip`` / ``reward_norm``.

    With ``kl_beta > 0`` and ``kl_in_reward`` the per-token KL penalty (old vs reference log-probs)
    goes to the estimator, which folds it into the token rewards (REINFORCE++, GAE); GRPO and RLOO
    ignore it (their KL belongs in the loss: ``kl_in_reward: false``).
    """
    if batch.rewards is None:
        raise ValueError("the batch has no rewards yet: run the reward step before advantages")
    estimator = get_advantage_estimator(algo.adv_type)
    if estimator.needs_critic and batch.values is None:
        raise ValueError(f"adv_type {estimator.name} needs critic values in the batch")
    mask = batch.train_mask  # a tool agent's tool results are not the policy's actions
    batch.rewards = shape_rewards(batch.rewards, algo)
    kl_penalty = None
    if algo.kl_beta > 0 and algo.kl_in_reward and batch.ref_logprobs is not None:
        kl = compute_kl(batch.old_logprobs, batch.ref_logprobs, algo.kl_penalty_type)
        kl_penalty = algo.kl_beta * kl * mask
    out = estimator(AdvantageInputs(
        rewards=batch.rewards, response_mask=mask, group_size=algo.group_size, values=batch.values,
        kl_penalty=kl_penalty, gamma=algo.gamma, lam=algo.lam,
        normalize_advantages=algo.normalize_advantages))
    batch.advantages, batch.returns = out.advantages, out.returns


def shape_rewards(rewards: torch.Tensor, algo: AlgorithmConfig) -> torch.Tensor:
    """``reward_clip`` then ``reward_norm`` (see :mod:`rlinf.algorithms.reward_shaping`)."""
    rewards = clip_rewards(rewards, algo.reward_clip)
    norm = algo.reward_norm
    if norm is not None:
        rewards = normalize_rewards(rewards, norm.mean_level, norm.std_level, algo.group_size,
                                    norm.mean_leave1out, norm.std_unbiased, norm.eps)
    return rewards


def make_loss_fn(algo: AlgorithmConfig) -> LossFn:
    """The loss the training engine applies to each micro-batch.

    policy loss (``loss_type``: ppo with old = recomputed log-probs, or decoupled_ppo with
    proximal = recomputed and behaviour = rollout log-probs) + entropy bonus + KL loss (when
    ``kl_beta > 0`` and not ``kl_in_reward``), all aggregated with ``loss_agg_func``. A
    micro-batch without ``old_logprobs`` is on-policy for this update (the runner skipped the
    recompute, see ``rlinf.runners.math.pipeline.old_logprobs_are_current``): old = the current
    log-probs, detached.
    """

    def loss_fn(logprobs: torch.Tensor, entropy: torch.Tensor | None, mb: RolloutBatch):
        mask = mb.train_mask
        old = mb.old_logprobs if mb.old_logprobs is not None else logprobs.detach()
        clip = dict(ratio_clip_eps=algo.ratio_clip_eps, clip_eps_high=algo.clip_ratio_high,
                    clip_ratio_c=algo.clip_ratio_c, early_stop_imp_ratio=algo.early_stop_imp_ratio,
                    loss_agg_func=algo.loss_agg_func)
        if algo.loss_type == "decoupled_ppo":
            loss, metrics = compute_decoupled_ppo_loss(
                logprobs, old, mb.rollout_logprobs, mb.advantages, mask,
                behav_imp_weight_cap=algo.behav_imp_weight_cap, **clip)
        else:
            loss, metrics = compute_ppo_loss(logprobs, old, mb.advantages, mask, **clip)
        metrics = dict(metrics)
        if entropy is not None:
            ent_loss, ent_metrics = compute_entropy_loss(entropy, mask, algo.entropy_bonus, algo.loss_agg_func)
            metrics.update(ent_metrics)
            if algo.entropy_bonus > 0:
                loss = loss + ent_loss
        if algo.kl_beta > 0 and not algo.kl_in_reward:
            if mb.ref_logprobs is None:
                raise ValueError("kl_beta > 0 needs reference log-probs in the batch")
            kl_loss, kl_metrics = compute_kl_loss(logprobs, mb.ref_logprobs, mask, algo.kl_beta,
                                                  algo.kl_penalty_type, algo.loss_agg_func)
            loss = loss + kl_loss
            metrics.update(kl_metrics)
        metrics["policy_loss"] = loss.detach()
        metrics["advantage_mean"] = masked_mean(mb.advantages, mask).detach()
        return loss, {k: float(v) for k, v in metrics.items()}

    return loss_fn
