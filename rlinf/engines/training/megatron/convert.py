"""HF <-> Megatron checkpoint conversion and its checks (used by ``toolkits.ckpt_convertor`` and
by the Megatron actor backend's ``use_hf_ckpt``).

* :func:`hf_to_megatron`: an HF folder (config.json + safetensors / bin) -> a Megatron-LM
  release checkpoint for ``tp`` x ``pp`` (:mod:`.checkpoint_io`), optionally with one worker
  process per group of pipeline stages. Every input problem is found before anything is written.
* :func:`megatron_to_hf`: back to an HF folder (config.json + model.safetensors), vocabulary
  unpadded; works on checkpoints without our metadata too, given ``hf_config_path``.
* :func:`verify_round_trip`: HF -> Megatron -> HF gives the same names, dtypes and bits.
* The logit check (megatron-core's logits against HF's) is :mod:`.logit_check`.

Errors about the input are :class:`ConversionError` with one line naming the problem.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from rlinf.engines.training.megatron import checkpoint_io, layout
from rlinf.engines.training.megatron.layout import ConversionError
from rlinf.engines.training.megatron.model import rope_theta

__all__ = [
    "ConversionError",
    "checkpoint_layout",
    "hf_config_from_dict",
    "hf_to_megatron",
    "full_hf_config",
    "megatron_to_hf",
    "read_hf_config",
    "verify_round_trip",
]

FORMAT_NAME = "rlinf-megatron"
CKPT_FORMATS = ("torch",)
# Old Llama checkpoints stored RoPE tables; they carry no weights and are regenerated.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
_MODEL_TYPE_ALIASES = {"qwen2": "qwen2", "qwen2.5": "qwen2", "llama": "llama", "qwen3": "qwen3"}


def hf_config_from_dict(raw: dict[str, Any]) -> Any:
    """The transformers config object of a ``config.json`` dict (defaults filled as HF does)."""
    # lazy: transformers (~2 s) only when a config is converted
    from transformers import CONFIG_MAPPING

    model_type = raw.get("model_type") or layout.family_of(raw).name
    return CONFIG_MAPPING[model_type].from_dict(dict(raw))


def read_hf_config(folder: str | os.PathLike, model_type: str | None = None) -> dict[str, Any]:
    """``config.json`` of an HF folder as a dict, checked to be a supported family (and to match
    ``model_type`` when given: qwen2, qwen2.5, llama or qwen3)."""
    path = Path(folder) / "config.json"
    if not Path(folder).is_dir():
        raise ConversionError(f"HF checkpoint folder {folder} does not exist")
    if not path.is_file():
        raise ConversionError(f"no config.json in {folder}")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ConversionError(f"{path} is not valid JSON: {error}") from None
    family = layout.family_of(raw)
    if model_type is not None:
        wanted = _MODEL_TYPE_ALIASES.get(model_type.lower())
        if wanted is None:
            raise ConversionError(
                f"unknown --model-type {model_type!r} (one of {', '.join(_MODEL_TYPE_ALIASES)})"
            )
        if wanted != family.name:
            raise ConversionError(
                f"--model-type {model_type} does not match {path} ({family.architecture})"
            )
    full = full_hf_config(raw)
    layout.family_of(full)  # options only the filled-in config shows
    rope_theta(full)  # RoPE scaling has no counterpart in the GPTModel we build
    return raw


def full_hf_config(raw: dict[str, Any]) -> dict[str, Any]:
    """``config.json`` with transformers' defaults filled in (e.g. Qwen3's head_dim)."""
    try:
        full = hf_config_from_dict(raw).to_dict()
    except (KeyError, TypeError, ValueError) as error:
        raise ConversionError(f"transformers cannot read this config.json: {error}") from None
    full.setdefault("architectures", raw.get("architectures"))
    return full


def check_hf_weights(weights: checkpoint_io.HFWeights, config: dict[str, Any]) -> bool:
    """Raise :class:`ConversionError` unless the tensors are exactly what ``config`` implies
    (names and shapes); returns whether ``lm_head.weight`` is stored."""
    expected = layout.expected_hf_shapes(config)
    present = {n for n in weights if not n.endswith(_IGNORED_SUFFIXES)}
    tied = layout.model_dims(config).tied
    optional = {"lm_head.weight"} if tied else set()
    missing = [n for n in expected if n not in present and n not in optional]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ConversionError(f"weights in {weights.folder} lack {missing[0]!r}{more}")
    unexpected = sorted(present - set(expected))
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise ConversionError(
            f"weights in {weights.folder} have {unexpected[0]!r}{more}, which config.json "
            "does not describe"
        )
    for name in (n for n in expected if n in present):  # in model order: the first layer first
        if weights.shape(name) != expected[name]:
            raise ConversionError(
                f"shape mismatch: {name} is {list(weights.shape(name))} in the weights, "
                f"config.json implies {list(expected[name])}"
            )
    return "lm_head.weight" in present


def _convert_stages(
    hf_path: str, out_dir: str, config: dict[str, Any], tp: int, pp: int,
    stages: list[int], counts: list[int], divisible_by: int,
) -> list[int]:
    """Write the shards of ``stages`` (runs in a worker process or in-line)."""
    weights = checkpoint_io.HFWeights(hf_path)
    for pp_rank in stages:
        stage = layout.hf_to_megatron_stage(weights, config, tp, pp, pp_rank, counts, divisible_by)
        for tp_rank, state_dict in stage.items():
            checkpoint_io.write_shard(out_dir, tp_rank, pp_rank, pp, state_dict)
    return stages


def hf_to_megatron(
    hf_path: str | os.PathLike,
    save_path: str | os.PathLike,
    tp: int,
    pp: int,
    *,
    layers_per_stage: Iterable[int] | None = None,
    make_vocab_size_divisible_by: int = 128,
    process_num: int = 1,
    model_type: str | None = None,
    ckpt_format: str = "torch",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Convert the HF folder ``hf_path`` into a Megatron release checkpoint at ``save_path``.

    ``process_num`` > 1 converts groups of pipeline stages in that many spawned processes
    (each reads only its stages' tensors); the files are the same as with 1. Returns the
    metadata written next to the checkpoint.
    """
    if ckpt_format not in CKPT_FORMATS:
        raise ConversionError(
            f"ckpt_format {ckpt_format!r} is not supported: this converter writes Megatron-LM's "
            "legacy 'torch' layout (megatron-core loads it with ckpt_format=torch)"
        )
    if process_num < 1:
        raise ConversionError(f"process_num must be >= 1, got {process_num}")
    raw = read_hf_config(hf_path, model_type)
    config = full_hf_config(raw)
    counts = layout.check_parallel_sizes(config, tp, pp, layers_per_stage)
    dims = layout.model_dims(config)
    padded = layout.padded_vocab_size(dims.vocab, tp, make_vocab_size_divisible_by)
    weights = checkpoint_io.HFWeights(hf_path)
    has_lm_head = check_hf_weights(weights, config)
    meta = {
        "format": FORMAT_NAME,
        "ckpt_format": ckpt_format,
        "family": layout.family_of(config).name,
        "hf_config": raw,
        "tp": tp,
        "pp": pp,
        "layers_per_stage": counts,
        "vocab_size": dims.vocab,
        "padded_vocab_size": padded,
        "make_vocab_size_divisible_by": make_vocab_size_divisible_by,
        "hf_has_lm_head": has_lm_head,
        "source": {
            "path": str(Path(hf_path).absolute()),
            "files": [f.name for f in weights.files],
            "sha256": weights.content_hash(),
        },
    }
    workers = min(process_num, pp)
    groups = [list(range(pp))[w::workers] for w in range(workers)]
    with checkpoint_io.staged_destination(save_path, overwrite) as tmp:
        args = (str(hf_path), str(tmp), config, tp, pp)
        if workers == 1:
            _convert_stages(*args, groups[0], counts, make_vocab_size_divisible_by)
        else:
            context = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
                jobs = [
                    pool.submit(_convert_stages, *args, g, counts, make_vocab_size_divisible_by)
                    for g in groups
                ]
                for job in jobs:
                    job.result()
        checkpoint_io.write_metadata(tmp, meta)
    return meta


def checkpoint_layout(
    megatron_path: str | os.PathLike, hf_config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """tp, pp, layers per stage, vocab sizes and HF config of a checkpoint: from our metadata
    when present, else read off the shard files (then ``hf_config``, a config.json dict, is
    required). The metadata's HF config gives way to ``hf_config`` when both exist."""
    root = Path(megatron_path)
    if not root.is_dir():
        raise ConversionError(f"megatron checkpoint folder {root} does not exist")
    if (root / checkpoint_io.META_FILE).is_file():
        meta = checkpoint_io.read_metadata(root)
        return {**meta, "hf_config": hf_config or meta["hf_config"]}
    if hf_config is None:
        raise ConversionError(f"{root} has no {checkpoint_io.META_FILE}; pass --hf-config-path")
    names = [p.name for p in checkpoint_io.iteration_dir(root).glob("mp_rank_*")]
    if not names:
        raise ConversionError(f"no mp_rank_* shard folders in {root}")
    tp = 1 + max(int(name.split("_")[2]) for name in names)
    pp = checkpoint_io.pp_size_of(root)
    stages = [checkpoint_io.load_shard(root, 0, pp_rank) for pp_rank in range(pp)]
    counts = [len({k.split(".")[2] for k in sd if k.startswith("decoder.layers.")})
              for sd in stages]
    rows = stages[0]["embedding.word_embeddings.weight"].shape[0]
    vocab = layout.model_dims(full_hf_config(hf_config)).vocab
    return {"tp": tp, "pp": pp, "layers_per_stage": counts, "vocab_size": vocab,
            "padded_vocab_size": rows * tp, "hf_config": hf_config, "hf_has_lm_head": False}


def _merged_hf_state(megatron_path: str | os.PathLike, meta: dict[str, Any]) -> dict[str, Any]:
    tp, pp = int(meta["tp"]), int(meta["pp"])
    ranks = [(p, t) for p in range(pp) for t in range(tp)]
    shards = {(p, t): checkpoint_io.load_shard(megatron_path, t, p) for p, t in ranks}
    return layout.megatron_shards_to_hf(
        shards, full_hf_config(meta["hf_config"]), tp, pp, meta["layers_per_stage"],
        include_tied_lm_head=bool(meta.get("hf_has_lm_head", False)),
    )


# Copied from --hf-config-path next to the converted weights, when present there.
_HF_SIDE_FILES = (
    "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "added_tokens.json",
)


def megatron_to_hf(
    load_path: str | os.PathLike,
    save_path: str | os.PathLike,
    *,
    hf_config_path: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> dict[str, torch.Tensor]:
    """Convert a Megatron release checkpoint back into an HF folder; returns the HF state dict.

    The HF config comes from ``hf_config_path`` (whose tokenizer and generation files are copied
    too) or else from the checkpoint's metadata. A checkpoint without our metadata (e.g. saved
    by Megatron-LM training) needs ``hf_config_path``; its TP / PP layout is read from the files.
    """
    raw = read_hf_config(hf_config_path) if hf_config_path is not None else None
    meta = checkpoint_layout(load_path, raw)
    raw = meta["hf_config"]
    state = _merged_hf_state(load_path, meta)
    with checkpoint_io.staged_destination(save_path, overwrite) as tmp:
        (tmp / "config.json").write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
        checkpoint_io.write_hf_weights(tmp, state)
        for name in _HF_SIDE_FILES if hf_config_path is not None else ():
            if (Path(hf_config_path) / name).is_file():
                shutil.copy2(Path(hf_config_path) / name, tmp / name)
    return state


def verify_round_trip(hf_path: str | os.PathLike, megatron_path: str | os.PathLike) -> int:
    """The checkpoint at ``megatron_path`` converts back to exactly the weights of ``hf_path``:
    same names, dtypes and bits. Returns the number of tensors compared; :class:`ConversionError`
    names the first difference."""
    source = checkpoint_io.HFWeights(hf_path)
    meta = checkpoint_layout(megatron_path, read_hf_config(hf_path))
    back = _merged_hf_state(megatron_path, meta)
    names = sorted(n for n in source if not n.endswith(_IGNORED_SUFFIXES))
    if names != sorted(back):
        diff = sorted(set(names) ^ set(back))
        raise ConversionError(f"round trip changed the tensor names: {diff[:3]}")
    for name in names:
        a, b = source[name], back[name]
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            raise ConversionError(
                f"round trip changed {name} ({a.dtype}{list(a.shape)} -> {b.dtype}{list(b.shape)})"
            )
    return len(names)
