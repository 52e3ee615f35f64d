"""The actor of web-agent runs: the FSDP2 actor with the web update's loss and step plan.

``filtered_sft`` trains with next-token cross-entropy on positive steps; ``grpo`` with the math
runs' PPO clipped loss on group-relative trajectory advantages (see :mod:`rlinf.objectives.web`).
The engine is FSDP2, or DeepSpeed ZeRO with ``algorithm_config.training_backend: deepspeed`` (the
``deepspeed_config_filename`` JSON; :mod:`rlinf.engines.training.deepspeed_engine`).
An update is ``steps`` optimizer steps over this rank's shard, each on
``per_device_train_batch_size x gradient_accumulation_steps`` samples (micro-batches of
``per_device_train_batch_size``), as HF Trainer counts them.
"""

from __future__ import annotations

import torch

from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.deepspeed_engine import DeepSpeedEngine
from rlinf.objectives.batching import micro_batches
from rlinf.objectives.llm import make_loss_fn
from rlinf.objectives.web import sft_loss_fn
from rlinf.workers.actor.fsdp_actor import FSDPActorWorker
from rlinf.workers.memory_hints import web_train_step


class WebActorWorker(FSDPActorWorker):
    """One rank of a web run's actor group.

    Args:
        method: ``filtered_sft`` or ``grpo``.
        micro_batch_size: samples per forward / backward pass (``per_device_train_batch_size``).
        deepspeed: None = FSDP2; else ``(ds_config dict or JSON path, gradient_accumulation_steps)``.
        other arguments: as :class:`FSDPActorWorker` (no reference model: web runs have no KL).
    """

    def __init__(self, model_path, actor, algorithm, total_steps: int, method: str, micro_batch_size: int,
                 deepspeed=None):
        if method not in ("filtered_sft", "grpo"):
            raise ValueError(f"algorithm_config.method must be filtered_sft or grpo, got {method!r}")
        if deepspeed is None:
            super().__init__(model_path, actor, algorithm, total_steps, with_reference=False)
        else:
            torch.manual_seed(actor.seed)
            self.init_process_group()
            self.algorithm, self.max_tokens_per_mbs, self.reference = algorithm, None, None
            ds_config, accumulation = deepspeed
            self.engine = DeepSpeedEngine(model_path, actor, ds_config,
                                          temperature=algorithm.sampling_params.temperature,
                                          total_steps=total_steps, micro_batch_size=micro_batch_size,
                                          gradient_accumulation_steps=accumulation)
            self.calculate_flops = actor.calculate_flops
            self.offload_flags = (actor.offload_weight, actor.offload_grad, actor.offload_optimizer)
        self.method = method
        self.micro_batch_size = micro_batch_size
        self.loss_fn = sft_loss_fn if method == "filtered_sft" else make_loss_fn(algorithm)

    @web_train_step
    def train_steps(self, minibatches: list[RolloutBatch], total_tokens: list[int]) -> list[dict[str, float]]:
        """One optimizer step per entry of ``minibatches`` (this rank's part of each step's
        samples; ``total_tokens[i]`` = response tokens of step ``i`` over all ranks). Returns
        each step's metrics."""
        out = []
        for mb, tokens in zip(minibatches, total_tokens):
            parts = micro_batches(mb, self.micro_batch_size) if mb.batch_size else []
            out.append(self.engine.train_minibatch(parts, self.loss_fn, max(int(tokens), 1)))
        return out

    def nll(self, shard: RolloutBatch) -> tuple[float, int]:
        """Summed response-token NLL of ``shard`` under the current weights and its token count
        (the validation loss of ``val_split_ratio``)."""
        if shard.batch_size == 0:
            return 0.0, 0
        logprobs, _ = self.engine.compute_logprobs(shard, self.micro_batch_size)
        mask = shard.response_mask.to(logprobs.dtype)
        return float(-(logprobs * mask).sum()), int(mask.sum())

    def seed_rng(self, seed: int) -> None:
        torch.manual_seed(seed)
