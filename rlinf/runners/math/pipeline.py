"""From prompts to a scored batch with log-probs, on the placed groups.

Two paths, chosen once from the placement mode of actor and rollout:

* collocated (or hybrid: some devices shared) — phases take turns on the shared devices: the actor
  offloads, the rollout engine onloads and generates the whole batch, offloads; then reward and
  log-probs run on the full batch.
* disaggregated — :meth:`RolloutPipeline.submit` starts generation and returns at once; every
  rollout rank puts chunks of ``rollout_batch_size_per_gpu`` prompts into a channel as they finish,
  and :meth:`RolloutPipeline.collect` scores each chunk and has the actor (and the inference
  group) compute its log-probs while later chunks are still being generated.

Either way the result is one :class:`RolloutBatch` whose groups are contiguous, with
``rewards``, ``old_logprobs`` and (``kl_beta > 0``) ``ref_logprobs`` filled.

Old log-probs (``rollout.recompute_logprobs: true``) are the actor's log-probs of the batch under
the weights that generated it. When the update is provably on-policy
(:func:`old_logprobs_are_current` returns None) those are exactly the log-probs the update's own
forward pass computes, so the separate pass is skipped and ``old_logprobs`` stays None: the loss
uses the detached current log-probs (ratio 1), as the recompute would give up to float rounding.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from dataclasses import dataclass, field

import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.config.math import MathConfig
from rlinf.data.prompt_dataset import PromptBatch
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.runners.math.groups import MathGroups
from rlinf.scheduler import Channel, GroupCall, Mode, WorkerGroup

#: How long the driver waits for one streamed chunk before checking the rollout ranks are alive.
_POLL_S = 2.0


@dataclass
class Submitted:
    """A generation in flight (or, collocated, waiting to run in :meth:`RolloutPipeline.collect`)."""

    prompts: PromptBatch
    sampling: SamplingParams
    n: int
    seed: int
    chunk: int | None = None  #: prompts per generate call of a rollout rank (None = its whole shard)
    key: str = ""
    expected_chunks: int = 0
    call: GroupCall | None = None
    started: float = field(default_factory=time.perf_counter)


def old_logprobs_are_current(cfg: MathConfig) -> str | None:
    """None when the actor's old log-probs of a batch are provably the log-probs its single
    update computes in its own forward pass (so the recompute can be skipped), else why not.

    Holds when: ``recompute_logprobs`` is on (else the rollout's log-probs are "old"); one
    optimizer step per batch (``n_minibatches`` 1: every micro-batch of it sees the weights that
    generated the batch); synchronous rollout (``max_head_offpolicyness`` 0) from the actor's own
    weights (``rollout.model.model_path`` null or the actor's); no KL folded into rewards (it reads
    the old log-probs before the update); the FSDP backend; and a deterministic training forward
    (every ``*dropout`` / ``*pdrop`` of the model's config.json is 0).
    """
    algo, ro = cfg.algorithm, cfg.rollout
    reasons = []
    if not ro.recompute_logprobs:
        reasons.append("rollout.recompute_logprobs is false")
    if algo.n_minibatches != 1:
        reasons.append(f"algorithm.n_minibatches is {algo.n_minibatches}")
    if algo.max_head_offpolicyness:
        reasons.append("the rollout runs ahead (algorithm.max_head_offpolicyness > 0)")
    if cfg.rollout_mode == "fully_async":
        reasons.append("the rollout is fully asynchronous (samples of several versions)")
    if ro.model.model_path and cfg.actor.model.model_path and ro.model.model_path != cfg.actor.model.model_path:
        reasons.append("the rollout starts from other weights (rollout.model.model_path)")
    if algo.kl_beta > 0 and algo.kl_in_reward:
        reasons.append("the KL penalty in the reward reads them before the update")
    if cfg.actor.training_backend != "fsdp":
        reasons.append(f"actor.training_backend is {cfg.actor.training_backend}")
    dropout = _dropout_keys(cfg.model_path)
    if dropout:
        reasons.append(f"the model has dropout ({', '.join(dropout)})")
    return "; ".join(reasons) or None


def _dropout_keys(model_path: str | None) -> list[str]:
    """Keys of the folder's config.json (nested configs too) naming a non-zero dropout."""
    try:
        with open(os.path.join(model_path or "", "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return ["config.json unreadable"]
    found = []

    def walk(node, prefix):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif (key.endswith("dropout") or key.endswith("pdrop")) and isinstance(value, (int, float)) \
                    and not isinstance(value, bool) and value > 0:
                found.append(f"{prefix}{key}={value}")

    walk(config, "")
    return found


class RolloutPipeline:
    """Generation -> reward -> log-probs for one batch of prompts.

    Args:
        cfg: the run's config.
        groups: launched groups (:func:`rlinf.runners.math.groups.launch_math_groups`).
        pad_token_id: padding id used when joining batches.
    """

    def __init__(self, cfg: MathConfig, groups: MathGroups, pad_token_id: int):
        self.cfg, self.groups, self.pad_token_id = cfg, groups, pad_token_id
        self.collocated = groups.actor_rollout_mode != Mode.DISAGGREGATED
        self.swap_rollout = cfg.rollout.enable_offload is not False  # null = swap when collocated
        #: None: the old log-probs are the update's own (no recompute pass); else why they are not
        self.recompute_reason = old_logprobs_are_current(cfg)
        self._ids = itertools.count()
        self.channel = None
        if not self.collocated:
            ch = cfg.rollout.channel
            self.channel = Channel.create(f"{ch.name}-{uuid.uuid4().hex[:8]}", maxsize=ch.queue_size)

    # ---- generation ---------------------------------------------------------------------------
    def submit(self, prompts: PromptBatch, sampling: SamplingParams, n: int, seed: int,
               chunk: int | None = None) -> Submitted:
        """Start generating ``n`` responses per prompt (disaggregated: returns at once); each
        rollout rank generates ``chunk`` prompts at a time (default
        ``algorithm.rollout_batch_size_per_gpu``, else its whole shard)."""
        job = Submitted(prompts, sampling, n, seed, chunk or self.cfg.algorithm.rollout_batch_size_per_gpu)
        if self.collocated:
            return job
        rollout = self.groups.rollout
        shards = _shard_prompts(prompts, rollout.world_size)
        chunk = job.chunk or max(len(s.prompts) for s in shards)
        job.key = f"{self.cfg.rollout.channel.queue_name}-{next(self._ids)}"
        job.expected_chunks = sum(-(-len(s.prompts) // chunk) for s in shards)
        job.call = rollout.execute_each("generate_to_channel", [
            (s, sampling, n, seed * 1000 + r * 100, self.channel, job.key, chunk)
            for r, s in enumerate(shards)])
        return job

    def collect(self, job: Submitted, logprobs: bool = True) -> tuple[RolloutBatch, dict[str, float]]:
        """The scored batch of ``job`` (with log-probs unless ``logprobs`` is False) and metrics
        ``reward/*`` and ``time/*``."""
        if self.collocated:
            return self._collect_collocated(job, logprobs)
        return self._collect_streaming(job, logprobs)

    def _collect_collocated(self, job: Submitted, logprobs: bool):
        rollout, actor = self.groups.rollout, self.groups.actor
        t = time.perf_counter()
        actor.offload().wait()
        if self.groups.critic is not None:
            self.groups.critic.offload().wait()
        if self.swap_rollout:
            rollout.onload().wait()
        shards = _shard_prompts(job.prompts, rollout.world_size)
        parts = rollout.execute_each("generate", [(s, job.sampling, job.n, job.seed * 1000 + r * 100, job.chunk)
                                                  for r, s in enumerate(shards)]).wait()
        if self.swap_rollout:
            rollout.offload().wait()
        actor.onload().wait()
        if self.groups.critic is not None:
            self.groups.critic.onload().wait()
        batch = RolloutBatch.concat([b for b in parts if b.batch_size], self.pad_token_id)
        timings = {"time/rollout": time.perf_counter() - t}
        t = time.perf_counter()
        pending = self._logprobs_async(batch) if logprobs else {}
        scoring = self._score_async(batch)
        batch, metrics = scoring()
        timings["time/reward"] = time.perf_counter() - t
        _fill_logprobs(batch, pending, self.cfg.rollout.recompute_logprobs)
        timings["time/logprobs"] = time.perf_counter() - t
        return batch, {**metrics, **timings}

    def _collect_streaming(self, job: Submitted, logprobs: bool):
        pieces = []  # (chunk, scoring, pending log-prob calls) in arrival order
        got = 0
        while got < job.expected_chunks:
            try:
                chunk = self.channel.get(job.key, timeout=_POLL_S)
            except Exception as exc:  # ChannelTimeout: is the rollout still alive?
                if type(exc).__name__ != "ChannelTimeout":
                    raise
                if job.call.done():
                    job.call.wait()  # raises the rank's error if one failed
                    if self.channel.qsize(job.key) == 0:
                        raise RuntimeError(f"rollout finished but sent {got} of {job.expected_chunks} "
                                           "chunks") from None
                continue
            got += 1
            if chunk.batch_size:
                pending = self._logprobs_async(chunk) if logprobs else {}
                pieces.append((chunk, self._score_async(chunk), pending))
        job.call.wait()
        generated = time.perf_counter()
        scored = []
        for _chunk, scoring, pending in pieces:
            part, _ = scoring()
            _fill_logprobs(part, pending, self.cfg.rollout.recompute_logprobs)
            scored.append(part)
        batch = RolloutBatch.concat(scored, self.pad_token_id)
        metrics = _reward_metrics(batch)
        metrics["time/rollout"] = generated - job.started
        metrics["time/after_rollout"] = time.perf_counter() - generated
        return batch, metrics

    def discard(self, job: Submitted) -> None:
        """Wait for a submitted generation nobody will train on and drop its output."""
        if self.collocated:
            return
        job.call.wait()
        if job.expected_chunks:
            self.channel.get_batch(job.key, count=job.expected_chunks, timeout=60)

    def score(self, batch: RolloutBatch, logprobs: bool = True) -> tuple[RolloutBatch, dict[str, float]]:
        """Reward and (unless ``logprobs`` is False) log-probs of a generated batch — what
        :meth:`collect` does after generation; the fully asynchronous path calls it on the groups a
        step takes, so the proximal log-probs are the current actor's."""
        t = time.perf_counter()
        pending = self._logprobs_async(batch) if logprobs else {}
        scored, metrics = self._score_async(batch)()
        _fill_logprobs(scored, pending, self.cfg.rollout.recompute_logprobs)
        metrics["time/after_rollout"] = time.perf_counter() - t
        return scored, metrics

    def add_logprobs(self, batch: RolloutBatch) -> None:
        """Fill ``old_logprobs`` / ``ref_logprobs`` of a batch collected with ``logprobs=False``."""
        _fill_logprobs(batch, self._logprobs_async(batch), self.cfg.rollout.recompute_logprobs)

    # ---- reward and log-probs -----------------------------------------------------------------
    def _score_async(self, batch: RolloutBatch):
        """Start scoring ``batch``; returns a function giving ``(scored batch, metrics)``."""
        reward = self.groups.reward
        if not isinstance(reward, WorkerGroup):
            scored = reward.score_batch(batch)
            return lambda: scored
        shards = _split_ragged(batch, reward.world_size)
        call = reward.execute_each("score_batch", [(s,) for s in shards])

        def finish():
            results = call.wait()
            joined = RolloutBatch.concat([b for b, _ in results if b.batch_size], self.pad_token_id)
            return joined, _reward_metrics(joined)

        return finish

    def _logprobs_async(self, batch: RolloutBatch) -> dict[str, GroupCall]:
        """Start the old (when recomputed) and reference (when ``kl_beta > 0``) log-prob passes."""
        calls: dict[str, GroupCall] = {}
        actor = self.groups.actor
        if self.cfg.rollout.recompute_logprobs and self.recompute_reason is not None:
            calls["old_logprobs"] = actor.execute_each(
                "compute_logprobs", [(s,) for s in _split_ragged(batch, actor.world_size)])
        if self.cfg.algorithm.kl_beta > 0:
            ref = self.groups.inference or actor
            calls["ref_logprobs"] = ref.execute_each(
                "compute_ref_logprobs", [(s,) for s in _split_ragged(batch, ref.world_size)])
        critic = self.groups.critic
        if critic is not None:  # the old values GAE starts from, alongside the log-probs
            calls["values"] = critic.execute_each(
                "compute_values", [(s,) for s in _split_ragged(batch, critic.world_size)])
        return calls

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def _fill_logprobs(batch: RolloutBatch, pending: dict[str, GroupCall], recompute: bool) -> None:
    for name, call in pending.items():
        parts = [p for p in call.wait() if p.shape[0]]
        width = batch.response_ids.shape[1]
        setattr(batch, name, torch.cat([_pad_to(p, width) for p in parts]))
    if not recompute:
        batch.old_logprobs = batch.rollout_logprobs


def _pad_to(t: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, width - t.shape[1])) if t.shape[1] < width else t[:, :width]


def _reward_metrics(batch: RolloutBatch) -> dict[str, float]:
    accuracy = batch.correct.float().mean() if batch.batch_size else torch.tensor(0.0)
    return {"reward/mean": float(batch.rewards.mean()), "reward/accuracy": float(accuracy),
            "reward/count": float(batch.batch_size)}


def _shard_prompts(prompts: PromptBatch, parts: int) -> list[PromptBatch]:
    per = -(-len(prompts.prompts) // parts)
    return [PromptBatch(prompts.prompts[r * per:(r + 1) * per]) for r in range(parts)]


def _split_ragged(batch: RolloutBatch, parts: int) -> list[RolloutBatch]:
    """Exactly ``parts`` consecutive slices (the last ones may be empty)."""
    per = -(-batch.batch_size // parts)
    return [batch.select(range(min(i * per, batch.batch_size), min((i + 1) * per, batch.batch_size)))
            for i in range(parts)]
