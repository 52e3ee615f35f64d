"""Reduce a token-level loss ``[batch, seq]`` to a scalar (``loss_agg_func``)."""

from __future__ import annotations

import torch

from rlinf.algorithms.utils import check_mask, check_same_shape, float_mask, masked_mean

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")


def aggregate_loss(token_loss: torch.Tensor, response_mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Aggregate a token-level loss over the valid tokens of a batch.

    With m the mask, l the token loss, and S the set of rows holding at least one valid
    token:

    - ``"token-mean"``: sum_{i,t} m_it * l_it / sum_{i,t} m_it.
    - ``"seq-mean-token-sum"``: mean over i in S of sum_t m_it * l_it.
    - ``"seq-mean-token-mean"``: mean over i in S of (sum_t m_it * l_it / sum_t m_it).

    Fully masked rows are left out of the sequence means; an entirely empty mask gives 0.

    Args:
        token_loss: ``[batch, seq]`` per-token loss.
        response_mask: ``[batch, seq]`` float or bool mask, 1 = token counts.
        mode: One of ``LOSS_AGG_MODES``.

    Returns:
        0-dim tensor.

    Raises:
        ValueError: Unknown ``mode`` or mismatched shapes.

    >>> loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    >>> mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    >>> aggregate_loss(loss, mask, "token-mean")  # (1+2+3+4)/4
    tensor(2.5000)
    >>> aggregate_loss(loss, mask, "seq-mean-token-sum")  # (6+4)/2
    tensor(5.)
    >>> aggregate_loss(loss, mask, "seq-mean-token-mean")  # (2+4)/2
    tensor(3.)
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_func must be one of {', '.join(LOSS_AGG_MODES)}; got {mode!r}")
    check_mask(response_mask)
    check_same_shape(response_mask, "response_mask", token_loss=token_loss)
    m = float_mask(response_mask, token_loss)
    if mode == "token-mean":
        return masked_mean(token_loss, m)
    row_has_tokens = (m.sum(dim=-1) > 0).to(m.dtype)
    if mode == "seq-mean-token-sum":
        per_seq = (token_loss * m).sum(dim=-1)
    else:
        per_seq = masked_mean(token_loss, m, dim=-1)
    return masked_mean(per_seq, row_has_tokens)
