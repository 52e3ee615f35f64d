"""Memory foreseen, the shared part: each role's memory per rank, from the recipe's estimate
(:meth:`~rlinf.runners.recipe.Recipe.memory_estimate`), summed where the placement puts it and
checked against the devices before Ray (:func:`check_before_ray`).

``cluster.memory_check`` (``warn`` default, ``error``, ``off``) decides what a device that does not
fit does: a warning, a refusal (``config error: cluster.memory_check: ...`` naming the role and the
keys that would bring it under), or nothing (no estimate at all). The figures come from the run's
recipe (:meth:`~rlinf.runners.recipe.Recipe.memory_estimate`, in its folder), built with
:mod:`rlinf.config.memory` (formulas there; docs/memory.md) and the FSDP2 helpers here, which
several recipes share. This module names no recipe: the caller passes it (the run layer its
recipe; the placement CLI's :mod:`rlinf.runners.memory_plan` the one the file names).

Example:
    >>> remedy_text(("algorithm.training_batch_size_per_gpu", "actor.model.gradient_checkpointing: true"))
    'lower algorithm.training_batch_size_per_gpu, or set actor.model.gradient_checkpointing: true'
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rlinf.config.memory import DTYPE_BYTES, ModelShape, TrainSetup
from rlinf.scheduler.memory import (
    GIB,
    Capacity,
    ComponentMemory,
    MemoryEstimate,
    MemoryItem,
    check_capacity,
    fmt_bytes,
    node_ram_bytes,
    render_memory,
)
from rlinf.utils.typed_config import ConfigError

MIB = 1 << 20
#: HF ``generate`` / the lean loop decode at most this many sequences at once (the engine's default).
HF_MAX_BATCH = 64


def remedy_text(keys: tuple[str, ...]) -> str:
    """How the keys are named in a warning or refusal (``lower K`` / ``set K: V``)."""
    parts = [f"set {k}" if ":" in k else (k if k.startswith("more ") else f"lower {k}") for k in keys]
    return ", or ".join(parts)


def dtype_size(name: str) -> int:
    """Bytes of one number of the dtype ``name`` (``bf16`` -> 2)."""
    return DTYPE_BYTES[name]


def _shard(ws: int, strategy: str, fsdp_size: int) -> int:
    if strategy == "no_shard":
        return 1
    return ws if fsdp_size in (-1, ws) else fsdp_size


def fsdp_setup(actor, shape: ModelShape, ws: int, micro: int, seq: int, response: int, entropy: bool,
               n_micro: int, grad_ckpt: bool | None = None) -> TrainSetup:
    """The :class:`TrainSetup` of an FSDP2 actor (``actor`` section) on ``ws`` ranks."""
    fc, model = actor.fsdp_config, actor.model
    s = _shard(ws, fc.sharding_strategy, fc.fsdp_size)
    amp = fc.amp_autocast
    compute = dtype_size(amp.precision) if amp.enabled else dtype_size(fc.mixed_precision.param_dtype)
    trainable = shape.lora_params(model.lora_rank, model.llm.lora_target_modules) if model.is_lora else None
    return TrainSetup(shape, micro_batch=micro, seq=seq, response=response, master=dtype_size(model.precision),
                      compute=compute, reduce=dtype_size(fc.mixed_precision.reduce_dtype), shard_weights=s,
                      shard_grads=s, shard_optim=s,
                      accumulate_unsharded=fc.enable_gradient_accumulation and n_micro > 1 and s > 1,
                      reshard_after_forward=fc.reshard_after_forward and fc.sharding_strategy != "shard_grad_op",
                      grad_ckpt=model.gradient_checkpointing if grad_ckpt is None else grad_ckpt, entropy=entropy,
                      eager=model.attn_implementation == "eager", trainable=trainable, offload=fc.cpu_offload)


def fsdp_remedies(actor, prefix: str, micro_key: str, ws_sharded: bool, collocated: bool) -> tuple[str, ...]:
    """The keys that would lower an FSDP2 actor's memory, named when it does not fit."""
    keys = [micro_key]
    if not actor.model.gradient_checkpointing:
        keys.append(f"{prefix}.model.gradient_checkpointing: true")
    if not actor.fsdp_config.cpu_offload:
        keys.append(f"{prefix}.fsdp_config.cpu_offload: true")
    if collocated and not (actor.offload_weight and actor.offload_optimizer):
        keys.append(f"{prefix}.offload_weight / offload_optimizer: true")
    keys.append("more ranks for the role (cluster.component_placement)" if ws_sharded
                else f"{prefix}.fsdp_config.sharding_strategy: full_shard")
    return tuple(keys)


def in_turns(items: list[MemoryItem], names: dict[str, bool]) -> list[MemoryItem]:
    """The device items named true in ``names`` held only during the component's turn (offloaded)."""
    return [replace(i, phase=True) if names.get(i.name) and i.where == "device" else i for i in items]


def on_host(items: list[MemoryItem]) -> list[MemoryItem]:
    """On a CPU run every byte is host RAM, and nothing leaves it between turns."""
    return [replace(i, where="host", phase=False) for i in items]


def estimate(recipe, cfg: Any, plan, capacity: Capacity, start=None) -> MemoryEstimate:
    """Every placed role's memory per rank for the typed config ``cfg`` on ``plan``, from
    ``recipe``'s hook given what its checks found (``start``; None when they did not run). A GPU
    run (``capacity.kind == "gpu"``) keeps model state on the device; a CPU run holds everything
    in the node's RAM. A role that cannot be sized is left out with a note."""
    on_gpu = capacity.kind == "gpu"
    try:
        est = recipe.memory_estimate(cfg, plan, capacity, start)
    except ConfigError as exc:
        return MemoryEstimate({}, (f"not estimated: {exc}",))
    if not on_gpu:
        est = MemoryEstimate({n: ComponentMemory(c.component, tuple(on_host(list(c.items))), c.remedies, c.note)
                              for n, c in est.components.items()}, est.notes)
    return est


def with_items(est: MemoryEstimate, extra: dict[str, tuple[MemoryItem, ...]]) -> MemoryEstimate:
    """``est`` with more items added to the named components (those it holds)."""
    out = dict(est.components)
    for name, items in extra.items():
        if name in out:
            c = out[name]
            out[name] = ComponentMemory(c.component, (*c.items, *items), c.remedies, c.note)
    return MemoryEstimate(out, est.notes)


def run_capacity(cluster, probe_cuda: bool = True) -> Capacity:
    """What one accelerator and one node hold: ``cluster.accelerator_memory_gib``, else
    ``torch.cuda`` on this node (when ``probe_cuda``), else a CPU run against this node's RAM."""
    ram = node_ram_bytes()
    if cluster.accelerator_memory_gib is not None:
        return Capacity(int(cluster.accelerator_memory_gib * GIB), ram, "cluster.accelerator_memory_gib")
    if probe_cuda:
        # lazy: torch (~2 s) only when called; the driver's checks before Ray import this module without it
        import torch

        if torch.cuda.is_available():
            return Capacity(torch.cuda.get_device_properties(0).total_memory, ram,
                            f"torch.cuda: {torch.cuda.get_device_name(0)}")
    return Capacity(None, ram, "CPU run: the node's RAM" if ram else "", kind="cpu")


def _planned(cfg, capacity: Capacity):
    if cfg.cluster.accelerators_per_node is not None:
        return cfg.cluster.plan()
    count = 1
    if capacity.source.startswith("torch.cuda"):
        # lazy: torch (~2 s) only when called; the driver's checks before Ray import this module without it
        import torch

        count = torch.cuda.device_count()
    return cfg.cluster.plan(cfg.cluster.shape(count))


def check_before_ray(recipe, cfg: Any, print_fn=print, capacity: Capacity | None = None,
                     start=None) -> MemoryEstimate | None:
    """The start-up estimate of every recipe (``cluster.memory_check``): prints it, then warns
    about (``warn``) or refuses (``error``: :class:`ConfigError` on ``cluster.memory_check``) a
    device it exceeds; ``off``: nothing. ``recipe`` / ``start`` as in :func:`estimate`. Returns
    the estimate (None when off)."""
    mode = cfg.cluster.memory_check
    if mode in ("off", False):  # a bare YAML off reads as false
        return None
    capacity = capacity or run_capacity(cfg.cluster)
    plan = _planned(cfg, capacity)
    est = estimate(recipe, cfg, plan, capacity, start)
    for line in render_memory(plan, est, capacity).splitlines():
        print_fn(f"[rlinf] {line}")
    over = check_capacity(plan, est, capacity)
    if not over:
        return est
    o = over[0]
    mem = est.components[o.component]
    text = (f"{o.component} on {o.load.label} needs ~{fmt_bytes(o.load.need)} of {fmt_bytes(o.have)} ("
            + ", ".join(f"{n} {fmt_bytes(b)}" for n, b in o.load.parts.items()) + ")"
            + (f"; to bring it under: {remedy_text(mem.remedies)}" if mem.remedies else "")
            + (f" (and {len(over) - 1} more device(s))" if len(over) > 1 else ""))
    if mode == "error":
        raise ConfigError("cluster.memory_check", f"error: {text}; or set cluster.memory_check: warn")
    print_fn(f"[rlinf] warning: memory: {text}")
    return est



