"""megatron-core ``GPTModel`` for an HF decoder config (Qwen2 / Qwen2.5, Llama, Qwen3).

:func:`transformer_config_from_hf` maps the HF config onto a ``TransformerConfig`` (RMSNorm,
SwiGLU via ``gated_linear_unit`` + SiLU, no linear biases except Qwen2's QKV bias, Qwen3's QK
norm, GQA, explicit ``head_dim`` as ``kv_channels``, dropout off, fusions off so the torch
implementations run without apex / transformer-engine). :func:`build_gpt_model` builds one
pipeline stage of ``GPTModel`` with the local (non-TE) layer spec, RoPE with the config's
theta, and tied or untied output weights. Both need ``megatron.core.parallel_state`` to be
initialised by the caller (``initialize_model_parallel(tp, pp)``).

``overrides`` are extra ``TransformerConfig`` fields applied last (precision, recompute,
sequence parallelism, ...), so the actor backend can pass its keys unchanged.

Checkpoints written by :mod:`rlinf.engines.training.megatron.convert` load into these models with
``model.load_state_dict(shard, strict=True)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F

from rlinf.engines.training.megatron.layout import (
    ConversionError,
    config_value,
    family_of,
    model_dims,
)
from rlinf.engines.training.megatron.layout import (
    layers_per_stage as default_layers_per_stage,
)

__all__ = ["build_gpt_model", "rope_theta", "transformer_config_from_hf"]


def rope_theta(hf_config: Any) -> float:
    """RoPE base of an HF config (``rope_parameters`` of transformers 5 or legacy ``rope_theta``);
    :class:`ConversionError` for RoPE scaling, which the converter does not map.

    >>> rope_theta({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    1000000.0
    """
    params = config_value(hf_config, "rope_parameters") or {}
    scaling = config_value(hf_config, "rope_scaling") or {}
    rope_type = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type")
    if rope_type not in (None, "default"):
        raise ConversionError(f"rope type {rope_type!r} is not supported (only default RoPE)")
    theta = params.get("rope_theta", config_value(hf_config, "rope_theta", 10000.0))
    return float(theta)


def _pipeline_layout(counts: list[int]) -> list[list[str]] | None:
    """megatron's ``pipeline_model_parallel_layout`` for uneven stages (None when even)."""
    if len(set(counts)) <= 1:
        return None
    stages = [["decoder"] * n for n in counts]
    stages[0].insert(0, "embedding")
    stages[-1].append("loss")
    return stages


def transformer_config_from_hf(
    hf_config: Any,
    tp: int,
    pp: int,
    overrides: dict[str, Any] | None = None,
    layers_per_stage: Iterable[int] | None = None,
):
    """A megatron ``TransformerConfig`` equivalent to ``hf_config`` split over ``tp`` x ``pp``.

    Weights are fp32 and initialised on the CPU (``use_cpu_initialization``) unless
    ``overrides`` say otherwise; ``pipeline_dtype`` follows ``params_dtype``. Uneven
    ``layers_per_stage`` become a ``pipeline_model_parallel_layout``.
    """
    # lazy: optional extra (megatron)
    from megatron.core.transformer.transformer_config import TransformerConfig

    spec, dims = family_of(hf_config), model_dims(hf_config)
    counts = default_layers_per_stage(dims.num_layers, pp, layers_per_stage)
    fields: dict[str, Any] = dict(
        num_layers=dims.num_layers,
        hidden_size=dims.hidden,
        ffn_hidden_size=dims.ffn,
        num_attention_heads=dims.heads,
        num_query_groups=dims.kv_heads,
        kv_channels=dims.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=float(config_value(hf_config, "rms_norm_eps", 1e-6)),
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=spec.qkv_bias,
        qk_layernorm=spec.qk_norm,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        attention_softmax_in_fp32=True,
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        pipeline_model_parallel_layout=_pipeline_layout(counts),
        params_dtype=torch.float32,
        use_cpu_initialization=True,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        persist_layer_norm=False,
        gradient_accumulation_fusion=False,
    )
    fields.update(overrides or {})
    if pp > 1 and fields.get("pipeline_dtype") is None:
        fields["pipeline_dtype"] = fields["params_dtype"]
    return TransformerConfig(**fields)


def build_gpt_model(
    hf_config: Any,
    *,
    tp: int,
    pp: int,
    pp_rank: int,
    vocab_size_padded: int,
    overrides: dict[str, Any] | None = None,
    layers_per_stage: Iterable[int] | None = None,
    parallel_output: bool = True,
):
    """Pipeline stage ``pp_rank`` of a ``GPTModel`` for ``hf_config`` (local layer spec).

    ``vocab_size_padded`` is the (TP-divisible) vocabulary of the embedding and output layer,
    e.g. ``layout.padded_vocab_size(vocab, tp)``. ``parallel_output=False`` makes the last stage
    gather logits over the TP group. The current ``parallel_state`` must match ``tp``, ``pp``
    and ``pp_rank``.
    """
    # lazy: optional extra (megatron)
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    current = (
        parallel_state.get_tensor_model_parallel_world_size(),
        parallel_state.get_pipeline_model_parallel_world_size(),
        parallel_state.get_pipeline_model_parallel_rank(),
    )
    if current != (tp, pp, pp_rank):
        raise ValueError(
            f"parallel_state has (tp, pp, pp_rank) = {current}, asked for {(tp, pp, pp_rank)}"
        )
    config = transformer_config_from_hf(hf_config, tp, pp, overrides, layers_per_stage)
    layer_spec = get_gpt_layer_local_spec(
        qk_layernorm=config.qk_layernorm, normalization=config.normalization
    )
    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec,
        vocab_size=vocab_size_padded,
        max_sequence_length=int(config_value(hf_config, "max_position_embeddings", 4096)),
        pre_process=pp_rank == 0,
        post_process=pp_rank == pp - 1,
        parallel_output=parallel_output,
        share_embeddings_and_output_weights=model_dims(hf_config).tied,
        position_embedding_type="rope",
        rotary_base=rope_theta(hf_config),
    )
