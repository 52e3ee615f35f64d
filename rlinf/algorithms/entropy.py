"""Token entropy of the policy and the entropy-bonus loss term."""

from __future__ import annotations

import torch

from rlinf.algorithms.loss_agg import aggregate_loss
from rlinf.algorithms.utils import check_mask, check_nonnegative, check_same_shape


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dimension.

    H = -sum_v p_v log p_v with log p = log_softmax(z) (= z - logsumexp(z)), so large logits do
    not overflow; entries with p_v = 0 (e.g. logits of -inf) contribute 0 and give finite
    gradients.

    Args:
        logits: ``[..., vocab]``, e.g. ``[batch, seq, vocab]``.

    Returns:
        ``[...]``, e.g. ``[batch, seq]``.

    >>> entropy_from_logits(torch.zeros(1, 1, 4))  # uniform over 4: log 4
    tensor([[1.3863]])
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() < 1 or logits.shape[-1] < 1:
        raise ValueError("logits must be a tensor [..., vocab] with vocab >= 1")
    logp = torch.log_softmax(logits.float() if not logits.is_floating_point() else logits, dim=-1)
    p = logp.exp()
    safe_logp = torch.where(p > 0, logp, torch.zeros_like(logp))
    return -(p * safe_logp).sum(dim=-1)


def compute_entropy_loss(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    entropy_coef: float,
    loss_agg_func: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Entropy bonus as a loss term to add to the policy loss.

    loss = -entropy_coef * aggregate_loss(H, mask, loss_agg_func); minimising it raises entropy.

    Returns:
        ``(loss, {"entropy": aggregated entropy (detached)})``.

    >>> loss, m = compute_entropy_loss(torch.tensor([[1.0, 3.0]]), torch.ones(1, 2), entropy_coef=0.01)
    >>> loss  # -0.01 * (1 + 3) / 2
    tensor(-0.0200)
    """
    check_mask(response_mask)
    check_same_shape(response_mask, "response_mask", entropy=entropy)
    check_nonnegative("entropy_coef", entropy_coef)
    value = aggregate_loss(entropy, response_mask, loss_agg_func)
    return -entropy_coef * value, {"entropy": value.detach()}
