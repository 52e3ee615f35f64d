"""A GPU check kit: what the CPU test suite cannot check, measured in one command on one GPU.

On the GPU machine (PyTorch installed; no Ray, Hydra, vLLM or SGLang; no network), after carrying
the wheels that :mod:`toolkits.gpu_check.wheels` lists (``scripts/fetch_gpu_wheels.sh``)::

    bash scripts/gpu_check.sh                 # writes $OUT/gpu_check.json (or gpu_check_out/)

On a CPU machine the same plumbing runs with tiny sizes::

    bash scripts/gpu_check.sh --cpu-dry-run

Each check runs in its own process with its own time cap (:mod:`.runner`) and reports
``pass`` / ``fail`` / ``skip`` with its figures (:mod:`.report`). The checks (see
``docs/gpu_check.md`` for what each measures and its thresholds):

========================  ==========================================================  =========
name                      what                                                        module
========================  ==========================================================  =========
``fsdp_bf16``             FSDP2 actor step, bf16 on CUDA vs fp32 on the CPU           checks_fsdp
``mfu``                   FSDP2 actor step at Qwen2.5-0.5B shape, seq 2048: MFU       checks_mfu
``offload``               FSDP2 offload / onload frees GPU memory, same next step     checks_offload
``liger``                 liger-kernel fused linear CE and patched model vs torch     checks_liger
``megatron_step``         Megatron bf16 + distributed optimizer (TP=1) step, offload  checks_megatron
``megatron_logits``       converter HF -> Megatron, round trip and logits on CUDA     checks_megatron
``memory_estimate``       memory estimator vs CUDA peak, 0.5B shape, seq 2048         checks_memory
``pi0_ppo``               one πRL PPO update of a real-size π0 in bf16: time, memory  checks_pi0
========================  ==========================================================  =========

Importing this package imports nothing heavy (no torch): the runner decides skips cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckSpec:
    """One check: where its function lives and what it needs.

    Args:
        name: key in the JSON's ``checks``.
        target: ``"module:function"``; the function takes a :class:`~.runner.Context` and returns
            an outcome dict (:func:`toolkits.gpu_check.report.outcome`).
        cap_s: wall-clock cap of its process on the GPU (a dry run gets :data:`DRY_RUN_CAP_S`).
        needs_cuda: skipped without running when the run's device is the CPU.
        needs_modules: top-level modules that must be importable, else skipped with the reason.
        cpu_note: the skip reason on the CPU (when ``needs_cuda``).

    Example:
        >>> spec = CheckSpec("x", "toolkits.gpu_check.checks_fsdp:run", 60)
        >>> spec.needs_cuda, spec.needs_modules
        (False, ())
    """

    name: str
    target: str
    cap_s: float
    needs_cuda: bool = False
    needs_modules: tuple[str, ...] = ()
    cpu_note: str = ""


#: Seconds any one check may take in a ``--cpu-dry-run``.
DRY_RUN_CAP_S = 120.0

CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("fsdp_bf16", "toolkits.gpu_check.checks_fsdp:run", 120, needs_modules=("transformers",)),
    CheckSpec("mfu", "toolkits.gpu_check.checks_mfu:run", 200, needs_modules=("transformers",)),
    CheckSpec("offload", "toolkits.gpu_check.checks_offload:run", 120, needs_cuda=True,
              needs_modules=("transformers",),
              cpu_note="FSDPEngine.offload is a no-op on a CPU device: there is no GPU memory to free"),
    CheckSpec("liger", "toolkits.gpu_check.checks_liger:run", 120, needs_cuda=True,
              needs_modules=("transformers", "liger_kernel"),
              cpu_note="liger-kernel's kernels are Triton GPU kernels"),
    CheckSpec("megatron_step", "toolkits.gpu_check.checks_megatron:run_step", 180, needs_cuda=True,
              needs_modules=("transformers", "megatron"),
              cpu_note="megatron-core calls CUDA in its forward, schedules and optimizer"),
    CheckSpec("megatron_logits", "toolkits.gpu_check.checks_megatron:run_logits", 150,
              needs_modules=("transformers", "megatron")),
    CheckSpec("memory_estimate", "toolkits.gpu_check.checks_memory:run", 120, needs_modules=("transformers",)),
    CheckSpec("pi0_ppo", "toolkits.gpu_check.checks_pi0:run", 180, needs_modules=("transformers", "safetensors")),
)
