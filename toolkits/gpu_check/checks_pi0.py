"""``pi0_ppo``: one πRL PPO update of a real-size π0 in bf16 — step time and peak memory.

The model is built with random weights at openpi's sizes (no download): PaliGemma = SigLIP
So400m/14 (width 1152, 27 layers, 16 heads, MLP 4304, 224 px) + Gemma 2B (width 2048, 18 layers,
8 heads of 256, 1 key/value head, MLP 16384, vocabulary 257152), the Gemma 300M action expert
(width 1024, MLP 4096), actions padded to 32, ``H`` = 50 (pi0_libero): about 3.3 B parameters,
every one in bf16 (the model runs in one dtype here; openpi keeps its norms in fp32).

The policy is :class:`~rlinf.models.embodied.pi0.rl_policy.Pi0RLPolicy` with RLinf's LIBERO π0
PPO settings: two cameras (the third slot masked), a 48-token prompt, Flow-SDE (noise level 0.5)
over 4 denoising steps, chunks of 5 x 7, value head (512, 256, 128) on the expert,
``train_expert_only`` (the PaliGemma prefix runs without gradients). One rollout call on
``batch`` random observations records the chains; then two PPO updates (``batch / micro``
micro-batches each: evaluate the chains, the embodied PPO loss with chunk-level ratios and the
value loss, backward, gradient clipping at 1, AdamW) are timed — the first includes the
allocator's warm-up, the second is the steady figure.

Reported: build / rollout / update seconds, peak CUDA memory over the rollout and updates,
parameter counts, the loss and gradient norm, and how far the first update's recomputed
log-probs are from the rollout's (bf16 kernels at another batch size; 0 in fp32). A dry run does
the same at tiny sizes on the CPU.
"""

from __future__ import annotations

import math
import time

import torch

from toolkits.gpu_check.common import cuda_sync
from toolkits.gpu_check.report import outcome
from toolkits.gpu_check.runner import Context

#: (observations per rollout call, micro-batch of the update)
GPU_BATCH = (64, 32)
DRY_BATCH = (4, 2)
#: Far above what bf16 rounding gives, far below what a wrong chain or mask gives (tens).
MAX_LOGPROB_DIFF = 1.0


def real_spec():
    """openpi's π0 sizes (``Pi0Config``: gemma_2b + gemma_300m, SigLIP So400m/14, H 50)."""
    from rlinf.models.embodied.pi0.spec import GemmaSize, Pi0Spec, VisionSize

    return Pi0Spec(pi05=False, vlm=GemmaSize(2048, 18, 16384, 8, 1, 256, 257152),
                   expert=GemmaSize(1024, 18, 4096, 8, 1, 256), vision=VisionSize(1152, 27, 4304, 16, 14, 224),
                   action_dim=32, state_dim=32, action_horizon=50)


def build_policy(spec, device: str, dtype: torch.dtype, seed: int):
    """A random π0 of ``spec`` wrapped as the RL policy (RLinf's LIBERO π0 PPO settings)."""
    from rlinf.models.embodied.pi0.modeling import Pi0Model
    from rlinf.models.embodied.pi0.normalization import NormStats
    from rlinf.models.embodied.pi0.policy import Pi0Policy
    from rlinf.models.embodied.pi0.processing import OPENPI_CAMERAS
    from rlinf.models.embodied.pi0.rl_policy import Pi0RLConfig, Pi0RLPolicy

    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # parameters are born in bf16 (RoPE tables stay fp32)
    try:
        with torch.device(device):
            model = Pi0Model(spec)
    finally:
        torch.set_default_dtype(previous)
    stats = NormStats(mode="mean_std", style="openpi", actions={"mean": [0.0] * 7, "std": [1.0] * 7})
    pi0 = Pi0Policy(model, tokenizer=None, stats=stats, cameras=OPENPI_CAMERAS, prompt_format="pi0",
                    max_token_len=48, layout="openpi")
    config = Pi0RLConfig(action_chunk=5, action_env_dim=7, num_steps=4, noise_method="flow_sde", noise_level=0.5,
                         add_value_head=True, detach_critic_input=True, train_expert_only=True, num_images=2)
    return Pi0RLPolicy(pi0, config).to(device)


def random_inputs(spec, n: int, device: str, seed: int):
    """``n`` observations: two random camera images (the third slot absent), prompts of 10-30 of
    48 tokens, a random state."""
    from rlinf.models.embodied.pi0.modeling import Pi0Inputs

    g = torch.Generator().manual_seed(seed)
    side = spec.vision.image_size
    images = torch.rand(n, 3, 3, side, side, generator=g) * 2 - 1
    images[:, 2] = -1.0
    masks = torch.tensor([True, True, False]).expand(n, 3).clone()
    lengths = torch.randint(10, 31, (n, 1), generator=g)
    token_mask = torch.arange(48)[None] < lengths
    tokens = torch.randint(3, spec.vlm.vocab, (n, 48), generator=g) * token_mask
    state = torch.randn(n, spec.state_dim or spec.action_dim, generator=g)
    return Pi0Inputs(images, masks, tokens, token_mask, state).to(device)


def _rows(inputs, rows: slice):
    from rlinf.models.embodied.pi0.modeling import Pi0Inputs

    return Pi0Inputs(*(t[rows] for t in (inputs.images, inputs.image_masks, inputs.tokens, inputs.token_mask,
                                         inputs.state)))


def run(ctx: Context) -> dict:
    """The check (see the module docstring)."""
    from rlinf.config.algorithm import AlgorithmConfig
    from rlinf.models.embodied.pi0.tiny import tiny_spec
    from rlinf.objectives.embodied import embodied_ppo_loss

    dev, dtype = ctx.device, torch.bfloat16
    spec = tiny_spec(pi05=False, vocab=300, action_horizon=8) if ctx.dry_run else real_spec()
    batch, micro = DRY_BATCH if ctx.dry_run else GPU_BATCH
    cuda = dev == "cuda"
    start = time.perf_counter()
    policy = build_policy(spec, dev, dtype, ctx.seed)
    cuda_sync(dev)
    build_s = time.perf_counter() - start
    params = sum(p.numel() for p in policy.parameters())
    trained = [p for p in policy.parameters() if p.requires_grad]
    algo = AlgorithmConfig(adv_type="gae", logprob_type="chunk_level", ratio_clip_eps=0.2, clip_ratio_high=0.2)
    optimizer = torch.optim.AdamW(trained, lr=5e-6, betas=(0.9, 0.95), eps=1e-5)
    inputs = random_inputs(spec, batch, dev, ctx.seed)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    policy.eval()
    start = time.perf_counter()
    with torch.no_grad():
        out = policy.act_inputs(inputs, generator=torch.Generator(device=dev).manual_seed(ctx.seed))
    cuda_sync(dev)
    rollout_s = time.perf_counter() - start
    g = torch.Generator().manual_seed(ctx.seed + 1)
    advantages = torch.randn(batch, generator=g).to(dev)
    returns = (out.values.float() + torch.randn(batch, generator=g).to(dev)).detach()
    policy.train()
    update_s, losses, grad_norms, diffs = [], [], [], []
    for _ in range(2):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for lo in range(0, batch, micro):
            rows = slice(lo, lo + micro)
            ev = policy.evaluate_inputs(out.raw_actions[rows], _rows(inputs, rows))
            if not update_s:
                diffs.append(float((ev.logprobs.detach().float() - out.logprobs[rows].float()).abs().max()))
            loss, _ = embodied_ppo_loss(ev.logprobs, out.logprobs[rows], advantages[rows], algo, values=ev.values,
                                        old_values=out.values[rows], returns=returns[rows])
            (loss / math.ceil(batch / micro)).backward()
            loss_sum += float(loss.detach()) / math.ceil(batch / micro)
        grad_norms.append(float(torch.nn.utils.clip_grad_norm_(trained, 1.0)))
        optimizer.step()
        cuda_sync(dev)
        update_s.append(time.perf_counter() - start)
        losses.append(loss_sum)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    figures = {
        "dry_run": ctx.dry_run, "dtype": "bf16", "params": params, "params_trained": sum(p.numel() for p in trained),
        "vlm_width": spec.vlm.width, "expert_width": spec.expert.width, "vision_width": spec.vision.width,
        "image_size": spec.vision.image_size, "action_horizon": spec.action_horizon,
        "prefix_tokens": 3 * spec.vision.tokens + 48, "batch": batch, "micro_batch": micro, "num_steps": 4,
        "build_seconds": build_s, "rollout_seconds": rollout_s, "update_seconds": update_s[0],
        "update_seconds_steady": update_s[1], "samples_per_s_update": batch / update_s[1],
        "peak_memory_gib": peak, "losses": losses, "grad_norms": grad_norms,
        "logprob_max_abs_diff": max(diffs),
    }
    rules = [("update_seconds_steady", ">", 0.0), ("grad_norm", ">", 0.0),
             ("logprob_max_abs_diff", "<=", MAX_LOGPROB_DIFF)]
    figures["grad_norm"] = grad_norms[0]
    if cuda:
        rules.append(("peak_memory_gib", ">", 0.0))
    return outcome(figures, rules)
