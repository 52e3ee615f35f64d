"""Rollout batches as Megatron ``GPTModel`` inputs, and the batch a data-parallel replica shares.

``GPTModel.forward(input_ids, position_ids, attention_mask)`` takes a boolean mask
``[b, 1, s, s]`` that is True where attention is *blocked*: here causal and key padding (left
padded prompts, right padded responses). Rotary embeddings in megatron-core ignore
``position_ids`` and use positions ``0 .. s-1``; attention scores depend only on position
differences, so left padding leaves the real tokens' logits unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.common import batch_to


@dataclass
class ModelInputs:
    """One micro-batch, on the device, in the layout ``GPTModel`` takes."""

    input_ids: torch.Tensor       #: [b, s]
    position_ids: torch.Tensor    #: [b, s]
    attention_mask: torch.Tensor  #: [b, 1, s, s], True = blocked
    batch: RolloutBatch           #: the micro-batch itself (tensors on the device)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.input_ids.shape)


def padded_length(length: int, multiple: int) -> int:
    """``length`` rounded up to a multiple of ``multiple``.

    >>> padded_length(13, 4), padded_length(12, 4), padded_length(5, 1)
    (16, 12, 5)
    """
    return -(-length // multiple) * multiple


def model_inputs(mb: RolloutBatch, pad_token_id: int, device: torch.device, *, seq_multiple: int = 1,
                 seq_length: int | None = None) -> ModelInputs:
    """Prompt + response of ``mb`` right-padded to ``seq_length`` (default: its own length) and
    then to a multiple of ``seq_multiple`` (the tensor-parallel size under sequence parallelism).

    >>> b = RolloutBatch.from_token_lists([[5, 6], [7]], [[8], [9, 9]], pad_token_id=0)
    >>> x = model_inputs(b, 0, torch.device("cpu"), seq_multiple=4)
    >>> x.shape, x.input_ids[1].tolist()
    ((2, 4), [0, 7, 9, 9])
    >>> x.attention_mask[1, 0].int().tolist()    # row = query; 1 = blocked (pad key or future)
    [[1, 1, 1, 1], [1, 0, 1, 1], [1, 0, 0, 1], [1, 0, 0, 0]]
    """
    input_ids, attention_mask, position_ids = mb.model_inputs()
    length = padded_length(max(seq_length or 0, input_ids.shape[1]), seq_multiple)
    extra = length - input_ids.shape[1]
    if extra:
        pad = torch.nn.functional.pad
        input_ids = pad(input_ids, (0, extra), value=pad_token_id)
        attention_mask = pad(attention_mask, (0, extra), value=0)
        position_ids = pad(position_ids, (0, extra), value=0)
    keys = attention_mask.to(device=device, dtype=torch.bool)
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    blocked = ~(causal.unsqueeze(0) & keys.unsqueeze(1))
    return ModelInputs(input_ids.to(device), position_ids.to(device), blocked.unsqueeze(1),
                       batch_to(mb, device))


@dataclass
class ReplicaBatch:
    """The union of the shards of one model-parallel group, and where this rank's shard sits."""

    batch: RolloutBatch
    start: int
    stop: int
    response_width: int  #: this rank's own response width (the union may be wider)


def gather_replica_batch(shard: RolloutBatch, group, pad_token_id: int) -> ReplicaBatch:
    """All ranks of a model-parallel group (tensor x pipeline ranks of one data-parallel replica)
    compute on the same samples: every rank brings its shard, all get the concatenation in group
    rank order. A group of one returns the shard itself."""
    size = dist.get_world_size(group) if group is not None else 1
    if size == 1:
        return ReplicaBatch(shard, 0, shard.batch_size, shard.response_ids.shape[1])
    shards: list = [None] * size
    dist.all_gather_object(shards, shard, group=group)
    me = dist.get_rank(group)
    start = sum(s.batch_size for s in shards[:me])
    parts = [s for s in shards if s.batch_size]
    union = RolloutBatch.concat(parts, pad_token_id) if parts else shard
    return ReplicaBatch(union, start, start + shard.batch_size, shard.response_ids.shape[1])
