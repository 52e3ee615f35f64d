"""The math reward worker: +reward_scale for a verified-correct boxed answer, -reward_scale else.

Example (without Ray, a worker is a plain object):
    >>> from rlinf.config.reward import RewardConfig
    >>> worker = MathRewardWorker(RewardConfig(reward_scale=5.0))
    >>> worker.score(["so \\\\boxed{4}", "\\\\boxed{5}", "no box"], ["4", "4", "4"])
    ([5.0, -5.0, -5.0], [True, False, False])
    >>> worker.close()
"""

from __future__ import annotations

import torch

from rlinf.algorithms import overlong_penalty, scale_math_rewards
from rlinf.algorithms.rewards import MathVerifier
from rlinf.config.reward import RewardConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.scheduler import Worker


class MathRewardWorker(Worker):
    """Scores responses with math-verify in a small process pool (safe off the main thread)."""

    def __init__(self, cfg: RewardConfig, overlong_max_length: int | None = None,
                 overlong_buffer_len: int = 0, overlong_penalty_factor: float = 1.0):
        self.cfg = cfg
        self.verifier = MathVerifier(num_processes=cfg.verify_processes, timeout_s=cfg.verify_timeout_s)
        self.overlong = (overlong_max_length, overlong_buffer_len, overlong_penalty_factor)

    def score(self, texts: list[str], answers: list[str]) -> tuple[list[float], list[bool]]:
        """Rewards (±reward_scale) and correctness of each response."""
        correct = self.verifier.score(texts, answers)
        rewards = scale_math_rewards(torch.tensor(correct), self.cfg.reward_scale)
        return rewards.tolist(), correct

    def score_batch(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        """Set ``batch.rewards`` (plus the DAPO overlong penalty when configured); return metrics."""
        rewards, correct = self.score(batch.texts, batch.answers)
        rewards_t = torch.tensor(rewards, dtype=torch.float32)
        max_len, buffer, factor = self.overlong
        if buffer > 0 and max_len is not None:
            penalty = overlong_penalty(batch.response_lengths, max_len, buffer, factor)
            rewards_t = rewards_t + penalty.to(rewards_t.dtype)
        batch.rewards = rewards_t
        batch.correct = torch.tensor(correct, dtype=torch.bool)
        n = max(len(correct), 1)
        return batch, {"reward/accuracy": sum(correct) / n, "reward/mean": float(rewards_t.mean()),
                       "reward/count": float(len(correct))}

    def close(self) -> None:
        self.verifier.close()
