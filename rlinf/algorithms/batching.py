"""Dynamic batch size: pack sequences into micro-batches under a token budget."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pack_micro_batches(seq_lengths: Sequence[int] | torch.Tensor, max_tokens_per_mbs: int) -> list[list[int]]:
    """Pack sequence indices into micro-batches by first-fit-decreasing.

    Sequences are visited longest first (ties: lower index first); each goes into the first
    open micro-batch (in creation order) whose token total plus its length stays
    <= ``max_tokens_per_mbs``, else it opens a new one. A sequence longer than the budget gets
    a micro-batch of its own that nothing else joins. Every index appears exactly once; indices
    inside a micro-batch are ascending; micro-batches are in creation order.

    Args:
        seq_lengths: Token length (>= 0) of each sequence, a list or 1-D integer tensor.
        max_tokens_per_mbs: Token budget per micro-batch, a positive int.

    Returns:
        A list of micro-batches, each a list of sequence indices.

    >>> pack_micro_batches([5, 3, 4, 2, 12], max_tokens_per_mbs=8)
    [[4], [0, 1], [2, 3]]
    """
    if isinstance(max_tokens_per_mbs, bool) or not isinstance(max_tokens_per_mbs, int) or max_tokens_per_mbs <= 0:
        raise ValueError(f"max_tokens_per_mbs must be a positive int, got {max_tokens_per_mbs!r}")
    if isinstance(seq_lengths, torch.Tensor):
        if seq_lengths.dim() != 1 or seq_lengths.is_floating_point():
            raise ValueError(f"seq_lengths must be a 1-D integer tensor, got {seq_lengths.dtype} "
                             f"{tuple(seq_lengths.shape)}")
        lengths = [int(x) for x in seq_lengths.tolist()]
    else:
        lengths = list(seq_lengths)
    for i, length in enumerate(lengths):
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise ValueError(f"seq_lengths must be ints >= 0, got {length!r} at index {i}")

    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    totals: list[int] = []
    for i in order:
        length = lengths[i]
        for b, total in enumerate(totals):
            if total + length <= max_tokens_per_mbs:
                bins[b].append(i)
                totals[b] = total + length
                break
        else:
            bins.append([i])
            totals.append(length)
    return [sorted(b) for b in bins]
