"""Short supervised warm start of the tiny web policy on the expert demonstrations.

Plain torch loop on CPU (AdamW, linear warm-up then cosine decay to 10 %, gradient clipping 1.0).
The prompt of each row is encoded exactly as the episodes encode it
(:func:`rlinf.runners.web_agent.policy.chat_ids`: the user turn in the chat template plus the
assistant generation prompt); the loss is next-token cross-entropy on the response tokens and
the closing ``<|im_end|>`` (batches are padded and masked by
:func:`toolkits.tiny_math.warm_start.collate`), plus, with ``prompt_weight`` > 0, that weight times
the next-token loss on the prompt tokens. The prompt term is what lets a model this small learn
to copy from the page within minutes: the pages repeat names and numbers (task, title, heading,
links), so predicting the prompt grows the attention heads that copy the price into the answer
(without it, 800 steps gave 0 % of held-out prices copied; with 0.3, 100 %). The reported loss is
always the response loss. The run is deliberately short: the warm policy should be partly right
on held-out tasks, so that GRPO groups mix successes and failures. Deterministic for a given
seed, data and thread count.

Example:
    python -m toolkits.web_tasks.warm_start --model results/tiny_web/base \\
        --data results/tiny_web/demos.jsonl --out results/tiny_web/warm --steps 150
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from rlinf.data.tokenizer import load_tokenizer
from rlinf.runners.web_agent.policy import chat_ids
from toolkits.tiny_math.make_model import save_model
from toolkits.tiny_math.warm_start import IGNORE, collate
from toolkits.web_tasks.demos import read_jsonl
from toolkits.web_tasks.make_model import MAX_NEW_TOKENS


def encode_demos(tokenizer, rows: list[dict]) -> list[tuple[list[int], int]]:
    """``(prompt ids + response ids + eos, prompt length)`` per row (``prompt``, ``response``).

    Example:
        >>> from toolkits.web_tasks.tokenizer import build_tokenizer
        >>> tok = build_tokenizer(["Task: x\\nAction:"], vocab_size=300)
        >>> ids, n = encode_demos(tok, [{"prompt": "Task: x", "response": "goback"}])[0]
        >>> tok.decode(ids[n:])
        'goback<|im_end|>'
    """
    out = []
    for row in rows:
        prompt = chat_ids(tokenizer, row["prompt"])
        response = tokenizer(row["response"], add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        out.append((prompt + response, len(prompt)))
    return out


@torch.no_grad()
def mean_loss(model, tokenizer, rows: list[dict], batch_size: int = 32) -> float:
    """Mean per-token loss of ``model`` on the response tokens of ``rows`` (eval mode)."""
    was_training = model.training
    model.eval()
    data = encode_demos(tokenizer, rows)
    total, count = 0.0, 0
    for i in range(0, len(data), batch_size):
        batch = collate(data[i:i + batch_size], tokenizer.pad_token_id)
        n = int((batch["labels"][:, 1:] != -100).sum())
        total += model(**batch).loss.item() * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


def sft_loss(model, batch: dict[str, torch.Tensor], prompt_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(response loss, training loss)`` of one collated batch: mean next-token cross-entropy on
    the response tokens, plus ``prompt_weight`` x the mean on the (unpadded) prompt tokens."""
    if prompt_weight <= 0:
        loss = model(**batch).loss
        return loss, loss
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    targets = batch["input_ids"][:, 1:]
    token_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                                                   reduction="none").view(targets.shape)
    response = batch["labels"][:, 1:] != IGNORE
    prompt = batch["attention_mask"][:, 1:].bool() & ~response
    loss = (token_loss * response).sum() / response.sum().clamp(min=1)
    return loss, loss + prompt_weight * (token_loss * prompt).sum() / prompt.sum().clamp(min=1)


def lr_factor(step: int, steps: int, warmup: int) -> float:
    """Learning-rate multiplier: linear warm-up to 1, then cosine down to 0.1 at ``steps``.

    Example:
        >>> round(lr_factor(0, 100, 10), 2), lr_factor(9, 100, 10), round(lr_factor(100, 100, 10), 2)
        (0.1, 1.0, 0.1)
    """
    if step < warmup:
        return (step + 1) / warmup
    frac = min((step - warmup) / max(steps - warmup, 1), 1.0)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))


def warm_start(model_dir: str | Path, demos: str | Path | list[dict], out_dir: str | Path | None, *,
               steps: int = 150, batch_size: int = 16, lr: float = 3e-3, warmup: int = 10, seed: int = 0,
               prompt_weight: float = 0.0, log_every: int = 25, log=print) -> dict:
    """Train on the demonstrations and save the model (and tokenizer) into ``out_dir``.

    Args:
        model_dir: Starting HF folder (from :mod:`.make_model`).
        demos: JSONL path of demonstration rows, or the rows.
        out_dir: Output folder; None: do not save (tests).
        steps, batch_size, lr, warmup: Optimisation (``lr`` is the peak AdamW rate).
        seed: Seed of the data order.
        prompt_weight: Weight of an auxiliary next-token loss on the prompt tokens (0: the
            response tokens only). The reported losses are always the response loss.
        log_every: Print the running loss every this many steps (0: never).

    Returns:
        ``{"losses": [per-step loss], "seconds", "rows", "tokens_per_step", "longest"}``.
    """
    torch.manual_seed(seed)
    tok = load_tokenizer(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    rows = read_jsonl(demos) if isinstance(demos, (str, Path)) else list(demos)
    if not rows:
        raise ValueError(f"warm start: no demonstration rows in {demos}")
    data = encode_demos(tok, rows)
    longest = max(len(ids) for ids, _ in data)
    limit = model.config.max_position_embeddings
    if longest > limit:
        raise ValueError(f"warm start: a demonstration is {longest} tokens, more than the model's "
                         f"max_position_embeddings {limit} ({model_dir}/config.json)")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, warmup))
    gen = torch.Generator().manual_seed(seed)
    order: list[int] = []
    losses, tokens, started = [], 0, time.perf_counter()
    for step in range(steps):
        if len(order) < batch_size:
            order += torch.randperm(len(data), generator=gen).tolist()
        idx, order = order[:batch_size], order[batch_size:]
        batch = collate([data[i] for i in idx], tok.pad_token_id)
        tokens += int(batch["attention_mask"].sum())
        loss, total = sft_loss(model, batch, prompt_weight)
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log_every and ((step + 1) % log_every == 0 or step + 1 == steps):
            recent = losses[-log_every:]
            log(f"[warm start] step {step + 1}/{steps} loss {sum(recent) / len(recent):.4f} "
                f"({time.perf_counter() - started:.0f} s)")
    model.eval()
    if out_dir is not None:
        save_model(model, tok, out_dir)
        model.generation_config.max_new_tokens = MAX_NEW_TOKENS
        model.generation_config.save_pretrained(out_dir)
    return {"losses": losses, "seconds": time.perf_counter() - started, "rows": len(rows),
            "tokens_per_step": tokens / max(steps, 1), "longest": longest}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Supervised warm start of the tiny web policy.")
    p.add_argument("--model", required=True, help="starting HF model folder")
    p.add_argument("--data", required=True, help="demonstrations JSONL")
    p.add_argument("--out", required=True, help="output HF model folder")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt-weight", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    res = warm_start(a.model, a.data, a.out, steps=a.steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed,
                     prompt_weight=a.prompt_weight)
    print(f"warm start: {a.steps} steps, final loss {res['losses'][-1]:.4f}, {res['seconds']:.1f} s -> {a.out}")


if __name__ == "__main__":
    main()
