"""A tool agent's training loop: the math recipe's step (rollout -> reward -> advantages ->
update -> weight sync) with multi-turn episodes as the rollout.

    1. prompts      <- the next ``data.rollout_batch_size`` prompts
    2. episodes     <- ``algorithm.group_size`` per prompt: model turns and tool calls, one token
                       sequence each, tool results masked out of the loss   (rollout group + tools)
    3. reward       <- the verifier on the format's answer (+ ``agentloop.format_reward``)
    4-7.            as in :mod:`rlinf.runners.math.loop` (log-probs, advantages, update, sync),
                    every token quantity on the loss mask

With ``agentloop.train_mode: per_turn`` step 6 trains on one sample per model turn
(:mod:`rlinf.runners.tool_agent.per_turn`). Validation runs the held-out prompts greedily and
reports ``val/accuracy`` with the same episode metrics under ``val_agent/``. With
``agentloop.save_trajectories`` both save their episodes for the trajectory viewer
(:mod:`rlinf.runners.tool_agent.trajectories`).
"""

from __future__ import annotations

import math
import os

import torch

from rlinf.data.rollout_batch import RolloutBatch
from rlinf.runners.math.loop import MathRunner
from rlinf.runners.tool_agent.metrics import agent_metrics, format_ok
from rlinf.runners.tool_agent.per_turn import split_turns
from rlinf.runners.tool_agent.trajectories import save_episodes


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
        if self.cfg.agentloop.save_trajectories:
            save_episodes(os.path.join(self.run_dir, "train_trajectories"), self.step + 1, batch, "train")
        return batch, metrics

    def _validation_metrics(self, batches: list[RolloutBatch]) -> dict[str, float]:
        out = super()._validation_metrics(batches)
        if batches:
            joined = RolloutBatch.concat(batches, self.pad_token_id)
            out.update(agent_metrics(joined, prefix="val_agent"))
            if self.cfg.agentloop.save_trajectories:
                save_episodes(os.path.join(self.run_dir, "test_trajectories"), self.step, joined, "validation")
        return out

    def _update_samples(self, batch: RolloutBatch) -> RolloutBatch:
        """``agentloop.train_mode``: the episodes (``trajectory``) or one sample per model turn
        (``per_turn``, :func:`~rlinf.runners.tool_agent.per_turn.split_turns`)."""
        if self.cfg.agentloop.train_mode != "per_turn":
            return batch
        n = self.cfg.algorithm.n_minibatches
        multiple = self.groups.actor.world_size * n
        if self.groups.critic is not None:
            multiple = math.lcm(multiple, self.groups.critic.world_size * n)
        return split_turns(batch, self.pad_token_id, multiple)
