"""``mfu``: model FLOPs utilisation of the FSDP2 actor step at Qwen2.5-0.5B shape (random weights),
sequences of 2048 tokens, bf16 compute (fp32 master weights), SDPA attention.

MFU = ``6 * params * tokens / step_seconds / peak_flops`` (forward + backward = 6 FLOPs per
parameter per token; embeddings tied, so the LM head is counted once). ``mfu_with_attention`` adds
the attention score / value matmuls, ``12 * layers * hidden * seq`` FLOPs per token (PaLM's
appendix B, not halved for the causal mask). The step is the actor's real one: PPO loss with the
entropy bonus, fp32 log-softmax over the whole vocabulary for the response tokens, AdamW.

Peak bf16 dense tensor FLOPS by GPU name (NVIDIA data sheets, without sparsity): H100 SXM and
H200 989.5 TFLOPS, H100 NVL / H200 NVL 835, H100 PCIe 756, A100 312. A dry run uses a nominal
1 TFLOPS (the figure is then only the formula at work). ``--peak-tflops`` overrides both.
"""

from __future__ import annotations

import statistics
import time

import torch

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

#: Qwen2.5-0.5B's architecture (config.json of Qwen/Qwen2.5-0.5B).
QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                  rope_theta=1000000.0)
#: (substring of the device name, peak bf16 dense TFLOPS); the first match wins.
PEAK_TFLOPS = (("H200 NVL", 835.0), ("H200", 989.5), ("H100 NVL", 835.0), ("H100 PCIe", 756.0),
               ("H100", 989.5), ("A100", 312.0))
DRY_RUN_PEAK_TFLOPS = 1.0
#: (sequence length, prompt tokens, samples per micro-batch, micro-batches, warm-up, timed steps)
GPU_RUN = (2048, 64, 4, 2, 3, 10)
DRY_RUN = (64, 8, 2, 2, 1, 2)
#: Far below any healthy run; catches fp32 compute, a CPU fallback or a broken kernel choice.
MIN_MFU = 0.05


def peak_tflops(device_name: str) -> float | None:
    """Peak bf16 dense TFLOPS of a GPU by its name (None when not in :data:`PEAK_TFLOPS`).

    >>> peak_tflops("NVIDIA H100 80GB HBM3"), peak_tflops("NVIDIA H200"), peak_tflops("Tesla T4")
    (989.5, 989.5, None)
    """
    for key, value in PEAK_TFLOPS:
        if key.lower() in device_name.lower():
            return value
    return None


def mfu(params: int, tokens: int, seconds: float, peak_flops: float) -> float:
    """``6 * params * tokens / seconds / peak_flops``.

    >>> mfu(params=500_000_000, tokens=16384, seconds=0.5, peak_flops=989.5e12)  # doctest: +ELLIPSIS
    0.0993...
    """
    return 6.0 * params * tokens / seconds / peak_flops


def _peak(ctx: Context) -> tuple[float | None, str]:
    if ctx.peak_tflops is not None:
        return ctx.peak_tflops, "--peak-tflops"
    if ctx.dry_run:
        return DRY_RUN_PEAK_TFLOPS, "nominal value of a dry run (not a real peak)"
    name = torch.cuda.get_device_name(0)
    value = peak_tflops(name)
    return value, (f"data sheet value for {name}" if value else f"unknown GPU {name!r}: pass --peak-tflops")


def run(ctx: Context) -> dict:
    """The check (see the module docstring)."""
    seq, prompt, per_micro, n_micro, warmup, timed = DRY_RUN if ctx.dry_run else GPU_RUN
    shape = TINY if ctx.dry_run else QWEN25_05B
    model_dir = save_random_qwen2(ctx.scratch("mfu_model"), seed=ctx.seed, device=ctx.device,
                                  dtype=torch.bfloat16, **shape)
    n = per_micro * n_micro
    batch = make_batch(shape["vocab_size"], [prompt] * n, [seq - prompt] * n, ctx.seed)
    cfg = actor_config(fsdp_config={"mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32"}},
                       model={"attn_implementation": "sdpa"})
    from rlinf.engines.training.fsdp import FSDPEngine

    with world_of_one(backend_for(ctx.device)):
        engine = FSDPEngine(model_dir, cfg, device=engine_device(ctx.device), total_steps=warmup + timed)
        batch.old_logprobs = engine.compute_logprobs(batch, per_micro)[0]
        micro = split(batch, per_micro)
        times, losses = [], []
        if ctx.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for step in range(warmup + timed):
            cuda_sync(ctx.device)
            start = time.perf_counter()
            metrics = engine.train_minibatch(micro, loss_fn(), batch.num_response_tokens)
            cuda_sync(ctx.device)
            if step >= warmup:
                times.append(time.perf_counter() - start)
            losses.append(metrics["loss"])
        params = engine.num_params
        peak_mem = torch.cuda.max_memory_allocated() / 2**30 if ctx.device == "cuda" else None
        del engine
    tokens = int(batch.model_inputs()[1].sum())
    step_s = statistics.median(times)
    peak, source = _peak(ctx)
    attn_flops = 12.0 * shape["num_hidden_layers"] * shape["hidden_size"] * seq * tokens
    figures = {
        "dry_run": ctx.dry_run, "params": params, "seq_len": seq, "tokens_per_step": tokens,
        "response_tokens_per_step": batch.num_response_tokens, "micro_batches": n_micro,
        "samples_per_micro_batch": per_micro, "timed_steps": timed,
        "step_seconds": step_s, "step_seconds_all": times, "tokens_per_s": tokens / step_s,
        "peak_tflops": peak, "peak_source": source,
        "mfu": mfu(params, tokens, step_s, peak * 1e12) if peak else None,
        "mfu_with_attention": (6.0 * params * tokens + attn_flops) / step_s / (peak * 1e12) if peak else None,
        "losses": losses, "peak_memory_gib": peak_mem,
    }
    rules = [("mfu", ">", 0.0), ("tokens_per_s", ">", 0.0)]
    if not ctx.dry_run:
        rules[0] = ("mfu", ">=", MIN_MFU)
    return outcome(figures, rules)
