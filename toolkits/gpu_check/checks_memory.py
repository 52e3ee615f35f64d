"""``memory_estimate``: the memory estimator (:mod:`rlinf.config.memory`, what ``cluster.memory_check``
and ``python -m rlinf.scheduler.placement CONFIG --memory`` print) against the CUDA allocator's peak.

On CUDA: FSDP2 actor steps at Qwen2.5-0.5B shape (random weights), bf16 compute with fp32 master
weights, SDPA, one micro-batch of 4 x 2048 tokens (64 prompt + 1984 response), the PPO loss with
the entropy bonus; two steps (the second holds the AdamW state), ``torch.cuda.max_memory_allocated``
over them, without and with gradient checkpointing. Pass: each estimate within 25 % of its peak.

A dry run (CPU) runs the same code at the tiny shape and reports the estimate, but the CPU has no
allocator peak to compare it with (RSS at these sizes is allocator noise): the bound is not applied
there; ``bench/bench_memory_estimate.py`` compares estimates with CPU peak RSS at sizes where it means
something.
"""

from __future__ import annotations

import gc

import torch

from toolkits.gpu_check.checks_mfu import QWEN25_05B
from toolkits.gpu_check.common import (
    TINY,
    actor_config,
    backend_for,
    cuda_sync,
    engine_device,
    loss_fn,
    make_batch,
    save_random_qwen2,
    split,
    world_of_one,
)
from toolkits.gpu_check.report import outcome
from toolkits.gpu_check.runner import Context

#: (sequence length, prompt tokens, samples per micro-batch)
GPU_RUN = (2048, 64, 4)
DRY_RUN = (64, 8, 2)
#: |estimate / measured - 1| must stay within this
TOLERANCE = 0.25


def estimate_bytes(shape: dict, seq: int, prompt: int, micro: int, grad_ckpt: bool) -> tuple[int, dict]:
    """The estimator's peak for this check's step (world of one, bf16 compute, fp32 master)."""
    from rlinf.config.memory import ModelShape, TrainSetup, training_items

    ms = ModelShape(vocab=shape["vocab_size"], hidden=shape["hidden_size"], layers=shape["num_hidden_layers"],
                    heads=shape["num_attention_heads"], kv_heads=shape["num_key_value_heads"],
                    intermediate=shape["intermediate_size"])
    items = training_items(TrainSetup(ms, micro_batch=micro, seq=seq, response=seq - prompt, master=4, compute=2,
                                      reduce=4, grad_ckpt=grad_ckpt, entropy=True))
    return sum(i.bytes for i in items), {i.name: i.bytes for i in items}


def measure(model_dir: str, ctx: Context, batch, micro: int, grad_ckpt: bool) -> float | None:
    """Peak allocated bytes over two training steps (None on the CPU)."""
    from rlinf.engines.training.fsdp import FSDPEngine

    cfg = actor_config(fsdp_config={"mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32"}},
                       model={"attn_implementation": "sdpa", "gradient_checkpointing": grad_ckpt})
    engine = FSDPEngine(model_dir, cfg, device=engine_device(ctx.device), total_steps=2)
    batch.old_logprobs = engine.compute_logprobs(batch, micro)[0]
    cuda_sync(ctx.device)
    if ctx.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(2):
        engine.train_minibatch(split(batch, micro), loss_fn(), batch.num_response_tokens)
    cuda_sync(ctx.device)
    peak = float(torch.cuda.max_memory_allocated()) if ctx.device == "cuda" else None
    del engine
    gc.collect()
    if ctx.device == "cuda":
        torch.cuda.empty_cache()
    return peak


def run(ctx: Context) -> dict:
    """The check (see the module docstring)."""
    seq, prompt, micro = DRY_RUN if ctx.dry_run else GPU_RUN
    shape = TINY if ctx.dry_run else QWEN25_05B
    model_dir = save_random_qwen2(ctx.scratch("memory_model"), seed=ctx.seed, device=ctx.device,
                                  dtype=torch.bfloat16, **shape)
    batch = make_batch(shape["vocab_size"], [prompt] * micro, [seq - prompt] * micro, ctx.seed)
    figures: dict = {"dry_run": ctx.dry_run, "seq_len": seq, "micro_batch": micro}
    rules = []
    with world_of_one(backend_for(ctx.device)):
        for tag, ckpt in (("", False), ("_ckpt", True)):
            est, parts = estimate_bytes(shape, seq, prompt, micro, ckpt)
            # a dry run has no peak to compare: one engine build and step shows the plumbing
            peak = None if ctx.dry_run and ckpt else measure(model_dir, ctx, batch, micro, ckpt)
            figures[f"estimate_gib{tag}"] = est / 2**30
            figures[f"parts_gib{tag}"] = {k: v / 2**30 for k, v in parts.items()}
            figures[f"measured_gib{tag}"] = None if peak is None else peak / 2**30
            if peak is not None:
                figures[f"abs_rel_error{tag}"] = abs(est / peak - 1)
                rules.append((f"abs_rel_error{tag}", "<=", TOLERANCE))
            else:
                rules.append((f"estimate_gib{tag}", ">", 0))
    if ctx.dry_run:
        figures["bound"] = ("not applied: the CPU has no allocator peak (bench/bench_memory_estimate.py "
                            "compares with CPU peak RSS)")
    return outcome(figures, rules)
