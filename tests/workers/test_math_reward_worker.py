"""The math reward worker scores batches, applies the overlong penalty, and closes its pool."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from rlinf.config.reward import RewardConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.workers.reward.math_reward_worker import MathRewardWorker


def test_score_batch_sets_rewards_and_accuracy():
    worker = MathRewardWorker(RewardConfig(reward_scale=2.0))
    try:
        batch = RolloutBatch.from_token_lists([[1]] * 3, [[2], [2, 3], [2, 3, 4]], pad_token_id=0,
                                              group_size=3)
        batch.texts = ["\\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{2}"]
        batch.answers = ["0.5", "1/2", "3"]
        batch, metrics = worker.score_batch(batch)
        assert batch.rewards.tolist() == [2.0, 2.0, -2.0]
        assert metrics["reward/accuracy"] == pytest.approx(2 / 3)
    finally:
        worker.close()


def test_overlong_penalty_is_added():
    # max length 4, buffer 2: lengths 2 -> 0, 3 -> (4-2-3)/2 = -0.5, 4 -> -1 (times factor 1)
    worker = MathRewardWorker(RewardConfig(reward_scale=1.0), overlong_max_length=4, overlong_buffer_len=2)
    try:
        batch = RolloutBatch.from_token_lists([[1]] * 3, [[2] * 2, [2] * 3, [2] * 4], pad_token_id=0)
        batch.texts, batch.answers = ["\\boxed{1}"] * 3, ["1"] * 3
        batch, _ = worker.score_batch(batch)
        assert torch.allclose(batch.rewards, torch.tensor([1.0, 0.5, 0.0]))
    finally:
        worker.close()
    assert not [p for p in multiprocessing.active_children() if p.pid in worker.verifier.pids]
