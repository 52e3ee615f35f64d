"""Pieces the checks share: random Qwen2 checkpoints, a ragged RL batch with advantages, actor
configs, a one-process ``torch.distributed`` world, gradient capture and difference measures.

Example:
    >>> import torch
    >>> rel_diff(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    0.0
    >>> round(rel_diff(torch.tensor([1.1, 0.0]), torch.tensor([1.0, 0.0])), 6)
    0.1
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator
from typing import Any

import torch

from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch

#: The tiny shape every dry run uses (and the parity checks on the CPU side).
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2)
#: A small shape for the GPU parity checks (big enough for bf16 rounding to show).
SMALL = dict(vocab_size=2048, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=2)
#: The PPO objective the actor checks train with (rlinf.objectives.llm.make_loss_fn).
ALGO = AlgorithmConfig(group_size=1, normalize_advantages=False, entropy_bonus=0.01)


def save_random_qwen2(path: str, seed: int = 0, device: str = "cpu", dtype: torch.dtype = torch.float32,
                      **shape: Any) -> str:
    """A random ``Qwen2ForCausalLM`` (tied embeddings, like the small Qwen2.5 models) saved as an
    HF folder; ``shape`` overrides :data:`TINY`. Initialised on ``device`` (fast for big shapes;
    the same seed gives other weights on another device)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**{**TINY, "max_position_embeddings": 4096, **shape, "tie_word_embeddings": True,
                            "pad_token_id": 0})
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model.to(dtype).save_pretrained(path)
    return path


def make_batch(vocab: int, prompt_lens: list[int], response_lens: list[int], seed: int = 0) -> RolloutBatch:
    """Random prompts (left padded) and responses (right padded) with random advantages on the
    response tokens.

    >>> b = make_batch(50, [2, 3], [4, 1])
    >>> b.batch_size, b.num_response_tokens, tuple(b.advantages.shape)
    (2, 5, (2, 4))
    """
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, vocab, (n,), generator=g).tolist() for n in prompt_lens]
    responses = [torch.randint(1, vocab, (n,), generator=g).tolist() for n in response_lens]
    batch = RolloutBatch.from_token_lists(prompts, responses, pad_token_id=0)
    batch.advantages = torch.randn(batch.response_ids.shape, generator=g) * batch.response_mask
    return batch


def split(batch: RolloutBatch, size: int) -> list[RolloutBatch]:
    """Micro-batches of ``size`` samples.

    >>> [mb.batch_size for mb in split(make_batch(9, [1, 1, 1], [1, 1, 1]), 2)]
    [2, 1]
    """
    return [batch.select(range(i, min(i + size, batch.batch_size))) for i in range(0, batch.batch_size, size)]


def actor_config(backend: str = "fsdp", lr: float = 1e-4, clip_grad: float = 1.0, **sections: Any) -> ActorConfig:
    """An ``actor`` section parsed like a YAML one (so it is validated the same way); ``sections``
    are merged in (``fsdp_config={...}``, ``model={...}``, ``optim={...}``, ``megatron={...}``).

    >>> actor_config(fsdp_config={"mixed_precision": {"param_dtype": "bf16"}}).fsdp_config.mixed_precision.param_dtype
    'bf16'
    """
    from rlinf.utils.typed_config import parse_section

    raw: dict[str, Any] = {"training_backend": backend, "seed": 1234,
                           "optim": {"lr": lr, "clip_grad": clip_grad, "weight_decay": 0.01}}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return parse_section(ActorConfig, raw, "actor")


def loss_fn():
    """The PPO policy loss + entropy bonus the actor trains with (:data:`ALGO`)."""
    from rlinf.objectives.llm import make_loss_fn

    return make_loss_fn(ALGO)


@contextlib.contextmanager
def world_of_one(backend: str) -> Iterator[None]:
    """``torch.distributed`` with this process as the only rank (``backend``: gloo, nccl, or
    ``cpu:gloo,cuda:nccl`` for engines on both devices)."""
    import torch.distributed as dist

    from rlinf.utils.spawn import free_local_port

    port = free_local_port()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=120))
    try:
        yield
    finally:
        dist.destroy_process_group()


def engine_device(device: str) -> torch.device:
    """The device an engine is given: CUDA with an index (engines call ``torch.cuda.set_device``).

    >>> engine_device("cuda"), engine_device("cpu")
    (device(type='cuda', index=0), device(type='cpu'))
    """
    return torch.device("cuda:0" if device == "cuda" else device)


def backend_for(device: str) -> str:
    """The process-group backend for engines on ``device`` (and CPU reference engines).

    >>> backend_for("cpu"), backend_for("cuda")
    ('gloo', 'cpu:gloo,cuda:nccl')
    """
    return "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"


def capture_grads(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """A dict that fills, at every ``optimizer.step()``, with the full fp32 CPU gradient of each
    parameter by name (FSDP2 DTensors are gathered): what the step is about to apply."""
    names = {id(p): n for n, p in model.named_parameters()}
    store: dict[str, torch.Tensor] = {}

    def hook(opt, args, kwargs):
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                    store[names[id(p)]] = g.detach().float().cpu()

    optimizer.register_step_pre_hook(hook)
    return store


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``||a - b|| / ||b||`` in fp64 (0 when both are zero)."""
    a, b = a.double(), b.double()
    denom = float(b.norm())
    num = float((a - b).norm())
    return num / denom if denom > 0 else (0.0 if num == 0 else float("inf"))


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest ``|a - b|``.

    >>> max_abs_diff(torch.tensor([1.0, 3.0]), torch.tensor([1.5, 3.0]))
    0.5
    """
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def dict_rel_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[float, float]:
    """Over the tensors of ``b``: (global relative difference, largest per-tensor one)."""
    if sorted(a) != sorted(b):
        raise ValueError(f"different tensor names: {sorted(set(a) ^ set(b))[:3]}")
    num = sum(float((a[k].double() - b[k].double()).norm()) ** 2 for k in b) ** 0.5
    den = sum(float(b[k].double().norm()) ** 2 for k in b) ** 0.5
    worst = max(rel_diff(a[k], b[k]) for k in b)
    return (num / den if den > 0 else 0.0), worst


def cuda_sync(device: str) -> None:
    """Wait for the GPU (no-op on the CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()
