"""Standalone GRPO sanity loop: can reinforcement learning lift the warm-started tiny model?

This is a quick experiment, not the product runner. Each step samples ``group_size`` responses
per train prompt with HF ``generate`` at temperature 1, scores them (1 if the last boxed answer
equals the gold integer, else 0), normalises rewards within each group (GRPO advantages), and
takes a clipped policy-gradient (PPO-style) update on the response tokens with AdamW (no KL, no
entropy bonus). Greedy val accuracy is measured before training and every ``eval_every`` steps.

Measured on the shipped data (warm start seed 0, greedy val 16.8 %): learning rates from 1e-5 to
1e-4 all lift greedy val accuracy by 35 to 80 points within 20 steps; 1e-3 collapses the policy.

Example:
    python -m toolkits.tiny_math.grpo_probe --model /tmp/tiny_math/warm --steps 30
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch
from transformers import AutoModelForCausalLM

from toolkits.tiny_math.evaluate import accuracy, generate, is_correct
from toolkits.tiny_math.make_dataset import read_jsonl
from toolkits.tiny_math.tokenizer import load_tokenizer


def response_mask(response_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 on response tokens up to and including the first eos (all tokens if none), else 0."""
    is_eos = (response_ids == eos_id).long()
    after_eos = (is_eos.cumsum(dim=1) - is_eos) > 0
    return (~after_eos).long()


def group_advantages(
    rewards: torch.Tensor, group_size: int, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO advantages: reward minus group mean, divided by group std (0 for uniform groups)."""
    r = rewards.view(-1, group_size)
    adv = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + eps)
    return adv.view(-1)


def token_logprobs(model, prompt_ids, response_ids, pad_id: int, resp_mask) -> torch.Tensor:
    """Log-probabilities of the response tokens under ``model``; shape ``[B, R]``."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attn = torch.cat([(prompt_ids != pad_id).long(), resp_mask], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attn).logits
    logits = logits[:, prompt_ids.shape[1] - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)


def run_probe(
    model_dir: str,
    train_path: str,
    val_path: str,
    *,
    steps: int = 30,
    prompts_per_step: int = 32,
    group_size: int = 8,
    lr: float = 3e-5,
    clip: float = 0.2,
    ppo_epochs: int = 1,
    eval_every: int = 3,
    max_new_tokens: int = 64,
    seed: int = 0,
) -> dict:
    """Runs the GRPO probe.

    Args:
        model_dir: Warm-started HF model folder.
        train_path: JSONL train prompts (``prompt``, ``answer``).
        val_path: JSONL held-out prompts for greedy accuracy.
        steps: Rollout + update rounds.
        prompts_per_step: Train prompts per step.
        group_size: Sampled responses per prompt.
        lr: AdamW learning rate (constant).
        clip: PPO ratio clip (only active when ``ppo_epochs`` > 1).
        ppo_epochs: Update passes over each rollout batch.
        eval_every: Greedy val evaluation period in steps.
        max_new_tokens: Response length limit.
        seed: Seed for prompt order and sampling.

    Returns:
        A dict with the eval ``curve`` ``[(step, acc, seconds), ...]``, per-step ``train_reward``
        and total ``seconds``.
    """
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    train, val = read_jsonl(train_path), read_jsonl(val_path)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    t0 = time.time()
    curve = [(0, accuracy(model, tok, val), 0.0)]
    print(f"step    0 val_acc {curve[0][1]:.3f}")
    rewards_log = []
    for step in range(1, steps + 1):
        batch = rng.sample(train, prompts_per_step)
        model.eval()
        prompt_ids, response_ids, texts = generate(
            model, tok, [r["prompt"] for r in batch], num_samples=group_size,
            temperature=1.0, max_new_tokens=max_new_tokens,
        )
        golds = [r["answer"] for r in batch for _ in range(group_size)]
        rewards = torch.tensor([float(is_correct(t, g)) for t, g in zip(texts, golds)])
        adv = group_advantages(rewards, group_size)
        mask = response_mask(response_ids, tok.eos_token_id)
        keep = adv.abs() > 0  # groups with mixed outcomes carry all the signal
        model.train()
        if keep.any():
            p_ids, r_ids, m, a = prompt_ids[keep], response_ids[keep], mask[keep], adv[keep]
            with torch.no_grad():
                old = token_logprobs(model, p_ids, r_ids, tok.pad_token_id, m)
            for _ in range(ppo_epochs):
                new = token_logprobs(model, p_ids, r_ids, tok.pad_token_id, m)
                ratio = torch.exp(new - old)
                a_tok = a.unsqueeze(1)
                obj = torch.minimum(ratio * a_tok, ratio.clamp(1 - clip, 1 + clip) * a_tok)
                # Normalise by all response tokens of the batch (uniform groups count as zeros).
                loss = -(obj * m).sum() / mask.sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
        mixed = keep.view(-1, group_size).any(dim=1).float().mean().item()
        rewards_log.append(rewards.mean().item())
        msg = f"step {step:4d} reward {rewards.mean():.3f} mixed_groups {mixed:.2f}"
        if step % eval_every == 0 or step == steps:
            curve.append((step, accuracy(model, tok, val), time.time() - t0))
            msg += f" val_acc {curve[-1][1]:.3f}"
        print(msg + f" ({time.time() - t0:.0f}s)", flush=True)
    return {"curve": curve, "train_reward": rewards_log, "seconds": time.time() - t0}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Quick GRPO sanity loop on the tiny math model.")
    p.add_argument("--model", required=True, help="warm-started HF model folder")
    p.add_argument("--train", default="examples/math/data/train.jsonl")
    p.add_argument("--val", default="examples/math/data/val.jsonl")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--prompts-per-step", type=int, default=32)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--ppo-epochs", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None, help="optional path for the result as JSON")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    res = run_probe(
        a.model, a.train, a.val, steps=a.steps, prompts_per_step=a.prompts_per_step,
        group_size=a.group_size, lr=a.lr, ppo_epochs=a.ppo_epochs, eval_every=a.eval_every,
        seed=a.seed,
    )
    c = res["curve"]
    print("curve: " + ", ".join(f"{s}:{acc:.3f}" for s, acc, _ in c))
    print(f"val_acc {c[0][1]:.3f} -> {c[-1][1]:.3f} ({(c[-1][1] - c[0][1]) * 100:+.1f} points) "
          f"in {res['seconds']:.0f}s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)


if __name__ == "__main__":
    main()
