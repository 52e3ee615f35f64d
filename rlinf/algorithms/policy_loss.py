"""PPO-family policy losses: clipped surrogate (clip-higher, dual clip, importance-ratio
token dropping) and the decoupled off-policy variant.

Each loss is registered under its ``loss_type`` name and returns ``(loss, metrics)``: a 0-dim
loss aggregated with :func:`rlinf.algorithms.loss_agg.aggregate_loss` and a dict of detached
0-dim tensors:

- ``clip_frac``: share of kept tokens where the clipped term is the active one (strictly larger
  than the unclipped one; its gradient is zero).
- ``dual_clip_frac``: share of kept tokens where the dual-clip bound -c*A is active.
- ``approx_kl``: mean over valid tokens of (r - 1) - log r, the k3 estimate of
  KL(pi_old || pi) with r = pi/pi_old.
- ``ratio_mean`` / ``ratio_max`` / ``ratio_min``: over valid tokens, before the
  ``early_stop_imp_ratio`` drop (the decoupled loss in ``"mask"`` cap mode leaves out the
  tokens over the weight cap).
- ``early_stop_frac`` / ``early_stop_count``: tokens dropped by ``early_stop_imp_ratio``.

Log-ratios are clamped to [-20, 20] before ``exp``. Advantages and the old log-probs are
treated as constants (detached).
"""

from __future__ import annotations

import torch

from rlinf.algorithms.loss_agg import aggregate_loss
from rlinf.algorithms.registry import register_policy_loss
from rlinf.algorithms.utils import check_mask, check_same_shape, masked_mean

LOG_RATIO_CLAMP = 20.0
IMP_WEIGHT_CAP_MODES = ("truncate", "mask")


def _resolve_clip(ratio_clip_eps: float, clip_eps_low: float | None,
                  clip_eps_high: float | None) -> tuple[float, float]:
    low = ratio_clip_eps if clip_eps_low is None else clip_eps_low
    high = ratio_clip_eps if clip_eps_high is None else clip_eps_high
    for name, value in (("ratio_clip_eps", ratio_clip_eps), ("clip_eps_low", low), ("clip_eps_high", high)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    if not low < 1:
        raise ValueError(f"clip_eps_low must be < 1 so the lower bound 1 - eps stays positive, got {low!r}")
    return float(low), float(high)


def _check_above_one(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 1:
        raise ValueError(f"{name} must be a number > 1 or None, got {value!r}")


def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps_low: float,
    clip_eps_high: float,
    clip_ratio_c: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token-level PPO loss with asymmetric clipping and optional dual clip.

    l = max(-A * r, -A * clip(r, 1 - eps_low, 1 + eps_high)); with dual clip (c > 1) and A < 0,
    l = min(l, -c * A), which caps the loss of a negative-advantage token at c * |A|.

    Returns:
        ``(token_loss, clipped, dual_clipped)``; the two masks are bool and mark where the
        clipped term, respectively the -c*A bound, is active.

    >>> loss, clipped, _ = clipped_surrogate(torch.tensor([1.5, 0.5]), torch.tensor([1.0, 1.0]), 0.2, 0.2)
    >>> loss  # [max(-1.5, -1.2), max(-0.5, -0.8)]
    tensor([-1.2000, -0.5000])
    >>> clipped
    tensor([ True, False])
    """
    unclipped = -advantages * ratio
    clipped_loss = -advantages * ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high)
    loss = torch.maximum(unclipped, clipped_loss)
    clipped = clipped_loss > unclipped
    dual_clipped = torch.zeros_like(clipped)
    if clip_ratio_c is not None:
        bound = -clip_ratio_c * advantages
        negative = advantages < 0
        dual_clipped = negative & (bound < loss)
        loss = torch.where(negative, torch.minimum(loss, bound), loss)
        clipped = clipped & ~dual_clipped
    return loss, clipped, dual_clipped


def _ratio_stats(ratio: torch.Tensor, log_ratio: torch.Tensor, valid: torch.Tensor) -> dict[str, torch.Tensor]:
    ratio = ratio.detach()
    if valid.any():
        ratio_max = ratio[valid].max()
        ratio_min = ratio[valid].min()
    else:
        ratio_max = ratio_min = ratio.new_zeros(())
    return {
        "approx_kl": masked_mean((ratio - 1) - log_ratio.detach(), valid),
        "ratio_mean": masked_mean(ratio, valid),
        "ratio_max": ratio_max,
        "ratio_min": ratio_min,
    }


def _ppo_core(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    valid: torch.Tensor,
    weights: torch.Tensor | None,
    clip_eps_low: float,
    clip_eps_high: float,
    clip_ratio_c: float | None,
    early_stop_imp_ratio: float | None,
    loss_agg_func: str,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    ratio = log_ratio.exp()
    token_loss, clipped, dual = clipped_surrogate(ratio, advantages.detach(), clip_eps_low, clip_eps_high, clip_ratio_c)
    if weights is not None:
        token_loss = token_loss * weights
    kept = valid
    dropped = torch.zeros_like(valid)
    if early_stop_imp_ratio is not None:
        r = ratio.detach()
        dropped = valid & ((r > early_stop_imp_ratio) | (r < 1.0 / early_stop_imp_ratio))
        kept = valid & ~dropped
    loss = aggregate_loss(token_loss, kept, loss_agg_func)
    metrics = _ratio_stats(ratio, log_ratio, valid)
    metrics["clip_frac"] = masked_mean(clipped.float(), kept)
    metrics["dual_clip_frac"] = masked_mean(dual.float(), kept)
    metrics["early_stop_count"] = dropped.sum().float()
    metrics["early_stop_frac"] = masked_mean(dropped.float(), valid)
    return loss, metrics


@register_policy_loss("ppo")
def compute_ppo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    ratio_clip_eps: float = 0.2,
    clip_eps_low: float | None = None,
    clip_eps_high: float | None = None,
    clip_ratio_c: float | None = None,
    early_stop_imp_ratio: float | None = None,
    loss_agg_func: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate loss.

    r_t = exp(logp_t - logp_old_t);
    l_t = max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high)), and with dual clip
    (``clip_ratio_c`` = c > 1) l_t = min(l_t, -c A_t) for A_t < 0;
    loss = aggregate_loss(l, kept, loss_agg_func).

    ``early_stop_imp_ratio`` = T > 1 drops token t from the loss (and from the token count of
    the aggregation) when r_t > T or r_t < 1/T; kept = response_mask minus dropped tokens.

    Args:
        logprobs: ``[batch, seq]`` log-probs of the current policy (with grad).
        old_logprobs: ``[batch, seq]`` log-probs of the policy that sampled the batch.
        advantages: ``[batch, seq]`` token advantages.
        response_mask: ``[batch, seq]`` mask of response tokens.
        ratio_clip_eps: Symmetric clip range, the default for both sides.
        clip_eps_low: Lower clip range (overrides ``ratio_clip_eps``), in [0, 1).
        clip_eps_high: Upper clip range (clip-higher), >= 0.
        clip_ratio_c: Dual-clip constant c > 1, or None.
        early_stop_imp_ratio: Threshold T > 1, or None.
        loss_agg_func: See :func:`rlinf.algorithms.loss_agg.aggregate_loss`.

    Returns:
        ``(loss, metrics)``; see the module docstring for the metrics.

    >>> loss, metrics = compute_ppo_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 0.0]]),
    ...     torch.tensor([[1.0, -3.0]]), torch.ones(1, 2))
    >>> loss  # ratio 1: (-1 + 3) / 2
    tensor(1.)
    """
    check_mask(response_mask)
    check_same_shape(response_mask, "response_mask", logprobs=logprobs, old_logprobs=old_logprobs,
                     advantages=advantages)
    low, high = _resolve_clip(ratio_clip_eps, clip_eps_low, clip_eps_high)
    _check_above_one("clip_ratio_c", clip_ratio_c)
    _check_above_one("early_stop_imp_ratio", early_stop_imp_ratio)
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return _ppo_core(
        log_ratio, advantages, response_mask.bool(), None, low, high, clip_ratio_c, early_stop_imp_ratio, loss_agg_func
    )


@register_policy_loss("decoupled_ppo")
def compute_decoupled_ppo_loss(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    behavior_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    ratio_clip_eps: float = 0.2,
    clip_eps_low: float | None = None,
    clip_eps_high: float | None = None,
    clip_ratio_c: float | None = None,
    early_stop_imp_ratio: float | None = None,
    behav_imp_weight_cap: float | None = None,
    behav_imp_weight_cap_mode: str = "truncate",
    loss_agg_func: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Decoupled PPO loss for off-policy (asynchronous) batches.

    Three policies: behaviour mu (sampled the tokens), proximal pi_prox (recomputed before the
    update), current pi. With r_t = pi/pi_prox and importance weight w_t = pi_prox/mu
    (a constant):
    l_t = w_t * max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high)) (dual clip and
    ``early_stop_imp_ratio`` apply to r_t exactly as in :func:`compute_ppo_loss`).

    ``behav_imp_weight_cap`` = C (> 1, or None for no cap), with ``behav_imp_weight_cap_mode``:
    ``"truncate"``: w_t = min(w_t, C); ``"mask"``: tokens with w_t > C are dropped from the loss
    and from the aggregation's token count.

    Extra metrics: ``behav_imp_weight_mean`` / ``behav_imp_weight_max`` (valid tokens, before
    capping) and ``behav_cap_frac`` (share of valid tokens with w_t > C).

    >>> lp = torch.zeros(1, 1)
    >>> loss, _ = compute_decoupled_ppo_loss(lp, lp, torch.log(torch.tensor([[2.0]])),
    ...     torch.tensor([[1.0]]), torch.ones(1, 1))
    >>> loss  # r = 1, w = exp(0 - log 2) = 0.5: 0.5 * (-1)
    tensor(-0.5000)
    """
    check_mask(response_mask)
    check_same_shape(
        response_mask,
        "response_mask",
        logprobs=logprobs,
        proximal_logprobs=proximal_logprobs,
        behavior_logprobs=behavior_logprobs,
        advantages=advantages,
    )
    low, high = _resolve_clip(ratio_clip_eps, clip_eps_low, clip_eps_high)
    _check_above_one("clip_ratio_c", clip_ratio_c)
    _check_above_one("early_stop_imp_ratio", early_stop_imp_ratio)
    _check_above_one("behav_imp_weight_cap", behav_imp_weight_cap)
    if behav_imp_weight_cap_mode not in IMP_WEIGHT_CAP_MODES:
        raise ValueError(
            f"behav_imp_weight_cap_mode must be one of {', '.join(IMP_WEIGHT_CAP_MODES)}; "
            f"got {behav_imp_weight_cap_mode!r}"
        )
    valid = response_mask.bool()
    prox = proximal_logprobs.detach()
    log_ratio = (logprobs - prox).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    weights = (prox - behavior_logprobs.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
    over_cap = torch.zeros_like(valid)
    kept = valid
    if behav_imp_weight_cap is not None:
        over_cap = valid & (weights > behav_imp_weight_cap)
    stats = {
        "behav_imp_weight_mean": masked_mean(weights, valid),
        "behav_imp_weight_max": weights[valid].max() if valid.any() else weights.new_zeros(()),
        "behav_cap_frac": masked_mean(over_cap.float(), valid),
    }
    if behav_imp_weight_cap is not None:
        if behav_imp_weight_cap_mode == "truncate":
            weights = weights.clamp(max=behav_imp_weight_cap)
        else:
            kept = valid & ~over_cap
    loss, metrics = _ppo_core(
        log_ratio, advantages, kept, weights, low, high, clip_ratio_c, early_stop_imp_ratio, loss_agg_func
    )
    metrics.update(stats)
    return loss, metrics
