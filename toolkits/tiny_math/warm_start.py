"""Short supervised warm start of the tiny math model (plain torch loop, CPU, AdamW).

The loss is next-token cross-entropy on the response tokens (and the closing ``<|im_end|>``)
only; the prompt is rendered with the chat template exactly as at generation time. The run is
deliberately short: the result should be partly right (greedy val accuracy well above 0 and well
below the ceiling) so that sampled groups mix right and wrong answers, which is what GRPO learns
from. Deterministic for a given seed, data and thread count.

Example:
    python -m toolkits.tiny_math.warm_start --model /tmp/tiny_math/base --out /tmp/tiny_math/warm
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from toolkits.tiny_math.evaluate import accuracy, chat_prompt
from toolkits.tiny_math.make_dataset import read_jsonl
from toolkits.tiny_math.make_model import save_model
from toolkits.tiny_math.tokenizer import load_tokenizer

IGNORE = -100


def encode_sft(tokenizer: PreTrainedTokenizerFast, rows: list[dict]) -> list[tuple[list[int], int]]:
    """Tokenizes demonstrations.

    Args:
        tokenizer: The model's tokenizer.
        rows: Dicts with ``prompt`` and ``response``.

    Returns:
        One ``(ids, n_prompt)`` per row: prompt + response + eos ids and the prompt length.
    """
    out = []
    for r in rows:
        p = tokenizer(chat_prompt(tokenizer, r["prompt"]), add_special_tokens=False).input_ids
        s = tokenizer(r["response"], add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        out.append((p + s, len(p)))
    return out


def collate(examples: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pads a batch; labels are -100 on prompt and padding positions."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full_like(input_ids, IGNORE)
    mask = torch.zeros_like(input_ids)
    for i, (ids, n_prompt) in enumerate(examples):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
        mask[i, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def warm_start(
    model_dir: str | Path,
    sft_path: str | Path,
    out_dir: str | Path,
    *,
    steps: int = 800,
    batch_size: int = 32,
    lr: float = 3e-3,
    warmup: int = 20,
    seed: int = 0,
    val_path: str | Path | None = None,
    eval_every: int = 0,
    eval_limit: int = 256,
) -> dict:
    """Runs the supervised warm start and saves the result as a new HF folder.

    Args:
        model_dir: Folder of the starting model (e.g. from ``make_model``).
        sft_path: JSONL demonstrations (``prompt``, ``response``).
        out_dir: Output folder.
        steps: Optimizer steps.
        batch_size: Demonstrations per step.
        lr: Peak AdamW learning rate (linear warm-up, then cosine decay to 10 %).
        warmup: Warm-up steps.
        seed: Seed for data order.
        val_path: Optional JSONL split for greedy accuracy checks.
        eval_every: If > 0 and ``val_path`` is set, evaluate every this many steps.
        eval_limit: Rows of ``val_path`` used per check.

    Returns:
        A summary dict: final loss, wall seconds, and the accuracy curve ``[(step, acc), ...]``.
    """
    torch.manual_seed(seed)
    tok = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.train()
    data = encode_sft(tok, read_jsonl(sft_path))
    val = read_jsonl(val_path)[:eval_limit] if val_path else []
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        frac = (step - warmup) / max(steps - warmup, 1)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    gen = torch.Generator().manual_seed(seed)
    order: list[int] = []
    curve, loss_val, t0 = [], float("nan"), time.time()
    for step in range(steps):
        if len(order) < batch_size:
            order += torch.randperm(len(data), generator=gen).tolist()
        idx, order = order[:batch_size], order[batch_size:]
        batch = collate([data[i] for i in idx], tok.pad_token_id)
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_val = loss.item()
        if val and eval_every and ((step + 1) % eval_every == 0 or step + 1 == steps):
            acc = accuracy(model, tok, val)
            curve.append((step + 1, acc))
            secs = time.time() - t0
            print(f"step {step + 1:4d} loss {loss_val:.4f} val_acc {acc:.3f} ({secs:.0f}s)")
    model.eval()
    save_model(model, tok, out_dir)
    return {"loss": loss_val, "seconds": time.time() - t0, "curve": curve}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Supervised warm start of the tiny math model.")
    p.add_argument("--model", required=True, help="starting HF model folder")
    p.add_argument("--data", default="examples/math/data/sft.jsonl")
    p.add_argument("--out", required=True, help="output HF model folder")
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--val", default=None, help="optional JSONL for accuracy checks")
    p.add_argument("--eval-every", type=int, default=0)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    res = warm_start(
        a.model, a.data, a.out, steps=a.steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed,
        val_path=a.val, eval_every=a.eval_every,
    )
    print(
        f"warm start: {a.steps} steps, final loss {res['loss']:.4f}, "
        f"{res['seconds']:.1f}s -> {a.out}"
    )


if __name__ == "__main__":
    main()
