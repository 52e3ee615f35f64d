"""Megatron weights -> one HF state dict on global rank 0 (for rollout weight sync and export).

Data-parallel replica 0 does the work; the other replicas hold the same weights and skip it.

1. Tensor parallel: within each pipeline stage, every tensor's TP shards are gathered to the
   stage's tensor rank 0 (one tensor at a time, so the device holds at most ``tp`` shards of one
   tensor extra) and moved to host memory.
2. Pipeline parallel: stage by stage, the stage's tensor rank 0 sends its shards (names and
   shapes first, then the tensors one by one) to global rank 0 over the pipeline group.
3. Rank 0 merges the ``{(pp_rank, tp_rank): state_dict}`` shards with the converter's layout
   (:func:`rlinf.engines.training.megatron.layout.megatron_shards_to_hf`): grouped QKV split back
   into q / k / v, each TP shard's ``[gate; up]`` back into gate_proj / up_proj, vocabulary
   padding cut, layers renumbered globally. The result is what ``convert.megatron_to_hf`` writes
   for the same weights.

The merged dict then travels to the rollout workers over the weight link, which packs it into
buckets (:mod:`rlinf.scheduler.transfer`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from rlinf.engines.training.megatron.layout import megatron_shards_to_hf
from rlinf.engines.training.megatron.runtime import ParallelLayout


def _local_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    # ``*._extra_state`` entries are not weights
    return {k: v.detach() for k, v in module.state_dict().items() if isinstance(v, torch.Tensor)}


def _gather_tp(local: dict[str, torch.Tensor], layout: ParallelLayout) -> dict[int, dict[str, torch.Tensor]]:
    """This stage's shards ``{tp_rank: {name: host tensor}}`` on tensor rank 0 (``{}`` elsewhere)."""
    # lazy: optional extra (megatron)
    from megatron.core import parallel_state as ps

    if layout.tp == 1:
        return {0: {k: v.cpu() for k, v in local.items()}}
    group = ps.get_tensor_model_parallel_group()
    out: dict[int, dict[str, torch.Tensor]] = {r: {} for r in range(layout.tp)} if layout.tp_rank == 0 else {}
    for name in sorted(local):
        tensor = local[name].contiguous()
        parts = [torch.empty_like(tensor) for _ in range(layout.tp)] if layout.tp_rank == 0 else None
        dist.gather(tensor, parts, group=group, group_dst=0)
        if parts is not None:
            for r, part in enumerate(parts):
                out[r][name] = part.cpu()
    return out


def _send_stages(stage_shards: dict[int, dict[str, torch.Tensor]], layout: ParallelLayout,
                 device: torch.device) -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """Every stage's shards on pipeline rank 0 (``{}`` elsewhere); tensor-rank-0 ranks only."""
    # lazy: optional extra (megatron)
    from megatron.core import parallel_state as ps

    if layout.pp == 1:
        return {(0, t): sd for t, sd in stage_shards.items()}
    group = ps.get_pipeline_model_parallel_group()
    out: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
    for stage in range(layout.pp):
        mine = stage == layout.pp_rank
        specs = [[(t, n, tuple(x.shape), x.dtype) for t, sd in stage_shards.items() for n, x in sd.items()]
                 if mine else None]
        dist.broadcast_object_list(specs, group=group, group_src=stage, device=device)
        if stage == 0:
            if layout.pp_rank == 0:
                out.update({(0, t): sd for t, sd in stage_shards.items()})
            continue
        for t, name, shape, dtype in specs[0]:
            if mine:
                dist.send(stage_shards[t][name].to(device), group=group, group_dst=0)
            elif layout.pp_rank == 0:
                buffer = torch.empty(shape, dtype=dtype, device=device)
                dist.recv(buffer, group=group, group_src=stage)
                out.setdefault((stage, t), {})[name] = buffer.cpu()
    return out


def gather_hf_state(module: torch.nn.Module, layout: ParallelLayout, hf_config: Any,
                    layers_per_stage: list[int], include_tied_lm_head: bool,
                    device: torch.device) -> dict[str, torch.Tensor]:
    """HF-named full weights on global rank 0 (``{}`` on every other rank). Collective over the
    ranks of data-parallel replica 0; every rank may call it."""
    if layout.dp_rank != 0:
        return {}
    stage_shards = _gather_tp(_local_tensors(module), layout)
    if layout.tp_rank != 0:
        return {}
    shards = _send_stages(stage_shards, layout, device)
    if layout.pp_rank != 0:
        return {}
    return megatron_shards_to_hf(shards, hf_config, layout.tp, layout.pp, layers_per_stage,
                                 include_tied_lm_head=include_tied_lm_head)
