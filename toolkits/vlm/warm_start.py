"""Warm start of the tiny VLM on the image task: supervised steps on the training rows' answers
(teacher forcing, the answer tokens and EOS only), stopped once the held-out accuracy (greedy,
exact match) reaches ``--target``, so RL starts from a model that is right sometimes (issue 47
asks for 10-50 % held-out).

Example:
    python -m toolkits.vlm.warm_start --base results/tiny_vlm/base --task results/tiny_vlm/task \
        --out results/tiny_vlm/warm --target 0.3
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path

import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.data.image_rows import read_image_rows
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.rollout.hf_vlm import HFVLMRolloutEngine
from rlinf.engines.training.vlm_logprobs import vlm_response_logprobs
from rlinf.models.vlm import load_processor, load_vlm, vlm_prompt_encoder
from rlinf.models.vlm.batch import pixel_inputs
from rlinf.rewards.qa import exact_match


def _rows(path: Path, encode) -> list[dict]:
    out = []
    for row in read_image_rows([str(path)], "images").rows:
        out.append({"ids": encode(row["prompt"], tuple(row["images"])), "images": tuple(row["images"]),
                    "answer": row["answer"]})
    return out


def accuracy(engine: HFVLMRolloutEngine, tokenizer, rows: list[dict], max_new_tokens: int = 4) -> float:
    """Greedy exact-match accuracy of ``engine``'s model on ``rows``."""
    gens = engine.generate([r["ids"] for r in rows], SamplingParams(do_sample=False, max_new_tokens=max_new_tokens),
                           n=1, images=[r["images"] for r in rows])
    texts = [tokenizer.decode(g.token_ids, skip_special_tokens=True) for g in gens]
    return sum(exact_match(t, r["answer"]) for t, r in zip(texts, rows)) / len(rows)


def warm_start(base: str, task: str, out: str, target: float, max_steps: int = 2000, batch: int = 16,
               lr: float = 3e-3, eval_every: int = 50, seed: int = 0, print_fn=print) -> dict:
    """Train ``base`` on ``task``'s train rows until the held-out accuracy reaches ``target``;
    writes the model to ``out`` (an HF folder with the base's other files); returns the record."""
    torch.manual_seed(seed)
    vlm = load_vlm(base)
    model, tokenizer = vlm.model, vlm.processor.tokenizer
    encode = vlm_prompt_encoder(load_processor(base))
    train, held = _rows(Path(task) / "train.jsonl", encode), _rows(Path(task) / "heldout.jsonl", encode)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = HFVLMRolloutEngine(base, device="cpu")
    engine.model = model  # the model trained here, evaluated through the rollout engine
    optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    rng = random.Random(seed)
    history, start = [], time.monotonic()
    acc = accuracy(engine, tokenizer, held)
    history.append({"step": 0, "heldout": acc, "s": 0.0})
    print_fn(f"[warm start] step 0: held-out {acc:.3f}")
    step = 0
    while acc < target and step < max_steps:
        model.train()
        picked = [train[rng.randrange(len(train))] for _ in range(batch)]
        answers = [tokenizer(r["answer"], add_special_tokens=False)["input_ids"] + [eos] for r in picked]
        rb = RolloutBatch.from_token_lists([r["ids"] for r in picked], answers, pad_token_id=0)
        logp, _ = vlm_response_logprobs(model, rb, pixel_inputs(engine.image_processor,
                                                                [r["images"] for r in picked]), 1.0, False)
        loss = -(logp * rb.response_mask).sum() / rb.response_mask.sum()
        optim.zero_grad()
        loss.backward()
        optim.step()
        step += 1
        if step % eval_every == 0:
            model.eval()
            acc = accuracy(engine, tokenizer, held)
            history.append({"step": step, "heldout": acc, "loss": float(loss), "s": time.monotonic() - start})
            print_fn(f"[warm start] step {step}: loss {float(loss):.3f}, held-out {acc:.3f}")
    model.eval()
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(base, out, ignore=shutil.ignore_patterns("*.safetensors", "READY"))
    model.save_pretrained(out, safe_serialization=True)
    record = {"base": base, "task": task, "target": target, "steps": step, "heldout": acc, "history": history}
    Path(out, "warm_start.json").write_text(json.dumps(record, indent=2))
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--target", type=float, default=0.3)
    parser.add_argument("--max-steps", type=int, default=2000)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args(argv)
    rec = warm_start(args.base, args.task, args.out, args.target, args.max_steps, lr=args.lr)
    print(f"wrote {args.out}: held-out {rec['heldout']:.3f} after {rec['steps']} steps")


if __name__ == "__main__":
    main()
