"""``liger``: liger-kernel's Triton kernels against plain torch on CUDA.

1. Fused linear cross entropy (``LigerFusedLinearCrossEntropyLoss``) at Qwen2.5-0.5B's LM head
   (hidden 896, vocabulary 151936, 4096 tokens), fp32 and bf16: the mean loss, the per-token
   log-probs (``reduction="none"``) and the gradients of the hidden states and of the head
   against ``cross_entropy(x @ W.T)``.
2. The patch the FSDP engine applies (``actor.fsdp_config.use_liger_kernel``:
   :func:`rlinf.engines.training.fsdp_setup.apply_liger`: RoPE, RMSNorm, SwiGLU) on a random Qwen2
   in fp32: response log-probs, entropies and the gradients of a policy-gradient loss against the
   unpatched model. Liger's RoPE patch replaces a module-level function of transformers' Qwen2, so
   the unpatched model runs first.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from toolkits.gpu_check.common import SMALL, TINY, dict_rel_diff, make_batch, max_abs_diff, rel_diff
from toolkits.gpu_check.report import outcome
from toolkits.gpu_check.runner import Context

#: (tokens, hidden, vocabulary) of the fused-linear-cross-entropy comparison.
HEAD = (4096, 896, 151936)
DRY_HEAD = (64, 32, 512)
RULES = [
    ("fp32_loss_abs_diff", "<=", 1e-4), ("fp32_logprob_max_abs_diff", "<=", 1e-3),
    ("fp32_grad_input_rel_diff", "<=", 1e-3), ("fp32_grad_weight_rel_diff", "<=", 1e-3),
    ("bf16_loss_abs_diff", "<=", 2e-2), ("bf16_logprob_max_abs_diff", "<=", 0.1),
    ("bf16_grad_input_rel_diff", "<=", 5e-2), ("bf16_grad_weight_rel_diff", "<=", 5e-2),
    ("model_patched_modules", ">=", 1), ("model_logprob_max_abs_diff", "<=", 1e-4),
    ("model_entropy_max_abs_diff", "<=", 1e-4), ("model_grad_rel_diff", "<=", 1e-3),
]


def fused_linear_ce(dtype: torch.dtype, tokens: int, hidden: int, vocab: int, device: str,
                    seed: int) -> dict[str, float]:
    """Liger's fused linear cross entropy vs ``F.cross_entropy`` of the full logits (fp32)."""
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g).to(device, dtype)
    w = (torch.randn(vocab, hidden, generator=g) * 0.05).to(device, dtype)
    target = torch.randint(0, vocab, (tokens,), generator=g).to(device)

    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    per_token = F.cross_entropy((xr @ wr.t()).float(), target, reduction="none")
    per_token.mean().backward()
    xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss = LigerFusedLinearCrossEntropyLoss()(wl, xl, target)
    loss.backward()
    with torch.no_grad():
        liger_tokens = LigerFusedLinearCrossEntropyLoss(reduction="none")(w, x, target)
    return {
        "loss": loss.item(), "loss_abs_diff": abs(loss.item() - per_token.mean().item()),
        "logprob_max_abs_diff": max_abs_diff(-liger_tokens.float(), -per_token.detach()),
        "grad_input_rel_diff": rel_diff(xl.grad.float(), xr.grad.float()),
        "grad_weight_rel_diff": rel_diff(wl.grad.float(), wr.grad.float()),
    }


def _logprobs_and_grads(model, batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    from rlinf.algorithms import masked_mean
    from rlinf.engines.training.common import response_logprobs

    model.zero_grad(set_to_none=True)
    logp, ent = response_logprobs(model, batch, 1.0, True)
    mask = batch.response_mask
    (masked_mean(-logp * batch.advantages, mask) - 0.01 * masked_mean(ent, mask)).backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach().cpu(), ent.detach().cpu(), grads


def patched_model(ctx: Context) -> dict[str, float]:
    """The engine's Liger patch vs the unpatched model, fp32 on ``ctx.device``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlinf.engines.training.common import batch_to
    from rlinf.engines.training.fsdp_setup import apply_liger

    shape = TINY if ctx.dry_run else SMALL
    torch.manual_seed(ctx.seed)
    plain = Qwen2ForCausalLM(Qwen2Config(**shape, tie_word_embeddings=True, pad_token_id=0)).to(ctx.device)
    patched = copy.deepcopy(plain)
    batch = make_batch(shape["vocab_size"], [5, 17, 9, 30], [40, 12, 25, 8], ctx.seed)
    batch = batch_to(batch, torch.device(ctx.device))
    logp, ent, grads = _logprobs_and_grads(plain, batch)
    apply_liger(patched)
    n_patched = sum(1 for m in patched.modules() if m._get_name().startswith("Liger"))
    logp_l, ent_l, grads_l = _logprobs_and_grads(patched, batch)
    mask = batch.response_mask.bool().cpu()
    return {"patched_modules": n_patched, "logprob_max_abs_diff": max_abs_diff(logp_l[mask], logp[mask]),
            "entropy_max_abs_diff": max_abs_diff(ent_l[mask], ent[mask]),
            "grad_rel_diff": dict_rel_diff(grads_l, grads)[0]}


def run(ctx: Context) -> dict:
    """The check (see the module docstring)."""
    tokens, hidden, vocab = DRY_HEAD if ctx.dry_run else HEAD
    figures: dict = {"head": {"tokens": tokens, "hidden": hidden, "vocab": vocab}}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for key, value in fused_linear_ce(dtype, tokens, hidden, vocab, ctx.device, ctx.seed).items():
            figures[f"{name}_{key}"] = value
        if ctx.device == "cuda":
            torch.cuda.empty_cache()
    for key, value in patched_model(ctx).items():
        figures[f"model_{key}"] = value
    return outcome(figures, RULES)
