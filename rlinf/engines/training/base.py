"""The training-engine interface every training backend (FSDP2, Megatron) implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch

from rlinf.data.rollout_batch import RolloutBatch

#: ``loss_fn(logprobs [b, R], entropy [b, R] or None, micro_batch) -> (loss, metrics)``; the engine
#: calls it once per micro-batch, backpropagates ``loss`` and steps the optimizer per minibatch.
LossFn = Callable[[torch.Tensor, torch.Tensor | None, RolloutBatch], tuple[torch.Tensor, dict]]


class TrainingEngine(ABC):
    """Holds the trained model and its optimizer on this worker's devices."""

    @abstractmethod
    def compute_logprobs(self, batch: RolloutBatch, micro_batch_size: int,
                         with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs ``[B, R]`` of ``batch.response_ids`` under the current weights (no grad)."""

    @abstractmethod
    def train_minibatch(self, micro_batches: list[RolloutBatch], loss_fn: LossFn,
                        num_tokens_total: int) -> dict[str, float]:
        """One optimizer step over ``micro_batches`` (gradient accumulation); returns metrics
        including ``grad_norm`` and ``lr``."""

    @abstractmethod
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Unsharded weights with HF names on CPU, for weight sync and export (collective:
        every rank of the group calls it; rank 0 gets the tensors)."""

    @abstractmethod
    def save_checkpoint(self, path: str) -> None:
        """Model, optimizer and LR-schedule state for exact resume (collective)."""

    @abstractmethod
    def load_checkpoint(self, path: str) -> None:
        """Restore what :meth:`save_checkpoint` wrote (collective)."""

    def offload(self, weights: bool = True, grads: bool = True, optimizer: bool = True) -> None:
        """Move the named state to CPU between phases (collocated mode); default: nothing."""

    def onload(self) -> None:
        """Undo :meth:`offload`."""
