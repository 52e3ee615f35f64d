"""The inference group of a math run: the frozen initial policy's log-probs (for the KL term).

It runs when ``inference`` is placed apart from the actor (e.g. ``{actor: 0-3, inference: 4,
rollout: 5-7}``); otherwise the actor keeps its own frozen copy. Its weights never change, so
nothing has to be synced to it.
"""

from __future__ import annotations

import torch

from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.fsdp_vlm import training_engine_class
from rlinf.scheduler import Worker
from rlinf.workers.memory_hints import forward_step


class ReferenceWorker(Worker):
    """One rank of the inference group: a sharded, frozen copy of the starting policy.

    Args:
        model_path: HF folder the run starts from.
        actor: ``actor:`` section (precision, FSDP settings, seed).
        algorithm: ``algorithm:`` section (temperature, forward micro-batch size).
    """

    def __init__(self, model_path: str, actor: ActorConfig, algorithm: AlgorithmConfig):
        self.init_process_group()
        self.micro_batch_size = algorithm.logprob_forward_micro_batch_size
        engine_cls = training_engine_class(model_path)  # a vision-language folder gets its engine
        self.engine = engine_cls(model_path, actor, temperature=algorithm.sampling_params.temperature,
                                 total_steps=1, train_entropy=False)

    @forward_step
    def compute_ref_logprobs(self, shard: RolloutBatch) -> torch.Tensor:
        """Log-probs ``[b, R]`` of this rank's shard under the initial policy."""
        logprobs, _ = self.engine.compute_logprobs(shard, self.micro_batch_size)
        return logprobs
