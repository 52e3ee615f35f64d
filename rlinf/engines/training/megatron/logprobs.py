"""Token log-probs and entropy from vocabulary-parallel logits, without gathering the vocabulary.

With tensor parallelism each rank holds the logits of a contiguous slice of the (padded)
vocabulary. For logits ``z`` (already divided by the temperature) and target ``t``:

    m = max_v z_v                      (all-reduce MAX, no gradient)
    s = sum_v exp(z_v - m)             (all-reduce SUM)
    log p(t) = z_t - m - log s         (z_t lives on one rank; all-reduce SUM of the masked value)
    H = m + log s - (sum_v exp(z_v - m) z_v) / s

The sums use megatron's ``reduce_from_tensor_model_parallel_region`` (all-reduce forward,
identity backward): every tensor-parallel rank computes the same loss from the same reduced
values, so each rank's gradient reaches exactly its own vocabulary slice. Columns at or beyond
the HF vocabulary size (Megatron's vocabulary padding) are excluded, so the result equals a
log-softmax over the HF model's logits.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _reduce(t: torch.Tensor, tp_size: int) -> torch.Tensor:
    if tp_size == 1:
        return t
    # lazy: optional extra (megatron)
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region

    return reduce_from_tensor_model_parallel_region(t)


def vocab_parallel_logprobs(logits: torch.Tensor, targets: torch.Tensor, *, vocab_start: int,
                            vocab_size: int, tp_size: int, tp_group=None, with_entropy: bool = False,
                            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log p(targets), entropy or None)`` from this rank's logits slice.

    Args:
        logits: ``[..., V_local]`` fp32 logits of vocabulary ids
            ``vocab_start .. vocab_start + V_local - 1`` (temperature already applied).
        targets: ``[...]`` global token ids.
        vocab_start: first vocabulary id of this rank's slice.
        vocab_size: the real (HF) vocabulary size; ids at or beyond it are padding.
        tp_size, tp_group: the tensor-parallel group the vocabulary is split over.
        with_entropy: also return the entropy of the full distribution.

    Differentiable with respect to ``logits``.

    >>> z = torch.tensor([[1.0, 2.0, 3.0, 9.0]])  # the last column is vocabulary padding
    >>> lp, ent = vocab_parallel_logprobs(z, torch.tensor([2]), vocab_start=0, vocab_size=3,
    ...                                   tp_size=1, with_entropy=True)
    >>> ref = torch.log_softmax(z[:, :3], -1)
    >>> bool(torch.allclose(lp, ref[:, 2])), bool(torch.allclose(ent, -(ref.exp() * ref).sum(-1)))
    (True, True)
    """
    local = logits.shape[-1]
    ids = torch.arange(vocab_start, vocab_start + local, device=logits.device)
    padding = ids >= vocab_size
    if bool(padding.any()):
        logits = logits.masked_fill(padding, float("-inf"))
    m = logits.detach().max(dim=-1).values
    if tp_size > 1:
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=tp_group)
    shifted = logits - m.unsqueeze(-1)
    e = shifted.exp()
    s = _reduce(e.sum(-1), tp_size)
    log_s = s.log()

    in_slice = (targets >= vocab_start) & (targets < vocab_start + local)
    index = (targets - vocab_start).clamp(0, local - 1).unsqueeze(-1)
    target_local = shifted.gather(-1, index).squeeze(-1)
    target_shifted = _reduce(torch.where(in_slice, target_local, torch.zeros_like(target_local)), tp_size)
    logp = target_shifted - log_s

    entropy = None
    if with_entropy:
        finite = shifted.masked_fill(padding, 0.0) if bool(padding.any()) else shifted
        weighted = _reduce((e * finite).sum(-1), tp_size)
        entropy = log_s - weighted / s
    return logp, entropy
