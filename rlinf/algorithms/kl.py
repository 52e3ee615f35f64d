"""Token-level KL estimators between the policy and a reference policy, and their two uses:
as a reward penalty or as a loss term.

All estimators take ``logprobs`` (log pi(a_t)) and ``ref_logprobs`` (log pi_ref(a_t)) of the
sampled tokens, ``[batch, seq]``, and return a ``[batch, seq]`` tensor. Names (``kl_penalty_type``):

- ``"kl"`` / ``"k1"``: k1 = logp - logp_ref
- ``"abs"``: |logp - logp_ref|
- ``"mse"`` / ``"k2"``: k2 = 0.5 * (logp - logp_ref)^2
- ``"low_var_kl"`` / ``"k3"``: k3 = exp(logp_ref - logp) - (logp_ref - logp) - 1, computed with
  logp_ref - logp clamped to [-K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP] = [-20, 20] (so exp never
  overflows and gradients stay finite) and the result clamped to [0, K3_MAX] = [0, 10].
"""

from __future__ import annotations

import torch

from rlinf.algorithms.loss_agg import aggregate_loss
from rlinf.algorithms.registry import get_kl_fn, register_kl_penalty
from rlinf.algorithms.utils import check_mask, check_nonnegative, check_same_shape, float_mask

K3_LOG_RATIO_CLAMP = 20.0
K3_MAX = 10.0


@register_kl_penalty("kl", "k1")
def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = logp - logp_ref (unbiased, can be negative per token).

    >>> kl_k1(torch.tensor([-1.0]), torch.tensor([-2.0]))
    tensor([1.])
    """
    return logprobs - ref_logprobs


@register_kl_penalty("abs")
def kl_abs(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """|logp - logp_ref|.

    >>> kl_abs(torch.tensor([-2.0]), torch.tensor([-1.0]))
    tensor([1.])
    """
    return (logprobs - ref_logprobs).abs()


@register_kl_penalty("mse", "k2")
def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 * (logp - logp_ref)^2.

    >>> kl_k2(torch.tensor([-1.0]), torch.tensor([-3.0]))
    tensor([2.])
    """
    return 0.5 * (logprobs - ref_logprobs).square()


@register_kl_penalty("low_var_kl", "k3")
def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = exp(d) - d - 1 with d = clamp(logp_ref - logp, -20, 20); result clamped to [0, 10].

    Non-negative, unbiased for KL(pi || pi_ref) when tokens are sampled from pi (up to the clamps).

    >>> kl_k3(torch.tensor([0.0]), torch.tensor([0.0]))
    tensor([0.])
    >>> kl_k3(torch.tensor([-1.0]), torch.tensor([0.0]))  # e - 1 - 1
    tensor([0.7183])
    """
    log_ratio = (ref_logprobs - logprobs).clamp(-K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
    return (log_ratio.exp() - log_ratio - 1).clamp(min=0.0, max=K3_MAX)


def compute_kl(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kl_penalty_type: str = "low_var_kl"
) -> torch.Tensor:
    """Token-level KL estimate selected by ``kl_penalty_type`` (see the module docstring).

    Raises:
        ValueError: Unknown ``kl_penalty_type`` (lists the names) or mismatched shapes.

    >>> compute_kl(torch.tensor([[-1.0]]), torch.tensor([[-3.0]]), "k2")
    tensor([[2.]])
    """
    fn = get_kl_fn(kl_penalty_type)
    check_same_shape(logprobs, "logprobs", ref_logprobs=ref_logprobs)
    return fn(logprobs, ref_logprobs)


def apply_kl_penalty_to_rewards(
    token_rewards: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    kl_penalty_type: str = "kl",
) -> tuple[torch.Tensor, torch.Tensor]:
    """KL in the reward: r'_t = r_t - kl_coef * kl_t * mask_t (kl detached).

    Args:
        token_rewards: ``[batch, seq]`` rewards.
        logprobs: ``[batch, seq]`` log-probs of the sampling policy.
        ref_logprobs: ``[batch, seq]`` log-probs of the reference policy.
        response_mask: ``[batch, seq]`` mask of response tokens.
        kl_coef: beta >= 0.
        kl_penalty_type: KL estimator name.

    Returns:
        ``(penalised_rewards, kl)`` where kl is the masked token KL, both ``[batch, seq]``.

    >>> r, kl = apply_kl_penalty_to_rewards(torch.tensor([[0.0, 1.0]]), torch.tensor([[-1.0, -1.0]]),
    ...     torch.tensor([[-2.0, -1.0]]), torch.ones(1, 2), kl_coef=0.5)
    >>> r  # kl = [1, 0]: [0 - 0.5*1, 1 - 0]
    tensor([[-0.5000,  1.0000]])
    """
    check_mask(response_mask)
    check_same_shape(
        response_mask, "response_mask", token_rewards=token_rewards, logprobs=logprobs, ref_logprobs=ref_logprobs
    )
    check_nonnegative("kl_coef", kl_coef)
    kl = compute_kl(logprobs.detach(), ref_logprobs.detach(), kl_penalty_type)
    kl = kl * float_mask(response_mask, kl)
    return token_rewards - kl_coef * kl.to(token_rewards.dtype), kl


def compute_kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    kl_penalty_type: str = "low_var_kl",
    loss_agg_func: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL as a loss term: kl_coef * aggregate_loss(kl(logp, logp_ref), mask, loss_agg_func).

    Gradients flow through ``logprobs``; ``ref_logprobs`` is detached.

    Returns:
        ``(loss, {"kl": aggregated kl (detached)})``.

    >>> loss, m = compute_kl_loss(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-2.0, -2.0]]),
    ...     torch.ones(1, 2), kl_coef=0.1, kl_penalty_type="k1")
    >>> loss  # 0.1 * (1 + 0) / 2
    tensor(0.0500)
    """
    check_mask(response_mask)
    check_same_shape(response_mask, "response_mask", logprobs=logprobs, ref_logprobs=ref_logprobs)
    check_nonnegative("kl_coef", kl_coef)
    kl = compute_kl(logprobs, ref_logprobs.detach(), kl_penalty_type)
    kl_value = aggregate_loss(kl, response_mask, loss_agg_func)
    return kl_coef * kl_value, {"kl": kl_value.detach()}
