"""The Megatron actor worker: the FSDP actor's interface over
:class:`rlinf.engines.training.megatron.engine.MegatronEngine` (tensor / pipeline / data
parallelism).

The driver treats both actors alike: it cuts each step's batch into one shard per rank
(:func:`rlinf.objectives.batching.plan_update`) and gets one result per shard. Megatron needs
every rank of a data-parallel replica (its ``tp * pp`` ranks) to compute on the same samples, so
the worker first gathers its replica's shards (the union is that replica's data), runs the engine
on the union, and returns its own shard's rows. With ``tp = pp = 1`` the gather is a no-op and
the worker behaves like the FSDP one.
"""

from __future__ import annotations

import time

import torch

from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.megatron.engine import MegatronEngine
from rlinf.engines.training.megatron.inputs import gather_replica_batch
from rlinf.objectives.batching import micro_batches
from rlinf.objectives.llm import make_loss_fn
from rlinf.workers.actor.flops import flops_metrics
from rlinf.workers.actor.fsdp_actor import FSDPActorWorker
from rlinf.workers.memory_hints import forward_step, train_step


class MegatronActorWorker(FSDPActorWorker):
    """One rank of the actor group trained with Megatron.

    The engine-agnostic methods (``send_weights``, ``save_checkpoint`` / ``load_checkpoint`` with
    the RNG state, ``export_hf``, ``offload`` / ``onload``) are the FSDP actor's; construction and
    the three compute methods are Megatron's.

    Arguments as :class:`FSDPActorWorker`'s; ``actor.training_backend`` is megatron and
    ``model_path`` gives the HF config (and the weights when ``actor.megatron.use_hf_ckpt``).
    """

    def __init__(self, model_path: str, actor: ActorConfig, algorithm: AlgorithmConfig,
                 total_steps: int, max_tokens_per_mbs: int | None = None, with_reference: bool = True):
        torch.manual_seed(actor.seed)
        on_gpu = self.device.type == "cuda"
        self.init_process_group(backend=actor.megatron.distributed_backend if on_gpu else "gloo",
                                timeout_s=60.0 * actor.megatron.distributed_timeout_minutes)
        self.algorithm = algorithm
        self.max_tokens_per_mbs = max_tokens_per_mbs
        temperature = algorithm.sampling_params.temperature
        self.engine = MegatronEngine(model_path, actor, temperature=temperature, device=self.device,
                                     total_steps=total_steps,
                                     train_entropy=algorithm.calculate_entropy or algorithm.entropy_bonus > 0,
                                     token_weighted=algorithm.use_valid_token_scale)
        self.loss_fn = make_loss_fn(algorithm)
        self.calculate_flops = actor.calculate_flops
        self.offload_flags = (actor.offload_weight, actor.offload_grad, actor.offload_optimizer)
        self.reference = (MegatronEngine(model_path, actor, temperature=temperature, device=self.device,
                                         trainable=False)
                          if algorithm.kl_beta > 0 and with_reference else None)

    def _replica_logprobs(self, engine: MegatronEngine, shard: RolloutBatch) -> torch.Tensor:
        replica = gather_replica_batch(shard, engine.model_parallel_group, engine.pad_token_id)
        logprobs, _ = engine.compute_logprobs(replica.batch, self.algorithm.logprob_forward_micro_batch_size)
        return logprobs[replica.start:replica.stop, :replica.response_width]

    @forward_step
    def compute_logprobs(self, shard: RolloutBatch) -> torch.Tensor:
        """Log-probs ``[b, R]`` of this rank's shard under the current weights."""
        return self._replica_logprobs(self.engine, shard)

    @forward_step
    def compute_ref_logprobs(self, shard: RolloutBatch) -> torch.Tensor:
        """Log-probs ``[b, R]`` under the frozen initial policy (needs ``kl_beta > 0``)."""
        if self.reference is None:
            raise RuntimeError("reference log-probs need algorithm.kl_beta > 0")
        return self._replica_logprobs(self.reference, shard)

    @train_step
    def update(self, shard: RolloutBatch, minibatch_tokens: list[int]) -> dict[str, float]:
        """``n_minibatches`` optimizer steps; minibatch ``i`` of a replica is the union of its
        ranks' ``i``-th chunks. Returns the means over the steps (the same on every rank)."""
        started = time.perf_counter()
        chunks = shard.split(self.algorithm.n_minibatches)
        group, pad = self.engine.model_parallel_group, self.engine.pad_token_id
        history: list[dict[str, float]] = []
        for chunk, tokens in zip(chunks, minibatch_tokens):
            replica = gather_replica_batch(chunk, group, pad).batch
            mbs = micro_batches(replica, self.algorithm.training_batch_size_per_gpu, self.max_tokens_per_mbs)
            history.append(self.engine.train_minibatch(mbs, self.loss_fn, max(tokens, 1)))
        keys = history[0].keys() if history else []
        out = {f"actor/{k}": sum(h[k] for h in history) / len(history) for k in keys}
        if self.calculate_flops:
            tokens = int(shard.model_inputs()[1].sum()) if shard.batch_size else 0
            out.update(flops_metrics(self.engine.num_params, tokens, time.perf_counter() - started))
        return out
