"""A tool agent's training loop: the math recipe's step (rollout -> reward -> advantages ->
update -> weight sync) with multi-turn episodes as the rollout.

    1. prompts      <- the next ``data.rollout_batch_size`` prompts
    2. episodes     <- ``algorithm.group_size`` per prompt: model turns and tool calls, one token
                       sequence each, tool results masked out of the loss   (rollout group + tools)
    3. reward       <- the verifier on the format's answer (+ ``agentloop.format_reward``)
    4-7.            as in :mod:`rlinf.runners.math.loop` (log-probs, advantages, update, sync),
                    every token quantity on the loss mask

Validation runs the held-out prompts greedily and reports ``val/accuracy`` with the same
episode metrics under ``val_agent/``.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from rlinf.data.rollout_batch import RolloutBatch
from rlinf.runners.math.loop import MathRunner
from rlinf.runners.tool_agent.metrics import agent_metrics, format_ok


class ToolAgentRunner(MathRunner):
    """:class:`~rlinf.runners.math.loop.MathRunner` with episode metrics and the format reward."""

    BAR_KEYS = {"train_acc": "reward/accuracy", "val_acc": "val/accuracy", "calls": "agent/tool_calls",
                "s/step": "time/step"}
    CURVE_KEYS = ("reward/accuracy", "val/accuracy", "agent/tool_call_rate", "agent/turns")

    def _rollout_batch(self) -> tuple[RolloutBatch, dict[str, float]]:
        batch, metrics = super()._rollout_batch()
        bonus = self.cfg.agentloop.format_reward
        if bonus and batch.episodes:
            ok = torch.tensor([format_ok(e) for e in batch.episodes], dtype=batch.rewards.dtype)
            batch.rewards = batch.rewards + bonus * ok
            metrics["reward/format_ok"] = float(ok.mean())
        metrics.update(agent_metrics(batch))
        return batch, metrics

    def validate(self) -> dict[str, float]:
        if self.val is None:
            return {}
        greedy = replace(self.cfg.algorithm.sampling_params, do_sample=False, min_new_tokens=0)
        batches = []
        for prompts in self.val.epoch_batches():
            job = self.pipeline.submit(prompts, greedy, 1, seed=0,
                                       chunk=self.cfg.algorithm.val_rollout_batch_size_per_gpu)
            batch, _ = self.pipeline.collect(job, logprobs=False)
            batches.append(batch)
        total = sum(b.batch_size for b in batches)
        correct = sum(float(b.correct.float().sum()) for b in batches)
        length = sum(float(b.response_lengths.float().sum()) for b in batches)
        out = {"val/accuracy": correct / max(total, 1), "val/response_length": length / max(total, 1),
               "val/count": float(total)}
        if batches:
            out.update(agent_metrics(RolloutBatch.concat(batches, self.pad_token_id), prefix="val_agent"))
        return out
