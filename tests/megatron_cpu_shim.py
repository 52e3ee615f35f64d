"""Test-only: run megatron-core 0.16 on CPU by redirecting its CUDA-only calls.

megatron-core's forward and training paths call CUDA directly in a handful of places even when
every tensor lives on the CPU:

* the rotary embedding moves ``inv_freq`` to ``torch.cuda.current_device()`` on first use;
* the tensor-parallel RNG tracker saves and restores *CUDA* RNG states (attention dropout forks it
  even at p=0; ``model_parallel_cuda_manual_seed`` seeds it);
* pipeline schedules and p2p communication allocate with ``device="cuda"`` /
  ``torch.cuda.current_device()`` and call ``torch.cuda.synchronize()``;
* DDP's ``param_and_grad_buffer`` allocates grad buffers on the current CUDA device and uses CUDA
  streams;
* ``optimizer.clip_grads`` allocates on ``"cuda"`` and asserts ``torch.cuda.FloatTensor`` grads;
* tied embeddings with pipeline stages call ``weight.data.cuda()`` before their all-reduce.

This module swaps, for the duration of :func:`cpu_shim` (or for the rest of the process after
:func:`install`), the ``torch`` global of every loaded ``megatron.core`` module for a proxy whose
``cuda`` namespace and allocation functions point at the CPU, replaces the RNG-tracker helpers
and ``clip_grad_by_total_norm_fp32`` with CPU versions, and makes ``Tensor.cuda`` return the
tensor itself. Nothing in ``rlinf/`` or ``toolkits/`` imports it: product code runs megatron's
forward on GPUs only (see ``docs/checkpoint_converter.md``).

Checked with megatron-core 0.16.1 on gloo: GPTModel forward at TP=2 / PP=2 (logits equal HF's),
and ``forward_backward_func`` (1F1B, PP=2; and TP=2) with megatron DDP and
``get_megatron_optimizer`` (Adam, ``clip_grad=1.0``) stepping.

Usage::

    with cpu_shim():
        ...  # initialize_model_parallel on gloo, build GPTModel, forward / backward

    install()  # in a spawned worker: stays on for the process (also a ``worker_setup`` hook)
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

# Loaded before patching so that their ``torch`` globals are swapped too.
_MEGATRON_MODULES = (
    "megatron.core.models.gpt.gpt_model",
    "megatron.core.models.common.embeddings.rotary_pos_embedding",
    "megatron.core.transformer.attention",
    "megatron.core.transformer.dot_product_attention",
    "megatron.core.transformer.transformer_block",
    "megatron.core.transformer.transformer_layer",
    "megatron.core.tensor_parallel.random",
    "megatron.core.tensor_parallel.layers",
    "megatron.core.pipeline_parallel.schedules",
    "megatron.core.pipeline_parallel.p2p_communication",
    "megatron.core.distributed.distributed_data_parallel",
    "megatron.core.distributed.param_and_grad_buffer",
    "megatron.core.distributed.finalize_model_grads",
    "megatron.core.optimizer.clip_grads",
    "megatron.core.optimizer.optimizer",
)


def _is_cuda(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int)  # a bare index means a CUDA device to torch


def _cpu_device_kwarg(fn):
    def wrapped(*args, **kwargs):
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        return fn(*args, **kwargs)

    return wrapped


class _NullStream:
    """Stands in for a CUDA stream: every wait / sync is a no-op."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, *args, **kwargs):
        return None

    def synchronize(self):
        return None

    def record_event(self, *args, **kwargs):
        return None


class _CpuCuda:
    """The ``torch.cuda`` seen by patched megatron modules; unknown names fall through."""

    @staticmethod
    def current_device():
        return torch.device("cpu")

    @staticmethod
    def synchronize(*args, **kwargs):
        return None

    @staticmethod
    def empty_cache():
        return None

    @staticmethod
    def get_rng_state(*args, **kwargs):
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, *args, **kwargs):
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed):
        torch.manual_seed(seed)

    @staticmethod
    def stream(*args, **kwargs):
        return contextlib.nullcontext()

    @staticmethod
    def default_stream(*args, **kwargs):
        return _NullStream()

    @staticmethod
    def current_stream(*args, **kwargs):
        return _NullStream()

    Stream = _NullStream

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)


class _CpuTorch:
    """The ``torch`` seen by patched megatron modules: CUDA allocations land on the CPU."""

    cuda = _CpuCuda()
    zeros = staticmethod(_cpu_device_kwarg(torch.zeros))
    ones = staticmethod(_cpu_device_kwarg(torch.ones))
    empty = staticmethod(_cpu_device_kwarg(torch.empty))
    full = staticmethod(_cpu_device_kwarg(torch.full))
    tensor = staticmethod(_cpu_device_kwarg(torch.tensor))
    arange = staticmethod(_cpu_device_kwarg(torch.arange))

    @staticmethod
    def autocast(device_type: str, *args, **kwargs):
        return torch.autocast("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def _get_rng_state_cpu(device: Any = "cuda", clone: bool = False, graph_safe: bool = False):
    return torch.get_rng_state()


def _set_rng_state_cpu(new_state: torch.Tensor, device: Any = -1, graph_safe: bool = False):
    torch.set_rng_state(new_state)


@contextlib.contextmanager
def _fork_cpu(self, name: str = "model-parallel-rng") -> Iterator[None]:
    """CudaRNGStatesTracker.fork on the CPU generator (no CUDA-vs-CPU drift warning)."""
    if name not in self.states_:
        raise Exception(f"rng state {name} is not added")
    outer = torch.get_rng_state()
    torch.set_rng_state(self.states_[name])
    try:
        yield
    finally:
        self.states_[name] = torch.get_rng_state()
        torch.set_rng_state(outer)


def _clip_grad_by_total_norm_cpu(parameters, max_norm, total_norm, use_decoupled_grad=False):
    """clip_grad_by_total_norm_fp32 without its CUDA tensor-type assert."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    attr = "decoupled_grad" if use_decoupled_grad else "grad"
    coeff = max_norm / (total_norm + 1.0e-6)
    if coeff < 1.0:
        for param in parameters:
            grad = getattr(param, attr, None)
            if grad is not None:
                grad.detach().mul_(coeff)


def _tensor_stays_on_cpu(self: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return self


_saved: list[tuple[Any, str, Any]] = []


def _swap(owner: Any, name: str, value: Any) -> None:
    _saved.append((owner, name, getattr(owner, name)))
    setattr(owner, name, value)


def install() -> None:
    """Patch megatron-core for CPU in this process (idempotent); see the module docstring."""
    if _saved:
        return
    for module_name in _MEGATRON_MODULES:
        importlib.import_module(module_name)
    proxy = _CpuTorch()
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("megatron.core") and getattr(module, "torch", None) is torch:
            _swap(module, "torch", proxy)
    random = sys.modules["megatron.core.tensor_parallel.random"]
    _swap(random, "_get_cuda_rng_state", _get_rng_state_cpu)
    _swap(random, "_set_cuda_rng_state", _set_rng_state_cpu)
    _swap(random.CudaRNGStatesTracker, "fork", _fork_cpu)
    for module_name in ("megatron.core.optimizer.clip_grads", "megatron.core.optimizer.optimizer"):
        module = sys.modules[module_name]
        _swap(module, "clip_grad_by_total_norm_fp32", _clip_grad_by_total_norm_cpu)
    _swap(torch.Tensor, "cuda", _tensor_stays_on_cpu)


def uninstall() -> None:
    """Undo :func:`install` (restores every patched attribute, last first)."""
    while _saved:
        owner, name, value = _saved.pop()
        setattr(owner, name, value)


@contextlib.contextmanager
def cpu_shim() -> Iterator[None]:
    """Context manager form of :func:`install` / :func:`uninstall`.

    Nested use is allowed; only the outermost one uninstalls.
    """
    outer = bool(_saved)
    install()
    try:
        yield
    finally:
        if not outer:
            uninstall()
