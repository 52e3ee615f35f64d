"""What the Megatron engine needs from its process before it builds a model: megatron-core, a
device it can run on, and megatron's model-parallel state (tensor / pipeline / data groups).

Rank layout is megatron's default order (``tp-cp-ep-dp-pp``): tensor-parallel ranks are
consecutive, then data-parallel replicas, then pipeline stages. With 4 ranks, TP=2, PP=1:
ranks {0, 1} and {2, 3} are the two replicas; TP=1, PP=2: rank 0 is stage 0, rank 1 stage 1.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

MEGATRON_MISSING = ("actor.training_backend: megatron needs megatron-core, which is not installed; "
                    "install the megatron extra (pip install -e '.[megatron]') or use "
                    "training_backend: fsdp")


def megatron_import_error() -> str | None:
    """Why megatron-core cannot be imported here (None when it can)."""
    try:
        # lazy: optional extra (megatron)
        import megatron.core  # noqa: F401
    except ImportError as exc:
        return f"{MEGATRON_MISSING} ({exc})"
    return None


def megatron_runs_on_cpu() -> bool:
    """True when megatron-core's CUDA-only calls have been redirected to the CPU in this process.

    megatron-core 0.16 calls CUDA in its forward (rotary embedding, RNG tracker), schedules and
    optimizer even when every tensor is on the CPU. Only the test suite redirects those calls
    (``tests/megatron_cpu_shim.py`` swaps the ``torch`` global of megatron's modules); product
    runs need GPUs.
    """
    module = sys.modules.get("megatron.core.tensor_parallel.random")
    return module is not None and getattr(module, "torch", torch) is not torch


def require_megatron(device: torch.device) -> None:
    """Fail early, with the reason, when this process cannot run the Megatron engine."""
    problem = megatron_import_error()
    if problem:
        raise ImportError(problem)
    if device.type != "cuda" and not megatron_runs_on_cpu():
        raise RuntimeError(
            f"actor.training_backend: megatron needs CUDA GPUs; this worker runs on {device} "
            "(megatron-core calls CUDA in its forward, pipeline schedules and optimizer). Place "
            "the actor on GPU nodes, or use training_backend: fsdp on CPU.")


@dataclass(frozen=True)
class ParallelLayout:
    """This rank's place in the tensor x pipeline x data grid."""

    tp: int
    pp: int
    dp: int
    tp_rank: int
    pp_rank: int
    dp_rank: int

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1

    @property
    def reports(self) -> bool:
        """One rank per data-parallel replica reports metrics (last stage, tensor rank 0)."""
        return self.is_last_stage and self.tp_rank == 0


def init_model_parallel(tp: int, pp: int, seed: int, timeout_minutes: int = 30) -> ParallelLayout:
    """Initialise megatron's parallel state over the default process group (already initialised
    by the caller) and seed its model-parallel RNG. A second engine in the same process (the
    frozen reference policy) reuses the state when the sizes agree."""
    # lazy: optional extra (megatron)
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import random as mp_random

    world = dist.get_world_size()
    if world % (tp * pp):
        raise ValueError(f"actor.model.tensor_model_parallel_size ({tp}) x pipeline_model_parallel_size "
                         f"({pp}) must divide the actor's {world} ranks")
    if ps.model_parallel_is_initialized():
        have = (ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size())
        if have != (tp, pp):
            raise RuntimeError(f"megatron's parallel state is already (tp, pp) = {have}, not {(tp, pp)}")
    else:
        ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                     distributed_timeout_minutes=timeout_minutes)
        mp_random.get_cuda_rng_tracker().reset()
        mp_random.model_parallel_cuda_manual_seed(seed)
    return ParallelLayout(tp=tp, pp=pp, dp=ps.get_data_parallel_world_size(),
                          tp_rank=ps.get_tensor_model_parallel_rank(),
                          pp_rank=ps.get_pipeline_model_parallel_rank(),
                          dp_rank=ps.get_data_parallel_rank())
