"""The logit check of a converted checkpoint: megatron-core ``GPTModel`` stages loaded from it,
run over ``tp * pp`` processes (activations sent stage to stage), against the HF model's fp32
logits. megatron-core 0.16's forward calls CUDA (rotary embedding, RNG tracker), so this runs on
GPUs; on a CPU-only machine it needs a ``worker_setup`` hook that redirects those calls, which the
repository has only as a test helper (``tests/megatron_cpu_shim.py``).

Example (GPUs; ``toolkits.ckpt_convertor.hf_to_megatron --verify`` runs it)::

    >>> logit_check([LogitCase("hf_model", "megatron_ckpt")], device="cuda")  # doctest: +SKIP
    [3.1e-06]
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlinf.engines.training.megatron import checkpoint_io
from rlinf.engines.training.megatron.convert import checkpoint_layout, full_hf_config, read_hf_config
from rlinf.engines.training.megatron.model import build_gpt_model
from rlinf.utils.spawn import free_local_port, spawn_ranks

__all__ = ["LogitCase", "logit_check"]


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
    # lazy: optional extra (megatron)
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
    # lazy: optional extra (megatron)
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import random as mp_random

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
    # lazy: transformers (~2 s) only for the HF side of the check
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
            megatron_path=str(case.megatron_path), config=full_hf_config(meta["hf_config"]),
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
