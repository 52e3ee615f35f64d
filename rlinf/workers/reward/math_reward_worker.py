"""The math reward worker: +reward_scale for a verified-correct boxed answer, -reward_scale else;
plus, when configured, a learned reward model's score (``reward.use_reward_model``) and an LLM
judge's score (``reward.judge``), combined with the weights ``reward.rule_weight``,
``model_weight`` and ``judge_weight``.

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
from rlinf.config.reward import RewardConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.data.tokenizer import load_tokenizer
from rlinf.rewards.base import JudgeError, Sample
from rlinf.rewards.llm_judge import ChatJudge
from rlinf.rewards.math_verify import MathVerifier
from rlinf.rewards.qa import exact_match, token_f1
from rlinf.rewards.reward_model import HFRewardModel
from rlinf.scheduler import Worker

__all__ = ["JudgeError", "MathRewardWorker"]  # JudgeError: raised by the judge under on_failure: stop


class MathRewardWorker(Worker):
    """Scores responses with math-verify in a small process pool (safe off the main thread), the
    reward model and the judge (see the module docstring)."""

    def __init__(self, cfg: RewardConfig, overlong_max_length: int | None = None,
                 overlong_buffer_len: int = 0, overlong_penalty_factor: float = 1.0,
                 tokenizer_path: str | None = None, tokenizer_settings=None):
        self.cfg = cfg
        self.tokenizer_source = (tokenizer_path, tokenizer_settings)
        self._tokenizer = None
        self.reward_model = None
        if cfg.use_reward_model:
            self.reward_model = HFRewardModel(cfg.model.model_path, micro_batch_size=cfg.model_micro_batch_size)
        self.judge = None
        if cfg.judge.enabled:
            self.judge = ChatJudge.from_config(cfg)
        self.verifier = MathVerifier(num_processes=cfg.verify_processes, timeout_s=cfg.verify_timeout_s)
        self.overlong = (overlong_max_length, overlong_buffer_len, overlong_penalty_factor)

    def score(self, texts: list[str], answers: list[str]) -> tuple[list[float], list[bool]]:
        """Rule rewards and correctness of each response (``reward.reward_type``: math: ±reward_scale;
        exact_match: reward_scale or 0; f1: reward_scale x token F1, correct = exact match)."""
        if self.cfg.reward_type != "math":
            correct = [exact_match(t, a) for t, a in zip(texts, answers)]
            if self.cfg.reward_type == "f1":
                return [self.cfg.reward_scale * token_f1(t, a) for t, a in zip(texts, answers)], correct
            return [self.cfg.reward_scale * float(c) for c in correct], correct
        correct = [bool(s.correct) for s in self.verifier.score_many(Sample.many(texts, answers))]
        rewards = scale_math_rewards(torch.tensor(correct), self.cfg.reward_scale)
        return rewards.tolist(), correct

    def judge_scores(self, prompts: list[str], responses: list[str], answers: list[str]) -> tuple[list[float], dict]:
        """The judge's score of each response in [0, 1] (the first number of its reply, clipped);
        a failed request scores 0 and is counted, or raises :class:`JudgeError` with
        ``on_failure: stop``."""
        scores = self.judge.score_many(Sample.many(responses, answers, prompts))
        return [s.value for s in scores], self.judge.metrics(scores)

    def score_batch(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        """Set ``batch.rewards`` (the weighted sources, plus the DAPO overlong penalty when
        configured); return metrics."""
        texts = self.texts_of(batch)
        rewards, correct = self.score(texts, batch.answers)
        cfg, extra = self.cfg, {}
        rewards_t = cfg.rule_weight * torch.tensor(rewards, dtype=torch.float32)
        prompts = batch.prompt_texts or [""] * len(texts)
        if self.reward_model is not None and texts:
            scores = self.reward_model.score_many(Sample.many(texts, prompts=prompts))
            rm = torch.tensor([s.value for s in scores], dtype=torch.float32)
            rewards_t = rewards_t + cfg.model_weight * rm
            extra["reward/model_mean"] = float(rm.mean())
        if self.judge is not None and texts:
            judged, judge_metrics = self.judge_scores(prompts, texts, batch.answers)
            js = torch.tensor(judged, dtype=torch.float32)
            rewards_t = rewards_t + cfg.judge_weight * js
            extra.update(judge_metrics, **{"reward/judge_mean": float(js.mean())})
        max_len, buffer, factor = self.overlong
        if buffer > 0 and max_len is not None:
            penalty = overlong_penalty(batch.response_lengths, max_len, buffer, factor)
            rewards_t = rewards_t + penalty.to(rewards_t.dtype)
        batch.rewards = rewards_t
        batch.correct = torch.tensor(correct, dtype=torch.bool)
        n = max(len(correct), 1)
        return batch, {"reward/accuracy": sum(correct) / n, "reward/mean": float(rewards_t.mean()),
                       "reward/count": float(len(correct)), **extra}

    def texts_of(self, batch: RolloutBatch) -> list[str]:
        """The responses as text: ``batch.texts`` when the rollout decoded them
        (``rollout.detokenize``), else decoded here with the run's tokenizer."""
        if batch.texts or not batch.batch_size:
            return batch.texts
        if self._tokenizer is None:
            path, settings = self.tokenizer_source
            if path is None:
                raise ValueError("the batch has no texts (rollout.detokenize is false) and this reward "
                                 "worker was given no tokenizer to decode them")
            self._tokenizer = load_tokenizer(path, settings)
        lengths = batch.response_lengths.tolist()
        return self._tokenizer.batch_decode([ids[:n] for ids, n in zip(batch.response_ids.tolist(), lengths)],
                                            skip_special_tokens=True)

    def close(self) -> None:
        self.verifier.close()
        if self.judge is not None:
            self.judge.close()
