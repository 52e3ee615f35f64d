"""Construction steps of :class:`rlinf.engines.training.megatron.engine.MegatronEngine`: the HF
config and its agreement with ``actor.model``, the weight source (converted or cached), the
pipeline stage's ``GPTModel``, Megatron DDP and the schedule hooks, and per-rank checkpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlinf.config.actor import ActorConfig
from rlinf.engines.training.megatron.checkpoint_io import load_shard
from rlinf.engines.training.megatron.convert import checkpoint_layout, read_hf_config
from rlinf.engines.training.megatron.hf_cache import converted_checkpoint
from rlinf.engines.training.megatron.layout import ConversionError, check_parallel_sizes, family_of
from rlinf.engines.training.megatron.model import build_gpt_model
from rlinf.engines.training.megatron.runtime import ParallelLayout

ENGINE_STATE_FILE = "megatron_engine_state.json"


def load_hf_config(model_path: str, cfg: ActorConfig):
    """The HF config of ``model_path``, checked against the architecture keys of ``actor.model``
    and against the parallel sizes."""
    # lazy: transformers (~2 s) only when the model is built; importing the engine does not
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=cfg.model.trust_remote_code)
    try:
        family = family_of(hf_config)
    except ConversionError as exc:
        raise ValueError(f"actor.training_backend: megatron cannot build {model_path}: {exc}") from None
    m = cfg.model.llm
    expected = {"activation": "swiglu", "normalization": "rmsnorm", "position_embedding_type": "rope",
                "add_bias_linear": False, "add_qkv_bias": family.qkv_bias}
    for key, value in expected.items():
        given = getattr(m, key)
        if given is None:  # add_qkv_bias null: the architecture's
            continue
        if (given.lower() if isinstance(given, str) else given) != value:
            raise ValueError(f"actor.model.{key}={given!r} does not match {model_path} ({value}); the "
                             "Megatron model is built from the HF architecture")
    try:
        check_parallel_sizes(hf_config, m.tensor_model_parallel_size, m.pipeline_model_parallel_size)
    except ConversionError as exc:
        raise ValueError(f"actor.model.tensor_model_parallel_size / pipeline_model_parallel_size do not "
                         f"fit {model_path}: {exc}") from None
    return hf_config


def weights_folder(model_path: str, cfg: ActorConfig, device: torch.device) -> str:
    """The converted checkpoint to load: ``actor.model.megatron_checkpoint``, or ``model_path``
    converted by global rank 0 (cached; the other ranks wait and get its path)."""
    if cfg.model.llm.megatron_checkpoint is not None:
        return cfg.model.llm.megatron_checkpoint
    box: list[Any] = [None]
    if dist.get_rank() == 0:
        ck = cfg.megatron.ckpt_config()
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(max(1, ck.process_num))  # actor.megatron.ckpt.process_num
            box[0] = str(converted_checkpoint(
                ck.hf_model_path or model_path, ck.save_path, tp=cfg.model.llm.tensor_model_parallel_size,
                pp=cfg.model.llm.pipeline_model_parallel_size, name=ck.model))
        except Exception as exc:  # noqa: BLE001 - the other ranks must not wait for a path that never comes
            box[0] = exc
        finally:
            torch.set_num_threads(threads)
    dist.broadcast_object_list(box, src=0, device=device if device.type == "cuda" else None)
    if isinstance(box[0], Exception):
        raise RuntimeError(f"actor.megatron.use_hf_ckpt: converting {model_path} failed: {box[0]}") from box[0]
    return box[0]


def checkpoint_meta(folder: str, model_path: str, layout: ParallelLayout) -> dict[str, Any]:
    """Sizes of the converted checkpoint (layers per stage, vocabulary), checked against the
    actor's parallel layout."""
    meta = checkpoint_layout(folder, read_hf_config(model_path))
    if (int(meta["tp"]), int(meta["pp"])) != (layout.tp, layout.pp):
        raise ValueError(f"the Megatron checkpoint {folder} has tp={meta['tp']}, pp={meta['pp']}; the actor "
                         f"runs tensor_model_parallel_size={layout.tp}, pipeline_model_parallel_size="
                         f"{layout.pp} (convert it for those sizes)")
    return meta


def transformer_overrides(cfg: ActorConfig, params_dtype: torch.dtype, layout: ParallelLayout) -> dict[str, Any]:
    """``TransformerConfig`` fields from ``actor.model`` / ``actor.optim``."""
    m, o = cfg.model.llm, cfg.optim
    full = m.recompute_granularity == "full"
    return dict(
        params_dtype=params_dtype, bf16=o.bf16, fp16=o.fp16,
        pipeline_dtype=params_dtype if layout.pp > 1 else None,
        sequence_parallel=m.sequence_parallel and layout.tp > 1,
        recompute_granularity=m.recompute_granularity,
        recompute_method=m.recompute_method if full else None,
        recompute_num_layers=m.recompute_num_layers if full else None,
        apply_rope_fusion=m.apply_rope_fusion, bias_dropout_fusion=m.bias_dropout_fusion,
        persist_layer_norm=m.persist_layer_norm, bias_activation_fusion=m.bias_activation_fusion,
        attention_softmax_in_fp32=m.attention_softmax_in_fp32, batch_p2p_comm=m.batch_p2p_comm,
        variable_seq_lengths=m.variable_seq_lengths,
        gradient_accumulation_fusion=m.gradient_accumulation_fusion,
        moe_token_dispatcher_type=m.moe_token_dispatcher_type,
        # weights are initialised (then overwritten by the checkpoint) even so: megatron marks
        # tensor-parallel weights (``tensor_model_parallel``) only while initialising them, and
        # the gradient norm and the optimizer rely on those marks
        use_cpu_initialization=m.use_cpu_initialization,
    )


def build_stage(hf_config, cfg: ActorConfig, layout: ParallelLayout, meta: dict[str, Any],
                params_dtype: torch.dtype, folder: str, device: torch.device) -> torch.nn.Module:
    """This rank's pipeline stage of ``GPTModel`` with its checkpoint shard loaded, on ``device``."""
    model = build_gpt_model(hf_config, tp=layout.tp, pp=layout.pp, pp_rank=layout.pp_rank,
                            vocab_size_padded=int(meta["padded_vocab_size"]),
                            overrides=transformer_overrides(cfg, params_dtype, layout),
                            layers_per_stage=meta["layers_per_stage"])
    model.load_state_dict(load_shard(folder, layout.tp_rank, layout.pp_rank), strict=True)
    return model.to(device)


def wrap_ddp(module: torch.nn.Module, cfg: ActorConfig):
    """Megatron DDP (gradient buffers in fp32, reduced across data-parallel replicas)."""
    # lazy: optional extra (megatron)
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    o = cfg.optim
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=o.overlap_grad_reduce,
        overlap_param_gather=o.overlap_param_gather, use_distributed_optimizer=o.use_distributed_optimizer,
        bucket_size=cfg.megatron.ddp_bucket_size)
    return DistributedDataParallel(config=module.config, ddp_config=ddp_config, module=module)


def connect_schedule_hooks(config, ddp_model, optimizer, cfg: ActorConfig) -> None:
    """What megatron's schedules call: accumulate without reducing between micro-batches, reduce
    (and sync sequence-parallel norms / tied embeddings) after the last, scale fp16 losses."""
    # lazy: optional extra (megatron)
    from megatron.core.distributed import finalize_model_grads

    config.no_sync_func = ddp_model.no_sync
    if cfg.optim.overlap_grad_reduce:
        config.grad_sync_func = ddp_model.start_grad_sync
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss


def _rank_file(path: str, layout: ParallelLayout) -> Path:
    return Path(path) / f"rank_tp{layout.tp_rank:02d}_pp{layout.pp_rank:03d}_dp{layout.dp_rank:03d}.pt"


def save_rank_state(path: str, layout: ParallelLayout, state: dict[str, Any]) -> None:
    """Collective: every rank writes its file; rank 0 writes the layout."""
    os.makedirs(path, exist_ok=True)
    torch.save(state, _rank_file(path, layout))
    if dist.get_rank() == 0:
        sizes = {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp, "step": state["step"]}
        Path(path, ENGINE_STATE_FILE).write_text(json.dumps(sizes))
    dist.barrier()


def load_rank_state(path: str, layout: ParallelLayout) -> dict[str, Any]:
    """This rank's file of :func:`save_rank_state` (the layout must be the same)."""
    meta_file = Path(path, ENGINE_STATE_FILE)
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path} is not a MegatronEngine checkpoint (no {ENGINE_STATE_FILE})")
    saved = json.loads(meta_file.read_text())
    now = {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp}
    if {k: saved[k] for k in now} != now:
        raise ValueError(f"{path} was saved with tp/pp/dp {saved}; resuming needs the same layout, this "
                         f"run has {now}")
    return torch.load(_rank_file(path, layout), map_location="cpu", weights_only=True)
