"""The FSDP2 adapter's set-up from ``actor.fsdp_config``: the device mesh, ``fully_shard`` of every
decoder layer and the root with the mixed-precision and offload policies, explicit prefetching,
Liger's kernels, and the check of what this engine cannot run. Used by
:class:`~rlinf.engines.training.fsdp.FSDPEngine` (and the embodied actor's mesh); the pieces every
training backend shares are in :mod:`rlinf.engines.training.common`.

Example (a process that is not distributed: ``fsdp_size: -1`` shards over the whole world)::

    >>> from rlinf.config.actor import ActorConfig
    >>> check_config(ActorConfig(), torch.device("cpu"))      # nothing this engine cannot run
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from rlinf.config.actor import ActorConfig, FsdpConfig
from rlinf.engines.training.common import parse_dtype

__all__ = ["apply_liger", "build_mesh", "check_config", "decoder_layers", "set_prefetch", "shard_model"]


def build_mesh(device_type: str, world_size: int, sharding_strategy: str, fsdp_size: int) -> DeviceMesh:
    """The data-parallel mesh for ``fully_shard``.

    - ``no_shard``: 2-D ``(world, 1)`` mesh: every rank holds full replicas, gradients are
      all-reduced (DDP-like, through FSDP2's HSDP path with a shard group of one).
    - ``fsdp_size`` in (-1, world): 1-D mesh over the world (full sharding).
    - otherwise: 2-D hybrid mesh ``(world // fsdp_size, fsdp_size)``: shard within groups of
      ``fsdp_size`` consecutive ranks, replicate across groups (HSDP).
    """
    if sharding_strategy == "no_shard":
        return init_device_mesh(device_type, (world_size, 1), mesh_dim_names=("replicate", "shard"))
    if fsdp_size in (-1, world_size):
        return init_device_mesh(device_type, (world_size,), mesh_dim_names=("shard",))
    if fsdp_size < 1 or world_size % fsdp_size:
        raise ValueError(f"actor.fsdp_config.fsdp_size={fsdp_size} must be -1 or a positive divisor "
                         f"of the world size {world_size}")
    return init_device_mesh(device_type, (world_size // fsdp_size, fsdp_size),
                            mesh_dim_names=("replicate", "shard"))


def check_config(cfg: ActorConfig, device: torch.device) -> None:
    """Reject options this engine cannot run, before anything is loaded."""
    fc = cfg.fsdp_config
    if fc.use_liger_kernel and device.type != "cuda":
        raise ValueError(f"actor.fsdp_config.use_liger_kernel=true needs a GPU (Liger kernels are Triton "
                         f"GPU kernels); this engine runs on {device}. Set it to false on CPU.")
    if fc.strategy.lower() not in ("fsdp", "fsdp2"):
        raise ValueError(f"actor.fsdp_config.strategy must be fsdp or fsdp2, got {fc.strategy!r}")


def apply_liger(model: torch.nn.Module) -> None:
    """Patch the model instance with Liger's Triton kernels (RoPE, RMSNorm, SwiGLU); the engine
    computes log-probs from logits itself, so the fused cross-entropy is left off."""
    try:
        # lazy: optional (liger-kernel), only with its config key on
        import liger_kernel.transformers as liger
    except ImportError as exc:
        raise ImportError("actor.fsdp_config.use_liger_kernel=true needs the liger-kernel package") from exc
    model_type = model.config.model_type
    patch = getattr(liger, f"apply_liger_kernel_to_{model_type}", None)
    if patch is None:
        raise ValueError(f"use_liger_kernel: Liger has no patch for model_type {model_type!r}")
    patch(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=False,
          model=model)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks (HF ``_no_split_modules`` classes, else ``model.model.layers``)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers and hasattr(getattr(model, "model", None), "layers"):
        layers = list(model.model.layers)
    if not layers:
        raise ValueError(f"cannot find the decoder layers of {type(model).__name__} to shard")
    return layers


def shard_model(model: torch.nn.Module, fc: FsdpConfig, device: torch.device, world_size: int) -> DeviceMesh:
    """``fully_shard`` every decoder layer, then the root (embeddings, final norm, LM head);
    returns the mesh. See :mod:`rlinf.engines.training.fsdp` for what each key does."""
    mesh = build_mesh(device.type, world_size, fc.sharding_strategy, fc.fsdp_size)
    mp = fc.mixed_precision
    buffer_dtype = parse_dtype(mp.buffer_dtype)
    for buf in model.buffers():  # FSDP2's policy has no buffer dtype: cast before sharding
        if buf.is_floating_point():
            buf.data = buf.data.to(buffer_dtype)
    kwargs = dict(
        mesh=mesh,
        reshard_after_forward=fc.reshard_after_forward and fc.sharding_strategy != "shard_grad_op",
        mp_policy=MixedPrecisionPolicy(param_dtype=parse_dtype(mp.param_dtype),
                                       reduce_dtype=parse_dtype(mp.reduce_dtype)),
        offload_policy=(CPUOffloadPolicy(pin_memory=fc.offload_pin_memory)
                        if fc.cpu_offload and device.type != "cpu" else OffloadPolicy()),
    )
    layers = decoder_layers(model)
    for layer in layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    set_prefetch(layers, fc.forward_prefetch, fc.backward_prefetch)
    return mesh


def set_prefetch(layers: list, forward: bool, backward: str | None) -> None:
    """``forward_prefetch``: layer i's forward issues layer i+1's all-gather; ``backward_prefetch:
    pre``: layer i's backward issues layer i-1's all-gather (FSDP2's explicit prefetching)."""
    for i, layer in enumerate(layers):
        if forward and i + 1 < len(layers):
            layer.set_modules_to_forward_prefetch([layers[i + 1]])
        if backward == "pre" and i > 0:
            layer.set_modules_to_backward_prefetch([layers[i - 1]])
