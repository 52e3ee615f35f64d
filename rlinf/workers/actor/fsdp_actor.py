"""The FSDP2 actor worker: log-probs, policy updates, weight sync to rollout, checkpoints."""

from __future__ import annotations

import time

import torch

from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.fsdp_vlm import training_engine_class
from rlinf.engines.training.fsdp_weights import GatheredWeights
from rlinf.objectives.batching import micro_batches
from rlinf.objectives.llm import make_loss_fn
from rlinf.scheduler import Worker
from rlinf.workers.actor.flops import flops_metrics
from rlinf.workers.engine_state import load_engine, save_engine
from rlinf.workers.links import WEIGHT_LINK
from rlinf.workers.memory_hints import forward_step, train_step


class FSDPActorWorker(Worker):
    """One rank of the actor group. Data-parallel over the group with FSDP2.

    Args:
        model_path: HF folder the policy starts from.
        actor: ``actor:`` section.
        algorithm: ``algorithm:`` section (loss, micro-batch sizes, sampling temperature).
        total_steps: training steps planned (for the LR schedule).
        max_tokens_per_mbs: token budget of a micro-batch when packing (None = fixed size).
        with_reference: keep a frozen copy of the initial policy for reference log-probs when
            ``kl_beta > 0`` (False when a separate inference group computes them).
    """

    def __init__(self, model_path: str, actor: ActorConfig, algorithm: AlgorithmConfig,
                 total_steps: int, max_tokens_per_mbs: int | None = None, with_reference: bool = True):
        torch.manual_seed(actor.seed)
        self.init_process_group()
        self.algorithm = algorithm
        self.max_tokens_per_mbs = max_tokens_per_mbs
        engine_cls = training_engine_class(model_path)  # a vision-language folder gets its engine
        self.engine = engine_cls(model_path, actor, temperature=algorithm.sampling_params.temperature,
                                 total_steps=total_steps, train_entropy=algorithm.calculate_entropy
                                 or algorithm.entropy_bonus > 0, token_weighted=algorithm.use_valid_token_scale)
        self.loss_fn = make_loss_fn(algorithm)
        self.calculate_flops = actor.calculate_flops
        self.offload_flags = (actor.offload_weight, actor.offload_grad, actor.offload_optimizer)
        # KL needs the initial policy: a frozen, sharded copy on the same ranks.
        self.reference = (engine_cls(model_path, actor, temperature=algorithm.sampling_params.temperature,
                                     total_steps=total_steps, train_entropy=False)
                          if algorithm.kl_beta > 0 and with_reference else None)

    @forward_step
    def compute_logprobs(self, shard: RolloutBatch) -> torch.Tensor:
        """Log-probs ``[b, R]`` of this rank's shard under the current weights."""
        logprobs, _ = self.engine.compute_logprobs(shard, self.algorithm.logprob_forward_micro_batch_size)
        return logprobs

    @forward_step
    def compute_ref_logprobs(self, shard: RolloutBatch) -> torch.Tensor:
        """Log-probs ``[b, R]`` under the frozen initial policy (needs ``kl_beta > 0``)."""
        if self.reference is None:
            raise RuntimeError("reference log-probs need algorithm.kl_beta > 0")
        logprobs, _ = self.reference.compute_logprobs(shard, self.algorithm.logprob_forward_micro_batch_size)
        return logprobs

    @train_step
    def update(self, shard: RolloutBatch, minibatch_tokens: list[int]) -> dict[str, float]:
        """``n_minibatches`` optimizer steps over this rank's shard; metrics of the last one
        plus the means of all of them."""
        started = time.perf_counter()
        chunks = shard.split(self.algorithm.n_minibatches)
        history: list[dict[str, float]] = []
        for chunk, tokens in zip(chunks, minibatch_tokens):
            mbs = micro_batches(chunk, self.algorithm.training_batch_size_per_gpu, self.max_tokens_per_mbs)
            history.append(self.engine.train_minibatch(mbs, self.loss_fn, max(tokens, 1)))
        keys = history[0].keys() if history else []
        out = {f"actor/{k}": sum(h[k] for h in history) / len(history) for k in keys}
        if self.calculate_flops:
            tokens = int(shard.model_inputs()[1].sum()) if shard.batch_size else 0
            out.update(flops_metrics(self.engine.num_params, tokens, time.perf_counter() - started))
        return out

    def send_weights(self) -> int:
        """Rank 0 sends the full weights over the weight link, gathering each tensor as the link
        packs it; the other ranks take part in the gathers. Returns the bytes sent."""
        source = self.engine.weight_source()
        if self.rank == 0:
            return self.send_tensors(WEIGHT_LINK, source)
        if isinstance(source, GatheredWeights):
            source.gather_along()
        return 0

    def save_checkpoint(self, path: str) -> None:
        """Model + optimizer + LR position (sharded DCP) and this rank's torch RNG state."""
        save_engine(self.engine, path, self.rank)

    def load_checkpoint(self, path: str) -> None:
        """Restore :meth:`save_checkpoint` (the RNG state too when this rank saved one)."""
        load_engine(self.engine, path, self.rank)

    def export_hf(self, path: str) -> None:
        self.engine.export_hf(path)

    def offload(self) -> None:
        weights, grads, optimizer = self.offload_flags
        self.engine.offload(weights=weights, grads=grads, optimizer=optimizer)

    def onload(self) -> None:
        self.engine.onload()
