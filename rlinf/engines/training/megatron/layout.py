"""HF <-> Megatron weight layout: family specs, name mapping, QKV / fc1 packing, TP and PP splits.

Pure tensor functions (no megatron import, no I/O). A Hugging Face state dict of a supported
decoder family (Qwen2 / Qwen2.5, Llama, Qwen3) maps onto megatron-core ``GPTModel`` state dicts
built with the local layer spec, one per (pipeline stage, tensor rank):

* ``q_proj`` / ``k_proj`` / ``v_proj`` -> ``linear_qkv`` in megatron's grouped layout: for every
  query group (KV head) its query heads, then its key head, then its value head, along dim 0.
  TP ranks take contiguous groups, so the packed tensor splits evenly along dim 0.
* ``gate_proj`` / ``up_proj`` -> ``linear_fc1``: each TP shard is ``[gate_r; up_r]``.
* column-parallel (qkv, fc1, word embeddings, output layer) split dim 0; row-parallel
  (``linear_proj``, ``linear_fc2``) split dim 1; norms are replicated.
* the vocabulary is zero-padded to a multiple of ``divisible_by * tp`` and cut back on the way
  home; layers are numbered locally on each pipeline stage.

``docs/checkpoint_converter.md`` has the full mapping table.

>>> cfg = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
...        "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
...        "vocab_size": 10, "tie_word_embeddings": True}
>>> family_of(cfg).name, layers_per_stage(3, 2), padded_vocab_size(10, 2, divisible_by=4)
('qwen2', [2, 1], 16)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import torch

__all__ = [
    "ConversionError",
    "FamilySpec",
    "ModelDims",
    "check_parallel_sizes",
    "expected_hf_shapes",
    "family_of",
    "hf_to_megatron_shards",
    "hf_to_megatron_stage",
    "layers_per_stage",
    "megatron_shards_to_hf",
    "model_dims",
    "pack_qkv",
    "padded_vocab_size",
    "unpack_qkv",
]


class ConversionError(ValueError):
    """A model, config or parallel layout the converter cannot handle; the message says why."""


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    """What distinguishes a supported HF decoder family in megatron's terms."""

    name: str
    architecture: str
    qkv_bias: bool
    qk_norm: bool


FAMILIES = {
    "qwen2": FamilySpec("qwen2", "Qwen2ForCausalLM", qkv_bias=True, qk_norm=False),
    "llama": FamilySpec("llama", "LlamaForCausalLM", qkv_bias=False, qk_norm=False),
    "qwen3": FamilySpec("qwen3", "Qwen3ForCausalLM", qkv_bias=False, qk_norm=True),
}


def config_value(hf_config: Any, key: str, default: Any = None) -> Any:
    """``key`` of an HF config object or of its ``config.json`` dict."""
    if isinstance(hf_config, Mapping):
        return hf_config.get(key, default)
    return getattr(hf_config, key, default)


def family_of(hf_config: Any) -> FamilySpec:
    """The :class:`FamilySpec` of an HF config (object or dict), from ``architectures`` /
    ``model_type``; :class:`ConversionError` for anything else or an unsupported option."""
    archs = config_value(hf_config, "architectures") or []
    by_arch = {spec.architecture: spec for spec in FAMILIES.values()}
    spec = next((by_arch[a] for a in archs if a in by_arch), None)
    if spec is None and not archs:
        spec = FAMILIES.get(config_value(hf_config, "model_type"))
    if spec is None:
        names = ", ".join(s.architecture for s in FAMILIES.values())
        found = archs or config_value(hf_config, "model_type")
        raise ConversionError(f"unsupported architecture {found!r} (supported: {names})")
    if spec.name != "qwen2" and config_value(hf_config, "attention_bias", False):
        raise ConversionError(
            f"{spec.architecture} with attention_bias=True is not supported "
            "(its o_proj bias has no slot in megatron's layout without add_bias_linear)"
        )
    if config_value(hf_config, "mlp_bias", False):
        raise ConversionError(f"{spec.architecture} with mlp_bias=True is not supported")
    if config_value(hf_config, "hidden_act", "silu") != "silu":
        act = config_value(hf_config, "hidden_act")
        raise ConversionError(f"hidden_act {act!r} is not supported (only silu / SwiGLU)")
    if config_value(hf_config, "use_sliding_window", False):
        raise ConversionError("use_sliding_window=True is not supported")
    return spec


@dataclasses.dataclass(frozen=True)
class ModelDims:
    """The sizes the layout needs, read once from the HF config."""

    num_layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool


def model_dims(hf_config: Any) -> ModelDims:
    """:class:`ModelDims` of an HF config (object or ``config.json`` dict)."""
    heads = int(config_value(hf_config, "num_attention_heads"))
    hidden = int(config_value(hf_config, "hidden_size"))
    return ModelDims(
        num_layers=int(config_value(hf_config, "num_hidden_layers")),
        hidden=hidden,
        ffn=int(config_value(hf_config, "intermediate_size")),
        heads=heads,
        kv_heads=int(config_value(hf_config, "num_key_value_heads") or heads),
        head_dim=int(config_value(hf_config, "head_dim") or hidden // heads),
        vocab=int(config_value(hf_config, "vocab_size")),
        tied=bool(config_value(hf_config, "tie_word_embeddings", False)),
    )


def layers_per_stage(num_layers: int, pp: int, explicit: Iterable[int] | None = None) -> list[int]:
    """Decoder layers on each of ``pp`` pipeline stages.

    Default: as even as possible, the first ``num_layers % pp`` stages taking one more.
    ``explicit`` gives the counts per stage (each >= 1, summing to ``num_layers``).

    >>> layers_per_stage(5, 2), layers_per_stage(4, 2), layers_per_stage(5, 2, [1, 4])
    ([3, 2], [2, 2], [1, 4])
    """
    if pp < 1:
        raise ConversionError(f"pp must be >= 1, got {pp}")
    if explicit is not None:
        counts = [int(n) for n in explicit]
        if len(counts) != pp or min(counts) < 1 or sum(counts) != num_layers:
            raise ConversionError(
                f"layers per stage {counts} must be {pp} counts >= 1 summing to the "
                f"model's {num_layers} layers"
            )
        return counts
    if pp > num_layers:
        raise ConversionError(f"pp {pp} is larger than the model's {num_layers} layers")
    base, extra = divmod(num_layers, pp)
    return [base + (1 if stage < extra else 0) for stage in range(pp)]


def padded_vocab_size(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron's padded vocabulary: the next multiple of ``divisible_by * tp``.

    ``divisible_by=0`` means no padding (then ``vocab`` must divide by ``tp``).

    >>> padded_vocab_size(151936, 2), padded_vocab_size(100, 1), padded_vocab_size(100, 4, 0)
    (152064, 128, 100)
    """
    if divisible_by == 0:
        if vocab % tp:
            raise ConversionError(
                f"vocab_size {vocab} is not divisible by tp {tp} (and vocab padding is off)"
            )
        return vocab
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


def check_parallel_sizes(
    hf_config: Any, tp: int, pp: int, stage_layers: Iterable[int] | None = None
) -> list[int]:
    """Raise :class:`ConversionError` unless the model splits over ``tp`` x ``pp``; return the
    layers per stage."""
    dims = model_dims(hf_config)
    if tp < 1:
        raise ConversionError(f"tp must be >= 1, got {tp}")
    for what, size in (
        ("num_attention_heads", dims.heads),
        ("num_key_value_heads", dims.kv_heads),
        ("intermediate_size", dims.ffn),
    ):
        if size % tp:
            raise ConversionError(f"{what} {size} is not divisible by tp {tp}")
    if dims.heads % dims.kv_heads:
        raise ConversionError(
            f"num_attention_heads {dims.heads} is not a multiple of num_key_value_heads "
            f"{dims.kv_heads}"
        )
    return layers_per_stage(dims.num_layers, pp, stage_layers)


def expected_hf_shapes(hf_config: Any) -> dict[str, tuple[int, ...]]:
    """Every HF tensor name of the model with the shape its config implies (``lm_head.weight``
    included even when tied: a tied checkpoint may or may not store it)."""
    spec, d = family_of(hf_config), model_dims(hf_config)
    shapes = {"model.embed_tokens.weight": (d.vocab, d.hidden), "model.norm.weight": (d.hidden,)}
    shapes["lm_head.weight"] = (d.vocab, d.hidden)
    q_rows, kv_rows = d.heads * d.head_dim, d.kv_heads * d.head_dim
    for i in range(d.num_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (d.hidden,)
        shapes[p + "post_attention_layernorm.weight"] = (d.hidden,)
        shapes[p + "self_attn.q_proj.weight"] = (q_rows, d.hidden)
        shapes[p + "self_attn.k_proj.weight"] = (kv_rows, d.hidden)
        shapes[p + "self_attn.v_proj.weight"] = (kv_rows, d.hidden)
        shapes[p + "self_attn.o_proj.weight"] = (d.hidden, q_rows)
        if spec.qkv_bias:
            shapes[p + "self_attn.q_proj.bias"] = (q_rows,)
            shapes[p + "self_attn.k_proj.bias"] = (kv_rows,)
            shapes[p + "self_attn.v_proj.bias"] = (kv_rows,)
        if spec.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (d.head_dim,)
            shapes[p + "self_attn.k_norm.weight"] = (d.head_dim,)
        shapes[p + "mlp.gate_proj.weight"] = (d.ffn, d.hidden)
        shapes[p + "mlp.up_proj.weight"] = (d.ffn, d.hidden)
        shapes[p + "mlp.down_proj.weight"] = (d.hidden, d.ffn)
    return shapes


def pack_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """Megatron's grouped QKV: per KV group, its query rows, then its key rows, then value rows.

    >>> q, k, v = torch.arange(4.0), torch.tensor([10.0]), torch.tensor([20.0])  # 4 q heads, d=1
    >>> pack_qkv(q, k, v, kv_heads=1).tolist()
    [0.0, 1.0, 2.0, 3.0, 10.0, 20.0]
    """
    rest = q.shape[1:]
    groups = [t.reshape(kv_heads, -1, *rest) for t in (q, k, v)]
    return torch.cat(groups, dim=1).reshape(-1, *rest)


def unpack_qkv(
    qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_qkv` (full, unsplit tensor)."""
    rest = qkv.shape[1:]
    q_rows = heads // kv_heads * head_dim
    grouped = qkv.reshape(kv_heads, q_rows + 2 * head_dim, *rest)
    q, k, v = torch.split(grouped, [q_rows, head_dim, head_dim], dim=1)
    return tuple(t.reshape(-1, *rest) for t in (q, k, v))  # type: ignore[return-value]


def _chunks(tensor: torch.Tensor, tp: int, dim: int) -> list[torch.Tensor]:
    return [c.clone() for c in torch.chunk(tensor, tp, dim=dim)]


def _pad_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    pad = tensor.new_zeros((rows - tensor.shape[0], *tensor.shape[1:]))
    return torch.cat([tensor, pad], dim=0)


_LINEARS = (
    "self_attention.linear_qkv",
    "self_attention.linear_proj",
    "mlp.linear_fc1",
    "mlp.linear_fc2",
)


def hf_to_megatron_stage(
    hf_state: Mapping[str, torch.Tensor],
    hf_config: Any,
    tp: int,
    pp: int,
    pp_rank: int,
    layers_per_stage: Iterable[int] | None = None,
    divisible_by: int = 128,
) -> dict[int, dict[str, Any]]:
    """The megatron state dicts ``{tp_rank: state_dict}`` of pipeline stage ``pp_rank``.

    ``hf_state`` may be any mapping (e.g. a lazy one over safetensors files): only this stage's
    tensors are read. Tensors keep their dtype; ``*._extra_state`` entries are ``None``, as in
    ``GPTModel.state_dict()`` with the local spec.
    """
    spec, d = family_of(hf_config), model_dims(hf_config)
    counts = check_parallel_sizes(hf_config, tp, pp, layers_per_stage)
    shards: list[dict[str, Any]] = [{} for _ in range(tp)]

    def put(name: str, parts: list[Any]) -> None:
        for rank in range(tp):
            shards[rank][name] = parts[rank]

    def rep(tensor: torch.Tensor) -> list[torch.Tensor]:
        return [tensor.clone() for _ in range(tp)]

    vocab_rows = padded_vocab_size(d.vocab, tp, divisible_by)
    if pp_rank == 0:
        embed = _pad_rows(hf_state["model.embed_tokens.weight"], vocab_rows)
        put("embedding.word_embeddings.weight", _chunks(embed, tp, 0))
    first = sum(counts[:pp_rank])
    for local in range(counts[pp_rank]):
        h, m = f"model.layers.{first + local}.", f"decoder.layers.{local}."
        put(m + "input_layernorm.weight", rep(hf_state[h + "input_layernorm.weight"]))
        put(m + "pre_mlp_layernorm.weight", rep(hf_state[h + "post_attention_layernorm.weight"]))
        kinds = ["weight", "bias"] if spec.qkv_bias else ["weight"]
        for kind in kinds:
            q, k, v = (hf_state[f"{h}self_attn.{x}_proj.{kind}"] for x in "qkv")
            qkv = pack_qkv(q, k, v, d.kv_heads)
            put(m + f"self_attention.linear_qkv.{kind}", _chunks(qkv, tp, 0))
        o_proj = hf_state[h + "self_attn.o_proj.weight"]
        put(m + "self_attention.linear_proj.weight", _chunks(o_proj, tp, 1))
        if spec.qk_norm:
            for x in "qk":
                norm = hf_state[f"{h}self_attn.{x}_norm.weight"]
                put(f"{m}self_attention.{x}_layernorm.weight", rep(norm))
        gates = torch.chunk(hf_state[h + "mlp.gate_proj.weight"], tp, dim=0)
        ups = torch.chunk(hf_state[h + "mlp.up_proj.weight"], tp, dim=0)
        put(m + "mlp.linear_fc1.weight", [torch.cat([g, u], dim=0) for g, u in zip(gates, ups)])
        put(m + "mlp.linear_fc2.weight", _chunks(hf_state[h + "mlp.down_proj.weight"], tp, 1))
        for linear in _LINEARS:
            put(m + linear + "._extra_state", [None] * tp)
    if pp_rank == pp - 1:
        put("decoder.final_layernorm.weight", rep(hf_state["model.norm.weight"]))
        if not d.tied or pp > 1:  # tied + PP=1: the output layer reuses the embedding
            head = hf_state["model.embed_tokens.weight" if d.tied else "lm_head.weight"]
            put("output_layer.weight", _chunks(_pad_rows(head, vocab_rows), tp, 0))
        put("output_layer._extra_state", [None] * tp)
    return dict(enumerate(shards))


def hf_to_megatron_shards(
    hf_state: Mapping[str, torch.Tensor],
    hf_config: Any,
    tp: int,
    pp: int,
    layers_per_stage: Iterable[int] | None = None,
    divisible_by: int = 128,
) -> dict[tuple[int, int], dict[str, Any]]:
    """All megatron state dicts, keyed ``(pp_rank, tp_rank)``; see :func:`hf_to_megatron_stage`.

    >>> cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4, "intermediate_size": 4,
    ...        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
    ...        "vocab_size": 6}
    >>> hf = {k: torch.randn(s) for k, s in expected_hf_shapes(cfg).items()}
    >>> shards = hf_to_megatron_shards(hf, cfg, tp=2, pp=2, divisible_by=1)
    >>> sorted(shards), tuple(shards[1, 0]["output_layer.weight"].shape)
    ([(0, 0), (0, 1), (1, 0), (1, 1)], (3, 4))
    >>> back = megatron_shards_to_hf(shards, cfg, tp=2, pp=2)
    >>> all(torch.equal(back[k], hf[k]) for k in hf) and sorted(back) == sorted(hf)
    True
    """
    counts = check_parallel_sizes(hf_config, tp, pp, layers_per_stage)
    out = {}
    for pp_rank in range(pp):
        stage = hf_to_megatron_stage(hf_state, hf_config, tp, pp, pp_rank, counts, divisible_by)
        out.update({(pp_rank, tp_rank): sd for tp_rank, sd in stage.items()})
    return out


def megatron_shards_to_hf(
    shards: Mapping[tuple[int, int], Mapping[str, Any]],
    hf_config: Any,
    tp: int,
    pp: int,
    layers_per_stage: Iterable[int] | None = None,
    include_tied_lm_head: bool = False,
) -> dict[str, torch.Tensor]:
    """Merge ``{(pp_rank, tp_rank): state_dict}`` back into an HF state dict (vocab unpadded).

    Tied models get no ``lm_head.weight`` unless ``include_tied_lm_head`` (HF's
    ``save_pretrained`` drops it; pass True when the source checkpoint stored it).
    """
    spec, d = family_of(hf_config), model_dims(hf_config)
    counts = check_parallel_sizes(hf_config, tp, pp, layers_per_stage)
    missing = [(p, t) for p in range(pp) for t in range(tp) if (p, t) not in shards]
    if missing:
        raise ConversionError(f"missing megatron shards (pp_rank, tp_rank): {missing}")

    def part(pp_rank: int, tp_rank: int, name: str) -> torch.Tensor:
        try:
            return shards[pp_rank, tp_rank][name]
        except KeyError:
            raise ConversionError(f"stage {pp_rank} shards have no {name!r}") from None

    def cat(pp_rank: int, name: str, dim: int) -> torch.Tensor:
        return torch.cat([part(pp_rank, t, name) for t in range(tp)], dim=dim)

    def rep(pp_rank: int, name: str) -> torch.Tensor:
        return part(pp_rank, 0, name)

    hf: dict[str, torch.Tensor] = {}
    hf["model.embed_tokens.weight"] = cat(0, "embedding.word_embeddings.weight", 0)[: d.vocab]
    for pp_rank, count in enumerate(counts):
        first = sum(counts[:pp_rank])
        for local in range(count):
            h, m = f"model.layers.{first + local}.", f"decoder.layers.{local}."
            hf[h + "input_layernorm.weight"] = rep(pp_rank, m + "input_layernorm.weight")
            hf[h + "post_attention_layernorm.weight"] = rep(pp_rank, m + "pre_mlp_layernorm.weight")
            for kind in ["weight", "bias"] if spec.qkv_bias else ["weight"]:
                qkv = cat(pp_rank, m + f"self_attention.linear_qkv.{kind}", 0)
                q, k, v = unpack_qkv(qkv, d.heads, d.kv_heads, d.head_dim)
                hf.update({f"{h}self_attn.{x}_proj.{kind}": t for x, t in zip("qkv", (q, k, v))})
            o_proj = cat(pp_rank, m + "self_attention.linear_proj.weight", 1)
            hf[h + "self_attn.o_proj.weight"] = o_proj
            if spec.qk_norm:
                for x in "qk":
                    norm = rep(pp_rank, f"{m}self_attention.{x}_layernorm.weight")
                    hf[f"{h}self_attn.{x}_norm.weight"] = norm
            fc1 = [torch.chunk(part(pp_rank, t, m + "mlp.linear_fc1.weight"), 2) for t in range(tp)]
            hf[h + "mlp.gate_proj.weight"] = torch.cat([gate for gate, _ in fc1], dim=0)
            hf[h + "mlp.up_proj.weight"] = torch.cat([up for _, up in fc1], dim=0)
            hf[h + "mlp.down_proj.weight"] = cat(pp_rank, m + "mlp.linear_fc2.weight", 1)
    hf["model.norm.weight"] = rep(pp - 1, "decoder.final_layernorm.weight")
    if not d.tied:
        hf["lm_head.weight"] = cat(pp - 1, "output_layer.weight", 0)[: d.vocab]
    elif include_tied_lm_head:
        hf["lm_head.weight"] = hf["model.embed_tokens.weight"]
    # Own storage per tensor: no views into a merged tensor or into the shards.
    return {name: tensor.clone() for name, tensor in hf.items()}
