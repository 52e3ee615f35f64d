"""``fsdp_bf16``: one FSDP2 actor step (PPO loss + entropy bonus, two micro-batches, AdamW) on the
same random Qwen2 and batch, twice: fp32 on the CPU (the reference the CPU tests trust) and bf16
compute (``mixed_precision.param_dtype: bf16``, fp32 master weights and reduction) on CUDA.

Compared: log-probs before the step, the loss, the gradient norm, the gradients the optimizer
applies (captured at ``optimizer.step``) and the weight update. A dry run compares CPU bf16 with
CPU fp32 (same code, same tolerances).
"""

from __future__ import annotations

import torch

from toolkits.gpu_check.common import (
    SMALL,
    TINY,
    actor_config,
    backend_for,
    capture_grads,
    dict_rel_diff,
    engine_device,
    loss_fn,
    make_batch,
    max_abs_diff,
    save_random_qwen2,
    split,
    world_of_one,
)
from toolkits.gpu_check.report import outcome
from toolkits.gpu_check.runner import Context

#: bf16 has an 8-bit mantissa (relative rounding 2**-9 ~ 0.002); these leave room for a few layers
#: of accumulated rounding and nothing more (a wrong cast, a missing reduction is far above).
RULES = [("logprob_max_abs_diff", "<=", 0.05), ("loss_abs_diff", "<=", 0.01), ("grad_norm_rel_diff", "<=", 0.03),
         ("grad_rel_diff", "<=", 0.05), ("update_cosine", ">=", 0.9)]


def actor_step(model_dir: str, cfg, device: str, batch, micro: int, set_old: bool) -> dict:
    """Log-probs, then one training step; returns the log-probs, metrics, applied gradients and
    the weight update (fp32, CPU). ``set_old``: this engine's log-probs become the batch's old
    log-probs (the reference sets them, the candidate reuses them)."""
    from rlinf.engines.training.fsdp import FSDPEngine

    engine = FSDPEngine(model_dir, cfg, temperature=1.0, device=engine_device(device), total_steps=1)
    logp, _ = engine.compute_logprobs(batch, micro)
    if set_old:
        batch.old_logprobs = logp.clone()
    before = {k: v.float().clone() for k, v in engine.full_state_dict().items()}
    grads = capture_grads(engine.model, engine.optimizer)
    metrics = engine.train_minibatch(split(batch, micro), loss_fn(), batch.num_response_tokens)
    after = {k: v.float().clone() for k, v in engine.full_state_dict().items()}
    del engine
    return {"logp": logp, "metrics": metrics, "grads": dict(grads),
            "update": {k: after[k] - before[k] for k in after}}


def run(ctx: Context) -> dict:
    """The check (see the module docstring)."""
    shape = TINY if ctx.dry_run else SMALL
    model_dir = save_random_qwen2(ctx.scratch("fsdp_model"), seed=ctx.seed, **shape)
    if ctx.dry_run:
        batch, micro = make_batch(shape["vocab_size"], [3, 5, 1, 4, 2, 5], [6, 2, 4, 1, 5, 3], ctx.seed), 3
    else:
        batch, micro = make_batch(shape["vocab_size"], [8, 32, 17, 25, 3, 30, 12, 20],
                                  [96, 40, 64, 17, 88, 5, 71, 50], ctx.seed), 4
    bf16 = {"mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32"}}
    with world_of_one(backend_for(ctx.device)):
        ref = actor_step(model_dir, actor_config(), "cpu", batch, micro, set_old=True)
        got = actor_step(model_dir, actor_config(fsdp_config=bf16), ctx.device, batch, micro, set_old=False)
    mask = batch.response_mask.bool()
    grad_rel, grad_worst = dict_rel_diff(got["grads"], ref["grads"])
    update_rel, _ = dict_rel_diff(got["update"], ref["update"])
    flat_got = torch.cat([v.flatten() for v in got["update"].values()]).double()
    flat_ref = torch.cat([ref["update"][k].flatten() for k in got["update"]]).double()
    m_got, m_ref = got["metrics"], ref["metrics"]
    figures = {
        "reference": "cpu fp32", "candidate": f"{ctx.device} bf16" + (" (dry run)" if ctx.dry_run else ""),
        "params": sum(v.numel() for v in ref["update"].values()), "response_tokens": batch.num_response_tokens,
        "logprob_max_abs_diff": max_abs_diff(got["logp"][mask], ref["logp"][mask]),
        "loss_ref": m_ref["loss"], "loss": m_got["loss"], "loss_abs_diff": abs(m_got["loss"] - m_ref["loss"]),
        "grad_norm_ref": m_ref["grad_norm"], "grad_norm": m_got["grad_norm"],
        "grad_norm_rel_diff": abs(m_got["grad_norm"] - m_ref["grad_norm"]) / max(m_ref["grad_norm"], 1e-12),
        "grad_rel_diff": grad_rel, "grad_max_tensor_rel_diff": grad_worst,
        "update_rel_diff": update_rel,
        "update_cosine": float(torch.nn.functional.cosine_similarity(flat_got, flat_ref, dim=0)),
    }
    return outcome(figures, RULES)
