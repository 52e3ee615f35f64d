"""``megatron_step`` and ``megatron_logits``: the Megatron backend on one GPU.

``megatron_step``: the FSDP2 engine (fp32, CPU) takes the reference step; then the Megatron engine
(bf16 weights, ``optim.bf16`` fp32 main weights, ``use_distributed_optimizer``, TP=1, PP=1,
converted on the fly from the same HF folder) computes log-probs and takes 4 steps on the same
batch (PPO loss, fixed old log-probs: the loss must go down). Its first loss, gradient norm and
log-probs are compared with the reference. Then ``offload()`` must free the weights, gradient
buffers and optimizer state (every storage shrunk to 0 bytes; on CUDA ``memory_allocated`` drops
by >= 90% of their bytes) and ``onload()`` must give the same log-probs bit for bit and a finite
next step.

``megatron_logits``: the converter (HF -> Megatron TP=1, PP=1), its bit-exact round trip back to
HF, and megatron-core's fp32 logits against HF's on CUDA
(:func:`rlinf.engines.training.megatron.logit_check.logit_check`, the tolerance of the converter's
``--verify``). Without CUDA only the round trip runs and the check is a skip.
"""

from __future__ import annotations

import math
import time

import torch

from toolkits.gpu_check.common import (
    SMALL,
    TINY,
    actor_config,
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

STEPS = 4
LR = 1e-3
MIN_FREED_FRACTION = 0.9
#: bf16 weights (not only bf16 compute) against fp32: looser than fsdp_bf16's bounds.
STEP_RULES = [("logprob_max_abs_diff_vs_fsdp", "<=", 0.1), ("loss_abs_diff_vs_fsdp", "<=", 0.02),
              ("grad_norm_rel_diff_vs_fsdp", "<=", 0.05), ("loss_decreased", "==", 1),
              ("storage_bytes_left_offloaded", "==", 0), ("logprobs_equal_after_onload", "==", 1),
              ("loss_after_onload_finite", "==", 1)]


def _batch(ctx: Context, vocab: int):
    if ctx.dry_run:
        return make_batch(vocab, [3, 5, 1, 4], [6, 2, 4, 3], ctx.seed), 2
    return make_batch(vocab, [8, 32, 17, 25, 3, 30, 12, 20], [96, 40, 64, 17, 88, 5, 71, 50], ctx.seed), 4


def fsdp_reference(model_dir: str, batch, micro: int) -> dict:
    """fp32 FSDP2 on the CPU: log-probs (set as the batch's old log-probs) and one step's metrics."""
    from rlinf.engines.training.fsdp import FSDPEngine

    with world_of_one("gloo"):
        engine = FSDPEngine(model_dir, actor_config(lr=LR), device=torch.device("cpu"), total_steps=STEPS)
        logp, _ = engine.compute_logprobs(batch, micro)
        batch.old_logprobs = logp.clone()
        metrics = engine.train_minibatch(split(batch, micro), loss_fn(), batch.num_response_tokens)
        del engine
    return {"logp": logp, "metrics": metrics}


def _storages(tensors) -> dict[int, torch.UntypedStorage]:
    out = {}
    for t in tensors:
        s = t.untyped_storage()
        out.setdefault(s.data_ptr(), s)
    return out


def _megatron_state(engine) -> list[torch.Tensor]:
    from rlinf.engines.training.megatron.optimizer import main_tensors

    grads = [b.grad_data for b in engine.model.buffers + engine.model.expert_parallel_buffers]
    return list(engine.module.parameters()) + grads + main_tensors(engine.optimizer)


def _allocated(device: str) -> int | None:
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def megatron_run(model_dir: str, ctx: Context, batch, micro: int) -> dict:
    """The Megatron engine's log-probs, ``STEPS`` steps, then offload / onload and one more step."""
    from rlinf.engines.training.megatron.engine import MegatronEngine

    cfg = actor_config("megatron", lr=LR, model={"precision": "bf16", "tensor_model_parallel_size": 1,
                                                 "pipeline_model_parallel_size": 1},
                       optim={"bf16": True, "use_distributed_optimizer": True},
                       megatron={"use_hf_ckpt": True, "ckpt": {"save_path": ctx.scratch("megatron_cache")}})
    with world_of_one("nccl" if ctx.device == "cuda" else "gloo"):
        engine = MegatronEngine(model_dir, cfg, temperature=1.0, device=engine_device(ctx.device),
                                total_steps=STEPS + 1)
        logp, _ = engine.compute_logprobs(batch, micro)
        steps = [engine.train_minibatch(split(batch, micro), loss_fn(), batch.num_response_tokens)
                 for _ in range(STEPS)]
        before = engine.compute_logprobs(batch, micro)[0]
        storages = _storages(_megatron_state(engine))
        expected = sum(s.nbytes() for s in storages.values())
        on = _allocated(ctx.device)
        engine.offload()
        left = sum(s.nbytes() for s in storages.values())
        off = _allocated(ctx.device)
        engine.onload()
        after = engine.compute_logprobs(batch, micro)[0]
        last = engine.train_minibatch(split(batch, micro), loss_fn(), batch.num_response_tokens)
        del engine
    return {"logp": logp, "steps": steps, "expected": expected, "left": left, "on": on, "off": off,
            "equal": bool(torch.equal(before, after)), "last": last}


def run_step(ctx: Context) -> dict:
    """``megatron_step`` (see the module docstring)."""
    shape = TINY if ctx.dry_run else SMALL
    model_dir = save_random_qwen2(ctx.scratch("megatron_step_model"), seed=ctx.seed, **shape)
    batch, micro = _batch(ctx, shape["vocab_size"])
    ref = fsdp_reference(model_dir, batch, micro)
    got = megatron_run(model_dir, ctx, batch, micro)
    mask = batch.response_mask.bool()
    first, ref_m = got["steps"][0], ref["metrics"]
    losses = [m["loss"] for m in got["steps"]]
    figures = {
        "device": ctx.device, "steps": STEPS, "lr": LR, "losses": losses,
        "loss_decreased": all(math.isfinite(x) for x in losses) and losses[-1] < losses[0],
        "logprob_max_abs_diff_vs_fsdp": max_abs_diff(got["logp"][mask], ref["logp"][mask]),
        "loss_first": first["loss"], "loss_fsdp": ref_m["loss"],
        "loss_abs_diff_vs_fsdp": abs(first["loss"] - ref_m["loss"]),
        "grad_norm_first": first["grad_norm"], "grad_norm_fsdp": ref_m["grad_norm"],
        "grad_norm_rel_diff_vs_fsdp": abs(first["grad_norm"] - ref_m["grad_norm"]) / max(ref_m["grad_norm"], 1e-12),
        "offload_state_bytes": got["expected"], "storage_bytes_left_offloaded": got["left"],
        "allocated_before_offload": got["on"], "allocated_offloaded": got["off"],
        "logprobs_equal_after_onload": got["equal"], "loss_after_onload": got["last"]["loss"],
        "loss_after_onload_finite": math.isfinite(got["last"]["loss"]),
    }
    rules = list(STEP_RULES)
    if ctx.device == "cuda":
        figures["freed_fraction"] = (got["on"] - got["off"]) / max(got["expected"], 1)
        rules.append(("freed_fraction", ">=", MIN_FREED_FRACTION))
    return outcome(figures, rules)


def run_logits(ctx: Context) -> dict:
    """``megatron_logits`` (see the module docstring)."""
    from rlinf.engines.training.megatron import convert, logit_check
    from toolkits.ckpt_convertor.hf_to_megatron import LOGIT_TOLERANCE

    shape = TINY if ctx.dry_run else SMALL
    hf = save_random_qwen2(ctx.scratch("megatron_logits_model"), seed=ctx.seed, **shape)
    target = ctx.scratch("megatron_logits_converted")
    start = time.monotonic()
    meta = convert.hf_to_megatron(hf, target, 1, 1, overwrite=True)
    figures = {"convert_seconds": time.monotonic() - start, "padded_vocab_size": meta["padded_vocab_size"],
               "round_trip_tensors": convert.verify_round_trip(hf, target), "logit_tolerance": LOGIT_TOLERANCE}
    if ctx.device != "cuda":
        return outcome(figures, skip="round trip only: megatron-core's forward (the logit check) needs CUDA")
    [figures["logit_max_abs_diff"]] = logit_check.logit_check([logit_check.LogitCase(hf, target)],
                                                              device="cuda", timeout_s=120.0)
    return outcome(figures, [("round_trip_tensors", ">", 0), ("logit_max_abs_diff", "<=", LOGIT_TOLERANCE)])
