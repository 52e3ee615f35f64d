"""Sharding a step's batch across ranks, minibatches and micro-batches."""

from __future__ import annotations

from rlinf.data.rollout_batch import RolloutBatch
from rlinf.objectives.batching import micro_batches, plan_update


def batch_with_lengths(lengths):
    return RolloutBatch.from_token_lists([[1, 1]] * len(lengths), [[2] * n for n in lengths], 0, group_size=2)


def test_minibatch_tokens_sum_over_ranks():
    batch = batch_with_lengths([1, 2, 3, 4, 5, 6, 7, 8])
    plan = plan_update(batch, world_size=2, n_minibatches=2)
    # rank 0: [1,2,3,4] -> mb0 [1,2], mb1 [3,4]; rank 1: [5,6,7,8] -> mb0 [5,6], mb1 [7,8]
    assert plan.minibatch_tokens == [1 + 2 + 5 + 6, 3 + 4 + 7 + 8]
    assert [s.response_lengths.tolist() for s in plan.shards] == [[1, 2, 3, 4], [5, 6, 7, 8]]


def test_fixed_and_packed_micro_batches_cover_every_sample_once():
    mb = batch_with_lengths([1, 2, 3, 4, 5])
    fixed = micro_batches(mb, micro_batch_size=2)
    assert [m.batch_size for m in fixed] == [2, 2, 1]
    packed = micro_batches(mb, micro_batch_size=2, max_tokens_per_mbs=9)  # prompt 2 + response
    sizes = [(m.prompt_mask.sum(-1) + m.response_mask.sum(-1)).tolist() for m in packed]
    assert sorted(x for s in sizes for x in s) == [3, 4, 5, 6, 7]
    assert all(sum(s) <= 9 for s in sizes)
