"""What every training backend shares (FSDP2, DeepSpeed, Megatron): dtype names, the optimizer of
``actor.optim``, batch movement and the padding batch of a rank with fewer micro-batches, response
log-probs from an HF model, sums / maxima / metric averages over ranks, the gradient norm (also of
sharded ``DTensor`` gradients) and moving gradients or optimizer state between devices. Nothing
here depends on one backend; each backend's own set-up lives in its adapter (FSDP2:
:mod:`rlinf.engines.training.fsdp_setup`).

Example:
    >>> parse_dtype("bf16"), to_float(torch.tensor(2.5))
    (torch.bfloat16, 2.5)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from rlinf.algorithms import entropy_from_logits
from rlinf.data.rollout_batch import RolloutBatch

__all__ = ["batch_to", "build_optimizer", "clip_grad_norm", "dummy_batch", "max_over_ranks", "move_grads",
           "move_optimizer_state", "parse_dtype", "reduce_metrics", "response_logprobs", "sum_over_ranks",
           "to_float"]

_DTYPES = {
    "fp32": torch.float32, "float32": torch.float32,
    "fp16": torch.float16, "float16": torch.float16,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
}


def parse_dtype(name: str) -> torch.dtype:
    """``"bf16"`` / ``"bfloat16"`` / ... -> ``torch.dtype``.

    >>> parse_dtype("bf16"), parse_dtype("float32")
    (torch.bfloat16, torch.float32)
    """
    try:
        return _DTYPES[str(name).lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(_DTYPES)}") from None


def build_optimizer(params, optim_cfg, lr: float) -> torch.optim.Optimizer:
    """``actor.optim.optimizer``: adam and adamw both build AdamW (decoupled weight decay, as
    Megatron's adam)."""
    if optim_cfg.optimizer not in ("adam", "adamw"):
        raise ValueError(f"actor.optim.optimizer: unknown optimizer {optim_cfg.optimizer!r}")
    return torch.optim.AdamW(params, lr=lr, betas=(optim_cfg.adam_beta1, optim_cfg.adam_beta2),
                             eps=optim_cfg.adam_eps, weight_decay=optim_cfg.weight_decay)


def sum_over_ranks(value: float, device: torch.device) -> float:
    """Sum of a number over all ranks (the value itself when not distributed)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def batch_to(batch: RolloutBatch, device: torch.device) -> RolloutBatch:
    """A copy of ``batch`` whose tensor fields live on ``device``."""
    changes = {f.name: getattr(batch, f.name).to(device) for f in dataclasses.fields(batch)
               if isinstance(getattr(batch, f.name), torch.Tensor)}
    return dataclasses.replace(batch, **changes)


def dummy_batch(pad_token_id: int) -> RolloutBatch:
    """One sample, one prompt token, one masked response token: run by ranks that have fewer
    micro-batches than others so that every rank joins the same number of FSDP collectives."""
    return RolloutBatch.from_token_lists([[pad_token_id]], [[]], pad_token_id=pad_token_id)


def response_logprobs(model: torch.nn.Module, batch: RolloutBatch, temperature: float,
                      with_entropy: bool, autocast_dtype: torch.dtype | None = None,
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Forward ``batch`` (already on the model's device) and return fp32 ``(logprobs [b, R],
    entropy [b, R] or None)`` of the response tokens, 0 outside ``response_mask``.

    Position ``P - 1 + t`` predicts response token ``t``; only the last ``R + 1`` positions go
    through the LM head (``logits_to_keep``). Logits are divided by ``temperature`` first.
    """
    P, R = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    if P < 1:
        raise ValueError("the batch needs at least one prompt column (position P-1 predicts response token 0)")
    input_ids, attention_mask, position_ids = batch.model_inputs()
    with torch.autocast(input_ids.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    use_cache=False, logits_to_keep=R + 1)
    return response_scores(out.logits, batch, temperature, with_entropy)


def response_scores(logits: torch.Tensor, batch: RolloutBatch, temperature: float,
                    with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """From a forward's last ``R + 1`` positions of logits: fp32 ``(logprobs [b, R], entropy
    [b, R] or None)`` of ``batch``'s response tokens, logits divided by ``temperature`` first,
    0 outside ``response_mask`` (the text and the vision-language forwards share it)."""
    R = batch.response_ids.shape[1]
    logits = logits[:, :R].float() / temperature
    mask = batch.response_mask.bool()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    logp = torch.where(mask, logp, torch.zeros_like(logp))
    entropy = None
    if with_entropy:
        entropy = entropy_from_logits(logits)
        entropy = torch.where(mask, entropy, torch.zeros_like(entropy))
    return logp, entropy


def max_over_ranks(value: int, device: torch.device) -> int:
    """``max`` of an int over all ranks (the value itself when not distributed)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    t = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def clip_grad_norm(model: torch.nn.Module, clip: float, device: torch.device) -> float:
    """Total gradient 2-norm over all ranks (before clipping); scales the gradients to norm
    ``clip`` when ``clip > 0``, the norm exceeds it and is finite."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    norm = torch.nn.utils.get_total_norm([p.grad for p in params], norm_type=2.0)
    if isinstance(norm, DTensor):  # partial norms; with cpu_offload they sit on the CPU
        norm = norm.to(device).full_tensor()
    value = float(norm.item())
    if clip > 0 and math.isfinite(value):
        torch.nn.utils.clip_grads_with_norm_(params, clip, norm)
    return value


def to_float(value: Any) -> float:
    return float(value.detach().float().item()) if isinstance(value, torch.Tensor) else float(value)


def reduce_metrics(sums: dict[str, float], counts: dict[str, int], loss_sum: float) -> dict[str, float]:
    """Average every metric over all micro-batches of all ranks (a key missing on some ranks is
    averaged over the micro-batches that reported it); ``loss`` is summed over ranks (each rank
    holds its share of the token-weighted minibatch loss)."""
    local = (sums, counts, loss_sum)
    if dist.is_initialized() and dist.get_world_size() > 1:
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, local)
    else:
        gathered = [local]
    total_s: dict[str, float] = {}
    total_c: dict[str, int] = {}
    for s, c, _ in gathered:
        for k, v in s.items():
            total_s[k] = total_s.get(k, 0.0) + v
            total_c[k] = total_c.get(k, 0) + c[k]
    out = {k: total_s[k] / total_c[k] for k in sorted(total_s)}
    out["loss"] = sum(g[2] for g in gathered)
    return out


# ---- offloading (GPU only) ----------------------------------------------------------------------
def move_grads(model: torch.nn.Module, device: torch.device | str) -> None:
    for p in model.parameters():
        if p.grad is not None:
            p.grad = p.grad.to(device, non_blocking=True)


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device | str) -> None:
    """Move every tensor of the optimizer state (Adam moments; the ``step`` counters of
    non-capturable Adam stay on the CPU where they live) to ``device``."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and not (key == "step" and value.device.type == "cpu"):
                state[key] = value.to(device, non_blocking=True)
