"""How one step's batch is cut across actor ranks, minibatches and micro-batches.

Rule: rank ``r`` of ``W`` takes the ``r``-th contiguous ``1/W`` of the batch (whole groups when
``group_size`` divides the slice); minibatch ``i`` is every rank's ``i``-th of
``n_minibatches`` chunks; its global count of trained tokens (``train_mask``: a tool agent's
tool results do not count) is what the training engine divides by, so the update equals a
token-mean over the whole minibatch however it is sharded.

Example:
    >>> import torch
    >>> from rlinf.data.rollout_batch import RolloutBatch
    >>> batch = RolloutBatch.from_token_lists([[1]] * 4, [[2], [2, 2], [2, 2, 2], [2] * 4], 0)
    >>> plan = plan_update(batch, world_size=2, n_minibatches=2)
    >>> [s.response_lengths.tolist() for s in plan.shards]
    [[1, 2], [3, 4]]
    >>> plan.minibatch_tokens     # minibatch 0 = samples 0 and 2, minibatch 1 = samples 1 and 3
    [4, 6]
"""

from __future__ import annotations

from dataclasses import dataclass

from rlinf.algorithms import pack_micro_batches
from rlinf.data.rollout_batch import RolloutBatch


@dataclass
class UpdatePlan:
    """Per-rank shards and the global token count of each minibatch."""

    shards: list[RolloutBatch]
    minibatch_tokens: list[int]


def plan_update(batch: RolloutBatch, world_size: int, n_minibatches: int) -> UpdatePlan:
    """Cut ``batch`` for ``world_size`` ranks and ``n_minibatches`` optimizer steps."""
    shards = batch.split(world_size)
    tokens = [0] * n_minibatches
    for shard in shards:
        for i, mb in enumerate(shard.split(n_minibatches)):
            tokens[i] += mb.num_train_tokens
    return UpdatePlan(shards, tokens)


def micro_batches(minibatch: RolloutBatch, micro_batch_size: int,
                  max_tokens_per_mbs: int | None = None) -> list[RolloutBatch]:
    """Fixed-size micro-batches, or token-budget packing when ``max_tokens_per_mbs`` is given."""
    if max_tokens_per_mbs is None:
        n = max(1, -(-minibatch.batch_size // micro_batch_size))
        size = micro_batch_size
        return [minibatch.select(range(i * size, min((i + 1) * size, minibatch.batch_size)))
                for i in range(n)]
    lengths = (minibatch.prompt_mask.sum(-1) + minibatch.response_mask.sum(-1)).tolist()
    return [minibatch.select(idx) for idx in pack_micro_batches(lengths, max_tokens_per_mbs)]
