"""The Megatron engine's optimizer: megatron-core's (distributed) Adam from ``actor.optim``, one
step with the same rules as the FSDP engine, and its per-rank state for checkpoints / offload.

* Adam with decoupled weight decay (AdamW) for ``optimizer: adam`` and ``adamw``, weight decay on
  every parameter (no bias / norm exemption), as the FSDP engine does, so both backends take the
  same step from the same config.
* bf16 / fp16 models keep fp32 main weights in the optimizer; fp16 adds dynamic loss scaling
  (``loss_scale_window``). ``use_distributed_optimizer`` shards main weights and Adam moments over
  the data-parallel ranks.
* A step: gradients prepared (fp16: unscaled, overflow -> step skipped), global norm over all
  ranks, clipping to ``clip_grad`` (0 = off), the Adam update at the scheduled LR; a non-finite
  norm skips the update.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlinf.config.actor import OptimConfig


def build_optimizer(ddp_model, optim: OptimConfig, params_dtype: torch.dtype, lr: float):
    """megatron-core's optimizer over the DDP-wrapped model."""
    # lazy: optional extra (megatron)
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    config = OptimizerConfig(
        optimizer="adam", lr=lr, min_lr=optim.min_lr, weight_decay=optim.weight_decay,
        adam_beta1=optim.adam_beta1, adam_beta2=optim.adam_beta2, adam_eps=optim.adam_eps,
        decoupled_weight_decay=True, bf16=optim.bf16, fp16=optim.fp16, params_dtype=params_dtype,
        loss_scale_window=optim.loss_scale_window, clip_grad=optim.clip_grad,
        use_distributed_optimizer=optim.use_distributed_optimizer,
        overlap_param_gather=optim.overlap_param_gather,
    )
    # {} = no per-parameter overrides: weight decay on every parameter, one LR for all
    return get_megatron_optimizer(config, [ddp_model], config_overrides={})


def _parts(optimizer) -> list:
    return list(getattr(optimizer, "chained_optimizers", [optimizer]))


def set_lr(optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def optimizer_step(optimizer, clip_grad: float) -> tuple[bool, float]:
    """Prepare gradients, take the global norm, clip, update; returns ``(stepped, grad_norm)``.
    The norm is taken before clipping and is the same on every rank."""
    # lazy: optional extra (megatron)
    from megatron.core.optimizer import clip_grads

    if optimizer.prepare_grads():  # fp16 overflow (the loss scale has been lowered)
        return False, float("inf")
    grad_norm = float(optimizer.get_grad_norm())
    if not math.isfinite(grad_norm):
        return False, grad_norm
    if clip_grad > 0:
        for part in _parts(optimizer):
            params = part.get_parameters()
            if params:
                clip_grads.clip_grad_by_total_norm_fp32(
                    params, clip_grad, grad_norm, part.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8)
    return bool(optimizer.step_with_ready_grads()), grad_norm


def main_tensors(optimizer) -> list[torch.Tensor]:
    """The tensors the Adam update owns on this rank: main weights and moments (for offload)."""
    out = []
    for part in _parts(optimizer):
        inner = part.optimizer
        for group in inner.param_groups:
            out.extend(group["params"])
        for state in inner.state.values():
            out.extend(v for k, v in state.items() if isinstance(v, torch.Tensor) and k != "step")
    return out


def optimizer_state(optimizer) -> list[dict[str, Any]]:
    """This rank's optimizer state for an exact resume on the same parallel layout: per part the
    inner torch optimizer's state dict, its main weights and the loss scaler."""
    out = []
    for part in _parts(optimizer):
        inner = part.optimizer
        scaler = getattr(part, "grad_scaler", None)
        out.append({
            "inner": inner.state_dict(),
            "main": [p.detach().cpu().clone() for g in inner.param_groups for p in g["params"]],
            "scaler": scaler.state_dict() if scaler is not None else None,
        })
    return out


def load_optimizer_state(optimizer, state: list[dict[str, Any]]) -> None:
    """Restore :func:`optimizer_state` (same layout)."""
    parts = _parts(optimizer)
    if len(parts) != len(state):
        raise ValueError(f"checkpoint has {len(state)} optimizer parts, this optimizer {len(parts)}")
    for part, saved in zip(parts, state):
        inner = part.optimizer
        mains = [p for g in inner.param_groups for p in g["params"]]
        if [tuple(p.shape) for p in mains] != [tuple(t.shape) for t in saved["main"]]:
            raise ValueError("the checkpoint's main weights do not match this optimizer (another "
                             "parallel layout?)")
        with torch.no_grad():
            for p, t in zip(mains, saved["main"]):
                p.copy_(t)
        inner.load_state_dict(saved["inner"])
        if saved["scaler"] is not None:
            part.grad_scaler.load_state_dict(saved["scaler"])
