"""The critic worker of LLM PPO: values of rollout batches and clipped value-loss updates.

The driver shards each step's batch over the critic's ranks as it does for the actor
(:func:`rlinf.objectives.batching.plan_update`): ``compute_values`` gives the old values the
advantages (GAE) are computed from, ``update`` fits the values to the returns with the clipped
value loss (``critic.value_clip``; :func:`rlinf.algorithms.compute_value_loss`) over
``algorithm.n_minibatches`` optimizer steps, micro-batches of ``training_batch_size_per_gpu``.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from rlinf.algorithms import compute_value_loss, masked_mean
from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.config.reward import CriticConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.fsdp_value import FSDPValueEngine
from rlinf.objectives.batching import micro_batches
from rlinf.scheduler import Worker
from rlinf.workers.engine_state import load_engine, save_engine
from rlinf.workers.memory_hints import forward_step, train_step


def critic_engine_config(actor: ActorConfig, critic: CriticConfig) -> ActorConfig:
    """The ``actor`` section the value engine runs with: the actor's model and FSDP settings,
    ``critic.optim`` / ``critic.lr_sched`` (null = the actor's), the LR ``critic.lr`` (else
    ``actor.optim.value_lr``, else the optimizer's own).

    >>> from rlinf.config.actor import OptimConfig
    >>> critic_engine_config(ActorConfig(optim=OptimConfig(lr=1e-6, value_lr=5e-6)), CriticConfig()).optim.lr
    5e-06
    """
    optim = critic.optim or actor.optim
    lr = critic.lr or actor.optim.value_lr or optim.lr
    return replace(actor, optim=replace(optim, lr=lr, min_lr=min(optim.min_lr, lr)),
                   lr_sched=critic.lr_sched or actor.lr_sched,
                   model=replace(actor.model, is_lora=False, lora_path=None))  # the critic trains in full


def value_loss_fn(value_clip: float | None, loss_agg_func: str):
    """The per-micro-batch loss of the value engine: clipped value loss against ``returns``."""

    def loss_fn(values: torch.Tensor, _entropy, mb: RolloutBatch):
        loss, metrics = compute_value_loss(values, mb.values, mb.returns, mb.train_mask,
                                           value_clip_eps=value_clip, loss_agg_func=loss_agg_func)
        err = masked_mean((values.detach() - mb.returns).square(), mb.train_mask)
        return loss, {**{k: float(v) for k, v in metrics.items()}, "value_mse": float(err)}

    return loss_fn


class FSDPCriticWorker(Worker):
    """One rank of the critic group (FSDP2 over the group).

    Args:
        model_path: HF folder the value model starts from (``critic.model.model_path`` or the
            actor's checkpoint).
        actor: the ``actor`` section (model, FSDP settings; see :func:`critic_engine_config`).
        critic: the ``critic`` section.
        algorithm: ``n_minibatches``, micro-batch sizes, ``use_valid_token_scale``, ``loss_agg_func``.
        total_steps: training steps planned (the LR schedule's length).
        max_tokens_per_mbs: token budget of a packed micro-batch (None = fixed size).
    """

    def __init__(self, model_path: str, actor: ActorConfig, critic: CriticConfig, algorithm: AlgorithmConfig,
                 total_steps: int, max_tokens_per_mbs: int | None = None):
        torch.manual_seed(actor.seed)
        self.init_process_group()
        self.algorithm, self.max_tokens_per_mbs = algorithm, max_tokens_per_mbs
        self.engine = FSDPValueEngine(model_path, critic_engine_config(actor, critic), total_steps=total_steps,
                                      train_entropy=False, token_weighted=algorithm.use_valid_token_scale)
        self.loss_fn = value_loss_fn(critic.value_clip, algorithm.loss_agg_func)
        self.offload_flags = (actor.offload_weight, actor.offload_grad, actor.offload_optimizer)

    @forward_step
    def compute_values(self, shard: RolloutBatch) -> torch.Tensor:
        """Values ``[b, R]`` of this rank's shard under the current value model."""
        values, _ = self.engine.compute_logprobs(shard, self.algorithm.logprob_forward_micro_batch_size)
        return values

    @train_step
    def update(self, shard: RolloutBatch, minibatch_tokens: list[int]) -> dict[str, float]:
        """``n_minibatches`` optimizer steps on this rank's shard (``values`` = old values,
        ``returns`` = targets); the means over the steps, as ``critic/...``."""
        if shard.values is None or shard.returns is None:
            raise ValueError("the critic update needs the batch's old values and returns")
        history = []
        for chunk, tokens in zip(shard.split(self.algorithm.n_minibatches), minibatch_tokens):
            mbs = micro_batches(chunk, self.algorithm.training_batch_size_per_gpu, self.max_tokens_per_mbs)
            history.append(self.engine.train_minibatch(mbs, self.loss_fn, max(tokens, 1)))
        keys = history[0].keys() if history else []
        return {f"critic/{k}": sum(h[k] for h in history) / len(history) for k in keys}

    def save_checkpoint(self, path: str) -> None:
        save_engine(self.engine, path, self.rank)

    def load_checkpoint(self, path: str) -> None:
        load_engine(self.engine, path, self.rank)

    def offload(self) -> None:
        weights, grads, optimizer = self.offload_flags
        self.engine.offload(weights=weights, grads=grads, optimizer=optimizer)

    def onload(self) -> None:
        self.engine.onload()
