"""``offload``: the FSDP2 engine's ``offload()`` really frees GPU memory and ``onload()`` brings back
the same state (GPU only: on a CPU device offload is a no-op).

Two engines, A and B, are built from the same random Qwen2 (about 40 M parameters, fp32 master
weights, bf16 compute, eager attention, deterministic algorithms) and take the same first step.
Then A is offloaded: ``torch.cuda.memory_allocated`` must drop by at least 90% of A's weight and
Adam-state bytes (gradients are freed by ``zero_grad`` already). A is onloaded: its log-probs
must equal those before the offload bit for bit, and its second step must equal B's second step
(which never left the GPU) within ``max(3 * noise, 1e-7)``, where ``noise`` is how far A's and B's
first steps already differ (the run-to-run noise floor, measured; 0 when deterministic).
"""

from __future__ import annotations

import os

import torch

from toolkits.gpu_check.common import (
    actor_config,
    backend_for,
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

SHAPE = dict(vocab_size=16000, hidden_size=512, intermediate_size=2048, num_hidden_layers=8,
             num_attention_heads=8, num_key_value_heads=2)
MIN_FREED_FRACTION = 0.9
#: After one more step, two runs that differed by ``noise`` may differ by a few times that.
NOISE_FACTOR = 3.0


def state_bytes(engine) -> int:
    """Bytes of the engine's weights, gradients and optimizer state on the GPU."""
    tensors = [p.to_local() if hasattr(p, "to_local") else p for p in engine.model.parameters()]
    tensors += [p.grad for p in engine.model.parameters() if p.grad is not None]
    tensors += [v for s in engine.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors if t.device.type == "cuda")


def _weights(engine) -> dict[str, torch.Tensor]:
    return {k: v.float().clone() for k, v in engine.full_state_dict().items()}


def _diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(max_abs_diff(a[k], b[k]) for k in a)


def run(ctx: Context) -> dict:
    """The check (see the module docstring)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    from rlinf.engines.training.fsdp import FSDPEngine

    model_dir = save_random_qwen2(ctx.scratch("offload_model"), seed=ctx.seed, **SHAPE)
    batch = make_batch(SHAPE["vocab_size"], [16, 40, 8, 30], [64, 20, 48, 33], ctx.seed)
    cfg = actor_config(fsdp_config={"mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32"}},
                       model={"attn_implementation": "eager"})
    device = engine_device(ctx.device)
    with world_of_one(backend_for(ctx.device)):
        a = FSDPEngine(model_dir, cfg, device=device, total_steps=2)
        b = FSDPEngine(model_dir, cfg, device=device, total_steps=2)
        batch.old_logprobs = a.compute_logprobs(batch, 2)[0]

        def step(engine):
            return engine.train_minibatch(split(batch, 2), loss_fn(), batch.num_response_tokens)

        first_a, first_b = step(a), step(b)
        weights_a = _weights(a)
        noise = _diff(weights_a, _weights(b))
        logp_before = a.compute_logprobs(batch, 2)[0]
        expected = state_bytes(a)
        torch.cuda.synchronize()
        on = torch.cuda.memory_allocated()
        a.offload()
        off = torch.cuda.memory_allocated()
        a.onload()
        back = torch.cuda.memory_allocated()
        logp_after = a.compute_logprobs(batch, 2)[0]
        second_a, second_b = step(a), step(b)
        diff = _diff(_weights(a), _weights(b))
        del a, b
    bound = max(NOISE_FACTOR * noise, 1e-7)
    figures = {
        "params": sum(v.numel() for v in weights_a.values()),
        "state_bytes": expected, "allocated_before": on, "allocated_offloaded": off,
        "allocated_onloaded": back, "freed_bytes": on - off, "freed_fraction": (on - off) / max(expected, 1),
        "onload_restored_fraction": (back - off) / max(on - off, 1),
        "logprobs_equal_after_onload": bool(torch.equal(logp_before, logp_after)),
        "first_step_noise_max_abs": noise, "second_step_max_abs_diff": diff,
        "second_step_bound": bound, "second_step_within_bound": diff <= bound,
        "loss_first": first_a["loss"], "loss_second_offloaded": second_a["loss"],
        "loss_second_resident": second_b["loss"],
        "first_steps_equal": first_a == first_b,
    }
    return outcome(figures, [("freed_fraction", ">=", MIN_FREED_FRACTION),
                             ("logprobs_equal_after_onload", "==", 1),
                             ("second_step_within_bound", "==", 1)])
