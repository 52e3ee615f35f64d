"""Math RL (GRPO / PPO-style) — the synchronous loop. One step:

    1. prompts      <- the next ``data.rollout_batch_size`` prompts
    2. rollout      <- ``algorithm.group_size`` responses per prompt      (rollout group)
    3. reward       <- ±reward_scale from math verification               (reward group)
    4. log-probs    <- old (if ``rollout.recompute_logprobs``) and reference (if ``kl_beta > 0``)
    5. advantages   <- ``algorithm.adv_type``                              (driver)
    6. update       <- ``algorithm.n_minibatches`` optimizer steps         (actor group)
    7. weight sync  <- actor rank 0 -> every rollout rank, in place

When actor and rollout are collocated they take turns: the actor offloads before generation and
the rollout engine offloads before training.
"""

from __future__ import annotations

import time

import torch

from rlinf.config.math import MathConfig
from rlinf.data.prompt_dataset import PromptBatch, PromptLoader
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.runners.math_groups import MathGroups
from rlinf.scheduler import Mode, WorkerGroup
from rlinf.workers.actor.objectives import add_advantages
from rlinf.workers.actor.sharding import plan_update


class MathGRPORunner:
    """Drives the groups of :class:`MathGroups` through training steps and validations."""

    def __init__(self, cfg: MathConfig, groups: MathGroups, train: PromptLoader,
                 val: PromptLoader | None, pad_token_id: int):
        self.cfg, self.groups, self.train, self.val = cfg, groups, train, val
        self.pad_token_id = pad_token_id
        self.step = 0
        self.collocated = groups.actor_rollout_mode == Mode.COLLOCATED

    # ---- one training step ------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        algo, timings = self.cfg.algorithm, {}
        t = time.perf_counter()
        prompts = self.train.next_batch()                                                  # 1
        batch = self._rollout(prompts, algo.sampling_params, algo.group_size,
                              seed=self.cfg.runner.seed + self.step)                        # 2
        timings["time/rollout"] = time.perf_counter() - t
        t = time.perf_counter()
        batch, metrics = self._reward(batch)                                                # 3
        timings["time/reward"] = time.perf_counter() - t
        t = time.perf_counter()
        self._logprobs(batch)                                                               # 4
        timings["time/logprobs"] = time.perf_counter() - t
        add_advantages(batch, algo)                                                         # 5
        t = time.perf_counter()
        update = plan_update(batch, self.groups.actor.world_size, algo.n_minibatches)       # 6
        actor_metrics = self.groups.actor.execute_each(
            "update", [(s, update.minibatch_tokens) for s in update.shards]).wait()[0]
        timings["time/update"] = time.perf_counter() - t
        t = time.perf_counter()
        self._sync_weights()                                                                # 7
        timings["time/sync"] = time.perf_counter() - t
        self.step += 1
        lengths = batch.response_lengths.float()
        return {**metrics, **actor_metrics, **timings, "step": float(self.step),
                "response/length_mean": float(lengths.mean()),
                "response/clip_frac": sum(r == "length" for r in batch.finish_reasons) / batch.batch_size,
                "throughput/tokens_per_s": batch.num_response_tokens / max(timings["time/rollout"], 1e-9)}

    def validate(self) -> dict[str, float]:
        """Greedy answers on the whole validation set; returns accuracy."""
        if self.val is None:
            return {}
        greedy = type(self.cfg.algorithm.sampling_params)(
            do_sample=False, max_new_tokens=self.cfg.algorithm.sampling_params.max_new_tokens, min_new_tokens=0)
        correct, total = 0.0, 0
        for prompts in self.val.epoch_batches():
            batch = self._rollout(prompts, greedy, 1, seed=0)
            _, metrics = self._reward(batch)
            correct += metrics["reward/accuracy"] * batch.batch_size
            total += batch.batch_size
        return {"val/accuracy": correct / max(total, 1), "val/count": float(total)}

    # ---- phases -------------------------------------------------------------------------------
    def _rollout(self, prompts: PromptBatch, sampling, n: int, seed: int) -> RolloutBatch:
        rollout = self.groups.rollout
        if self.collocated:
            self.groups.actor.offload().wait()
            rollout.onload().wait()
        world = rollout.world_size
        per = -(-len(prompts.prompts) // world)
        shards = [PromptBatch(prompts.prompts[r * per:(r + 1) * per]) for r in range(world)]
        parts = rollout.execute_each(
            "generate", [(s, sampling, n, seed * 1000 + r) for r, s in enumerate(shards)]).wait()
        parts = [b for b in parts if b.batch_size]
        if self.collocated:
            rollout.offload().wait()
            self.groups.actor.onload().wait()
        return RolloutBatch.concat(parts, self.pad_token_id)

    def _reward(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        reward = self.groups.reward
        if not isinstance(reward, WorkerGroup):
            return reward.score_batch(batch)
        shards = _split_ragged(batch, reward.world_size)
        results = reward.execute_each("score_batch", [(s,) for s in shards]).wait()
        scored = RolloutBatch.concat([b for b, _ in results if b.batch_size], self.pad_token_id)
        n = sum(m["reward/count"] for _, m in results)
        accuracy = sum(m["reward/accuracy"] * m["reward/count"] for _, m in results) / max(n, 1)
        return scored, {"reward/accuracy": accuracy, "reward/mean": float(scored.rewards.mean()),
                        "reward/count": n}

    def _logprobs(self, batch: RolloutBatch) -> None:
        actor, world = self.groups.actor, self.groups.actor.world_size
        shards = batch.split(world)
        if self.cfg.rollout.recompute_logprobs:
            batch.old_logprobs = torch.cat(actor.execute_each("compute_logprobs", [(s,) for s in shards]).wait())
        else:
            batch.old_logprobs = batch.rollout_logprobs
        if self.cfg.algorithm.kl_beta > 0:
            batch.ref_logprobs = torch.cat(
                actor.execute_each("compute_ref_logprobs", [(s,) for s in shards]).wait())

    def _sync_weights(self) -> None:
        receiving = self.groups.rollout.receive_weights()
        self.groups.actor.send_weights().wait()
        receiving.wait()


def _split_ragged(batch: RolloutBatch, parts: int) -> list[RolloutBatch]:
    """Exactly ``parts`` consecutive slices (the last ones may be empty)."""
    per = -(-batch.batch_size // parts)
    return [batch.select(range(min(i * per, batch.batch_size), min((i + 1) * per, batch.batch_size)))
            for i in range(parts)]
