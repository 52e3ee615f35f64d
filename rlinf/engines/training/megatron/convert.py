"""HF <-> Megatron checkpoint conversion and its checks (used by ``toolkits.ckpt_convertor`` and
by the Megatron actor backend's ``use_hf_ckpt``).

* :func:`hf_to_megatron`: an HF folder (config.json + safetensors / bin) -> a Megatron-LM
  release checkpoint for ``tp`` x ``pp`` (:mod:`.checkpoint_io`), optionally with one worker
  process per group of pipeline stages. Every input problem is found before anything is written.
* :func:`megatron_to_hf`: back to an HF folder (config.json + model.safetensors), vocabulary
  unpadded; works on checkpoints without our metadata too, given ``hf_config_path``.
* :func:`verify_round_trip`: HF -> Megatron -> HF gives the same names, dtypes and bits.
* :func:`logit_check`: megatron-core ``GPTModel`` stages loaded from the checkpoint, run over
  ``tp * pp`` processes (activations sent stage to stage), against the HF model's logits.
  megatron-core 0.16's forward calls CUDA (rotary embedding, RNG tracker), so this runs on GPUs;
  on a CPU-only machine it needs a ``worker_setup`` hook that redirects those calls, which the
  repository has only as a test helper (``tests/megatron_cpu_shim.py``).

Errors about the input are :class:`ConversionError` with one line naming the problem.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import importlib
import json
import multiprocessing
import os
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from rlinf.engines.training.megatron import checkpoint_io, layout
from rlinf.engines.training.megatron.layout import ConversionError
from rlinf.engines.training.megatron.model import rope_theta
from rlinf.utils.spawn import free_local_port, spawn_ranks

__all__ = [
    "ConversionError",
    "LogitCase",
    "checkpoint_layout",
    "hf_config_from_dict",
    "hf_to_megatron",
    "logit_check",
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
    full = _full_config(raw)
    layout.family_of(full)  # options only the filled-in config shows
    rope_theta(full)  # RoPE scaling has no counterpart in the GPTModel we build
    return raw


def _full_config(raw: dict[str, Any]) -> dict[str, Any]:
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
    config = _full_config(raw)
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
    vocab = layout.model_dims(_full_config(hf_config)).vocab
    return {"tp": tp, "pp": pp, "layers_per_stage": counts, "vocab_size": vocab,
            "padded_vocab_size": rows * tp, "hf_config": hf_config, "hf_has_lm_head": False}


def _merged_hf_state(megatron_path: str | os.PathLike, meta: dict[str, Any]) -> dict[str, Any]:
    tp, pp = int(meta["tp"]), int(meta["pp"])
    ranks = [(p, t) for p in range(pp) for t in range(tp)]
    shards = {(p, t): checkpoint_io.load_shard(megatron_path, t, p) for p, t in ranks}
    return layout.megatron_shards_to_hf(
        shards, _full_config(meta["hf_config"]), tp, pp, meta["layers_per_stage"],
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


@dataclasses.dataclass(frozen=True)
class LogitCase:
    """One logit comparison: an HF folder and its converted checkpoint."""

    hf_path: str
    megatron_path: str


@dataclasses.dataclass(frozen=True)
class _ForwardJob:
    """What every worker needs to run one checkpoint's forward (crosses the process boundary)."""

    megatron_path: str
    config: dict[str, Any]  # config.json with transformers' defaults filled in
    tp: int
    pp: int
    layers_per_stage: list[int]
    padded_vocab_size: int
    tokens: list[list[int]]


def _stage_forward(model: Any, job: _ForwardJob, device: torch.device) -> torch.Tensor | None:
    """One pipeline stage's forward: receive the previous stage's activations [s, b, h], send
    ours on; the last stage returns the logits [b, s, padded vocab]."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    tokens = torch.tensor(job.tokens, device=device)
    batch, seq = tokens.shape
    positions = torch.arange(seq, device=device).expand(batch, seq)
    if not ps.is_pipeline_first_stage():
        received = torch.empty(seq, batch, job.config["hidden_size"], device=device)
        dist.recv(received, src=ps.get_pipeline_model_parallel_prev_rank())
        model.set_input_tensor(received)
    with torch.no_grad():
        out = model(tokens, positions, None)
    if not ps.is_pipeline_last_stage():
        dist.send(out.contiguous(), dst=ps.get_pipeline_model_parallel_next_rank())
        return None
    return out


def _run_job(job: _ForwardJob, device: torch.device) -> torch.Tensor | None:
    """Build this rank's GPTModel stage, load its shard strictly, run the forward; the logits
    on the rank that reports them (last stage, TP rank 0, DP rank 0), else None."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import random as mp_random

    from rlinf.engines.training.megatron.model import build_gpt_model

    ps.initialize_model_parallel(job.tp, job.pp)
    try:
        mp_random.get_cuda_rng_tracker().reset()
        mp_random.model_parallel_cuda_manual_seed(1234)
        pp_rank = ps.get_pipeline_model_parallel_rank()
        tp_rank = ps.get_tensor_model_parallel_rank()
        model = build_gpt_model(
            job.config, tp=job.tp, pp=job.pp, pp_rank=pp_rank, parallel_output=False,
            vocab_size_padded=job.padded_vocab_size, layers_per_stage=job.layers_per_stage,
        )
        model.load_state_dict(checkpoint_io.load_shard(job.megatron_path, tp_rank, pp_rank))
        logits = _stage_forward(model.to(device).eval(), job, device)
        reports = tp_rank == 0 and ps.get_data_parallel_rank() == 0
        return logits.float().cpu() if logits is not None and reports else None
    finally:
        ps.destroy_model_parallel()


def _logit_worker(rank: int, world: int, port: int, jobs: list[_ForwardJob], device: str,
                  worker_setup: str | None, out_dir: str, timeout_s: float) -> None:
    """Entry of one spawned rank: writes ``logits_<i>.pt`` per job it reports, or its traceback
    to ``error_<rank>.txt``."""
    try:
        torch.set_num_threads(1)
        if worker_setup:
            module, _, function = worker_setup.partition(":")
            getattr(importlib.import_module(module), function)()
        import torch.distributed as dist

        if device == "cuda":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            "nccl" if device == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s),
        )
        for index, job in enumerate(jobs):
            logits = _run_job(job, torch.device(device))
            if logits is not None:
                torch.save(logits, Path(out_dir) / f"logits_{index}.pt")
            dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        (Path(out_dir) / f"error_{rank}.txt").write_text(traceback.format_exc())
        raise


def _hf_logits(hf_path: str, tokens: torch.Tensor, device: str) -> torch.Tensor:
    """The HF model's fp32 logits (on ``device``, free again once the workers have exited)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_path, dtype=torch.float32).to(device).eval()
    with torch.no_grad():
        return model(tokens.to(device)).logits.cpu()


def logit_check(
    cases: Sequence[LogitCase],
    *,
    device: str = "cuda",
    worker_setup: str | None = None,
    world_size: int | None = None,
    timeout_s: float = 300.0,
    batch: int = 2,
    seq_len: int = 16,
) -> list[float]:
    """Max abs difference between megatron-core's and HF's fp32 logits, per case (real vocabulary
    only: padded rows are left out).

    All cases run in one group of ``world_size`` processes (default: the largest ``tp * pp``;
    smaller layouts get data-parallel copies). ``device="cuda"`` needs that many GPUs (NCCL);
    ``device="cpu"`` uses gloo and needs ``worker_setup``, a ``"module:function"`` run first in
    every worker that makes megatron-core's CUDA-only calls work on the CPU. Workers are killed
    after ``timeout_s``; a failure raises RuntimeError with the worker's last error line.
    """
    jobs, generator = [], torch.Generator().manual_seed(0)
    for case in cases:
        meta = checkpoint_layout(case.megatron_path, read_hf_config(case.hf_path))
        tokens = torch.randint(0, meta["vocab_size"], (batch, seq_len), generator=generator)
        jobs.append(_ForwardJob(
            megatron_path=str(case.megatron_path), config=_full_config(meta["hf_config"]),
            tp=int(meta["tp"]), pp=int(meta["pp"]), layers_per_stage=meta["layers_per_stage"],
            padded_vocab_size=int(meta["padded_vocab_size"]), tokens=tokens.tolist(),
        ))
    world = world_size or max(job.tp * job.pp for job in jobs)
    for job in jobs:
        if world % (job.tp * job.pp):
            raise ValueError(f"world size {world} is no multiple of tp*pp of {job.megatron_path}")
    if device == "cuda" and torch.cuda.device_count() < world:
        raise RuntimeError(f"the logit check needs {world} GPUs, {torch.cuda.device_count()} seen")
    with tempfile.TemporaryDirectory(prefix="rlinf-logit-check-") as out_dir:
        _run_workers(world, jobs, device, worker_setup, out_dir, timeout_s)
        diffs = []
        for index, (case, job) in enumerate(zip(cases, jobs)):
            theirs = torch.load(Path(out_dir) / f"logits_{index}.pt", weights_only=True)
            ours = _hf_logits(case.hf_path, torch.tensor(job.tokens), device)
            diffs.append(float((theirs[..., : ours.shape[-1]] - ours).abs().max()))
    return diffs


def _run_workers(world: int, jobs: list[_ForwardJob], device: str, worker_setup: str | None,
                 out_dir: str, timeout_s: float) -> None:
    """Spawn ``world`` ranks of :func:`_logit_worker`; kill them all at the deadline."""
    port = free_local_port()
    procs, hung = spawn_ranks(_logit_worker, [(rank, world, port, jobs, device, worker_setup, out_dir,
                                               timeout_s) for rank in range(world)], timeout_s)
    errors = sorted(Path(out_dir).glob("error_*.txt"))
    if errors:
        last_line = errors[0].read_text().strip().splitlines()[-1]
        raise RuntimeError(f"logit check rank {errors[0].stem[6:]} failed: {last_line}")
    if hung:
        raise RuntimeError(f"logit check ranks {hung} did not finish within {timeout_s:.0f} s")
    failed = [rank for rank, proc in enumerate(procs) if proc.exitcode != 0]
    if failed:
        raise RuntimeError(f"logit check ranks {failed} exited with codes "
                           f"{[procs[r].exitcode for r in failed]}")
