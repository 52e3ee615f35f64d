"""Greedy accuracy of a tiny math model on a JSONL split, plus shared generation helpers.

A response is correct when the content of its last ``\\boxed{...}`` parses as an integer equal to
the gold answer (a deliberately simple local check; the product reward lives elsewhere).

Example:
    python -m toolkits.tiny_math.evaluate --model /tmp/tiny_math/warm
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

from toolkits.tiny_math.make_dataset import read_jsonl
from toolkits.tiny_math.tokenizer import load_tokenizer


def extract_boxed(text: str) -> str | None:
    """Returns the content of the last ``\\boxed{...}`` in ``text`` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def is_correct(response: str, gold: str) -> bool:
    """True when the last boxed value of ``response`` is the integer ``gold``."""
    got = extract_boxed(response)
    if got is None:
        return False
    try:
        return int(got.strip()) == int(gold)
    except ValueError:
        return False


def chat_prompt(tokenizer: PreTrainedTokenizerFast, prompt: str) -> str:
    """Renders one user ``prompt`` with the chat template and the assistant generation prompt."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )


@torch.no_grad()
def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    prompts: list[str],
    *,
    num_samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 64,
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Generates responses for raw user prompts (the chat template is applied here).

    Args:
        model: Causal LM.
        tokenizer: Its tokenizer (left padding is used).
        prompts: Raw user prompts.
        num_samples: Responses per prompt; outputs are grouped prompt-major.
        temperature: 0 for greedy decoding, else the sampling temperature (no top-k / top-p).
        max_new_tokens: Response length limit.

    Returns:
        ``(prompt_ids, response_ids, texts)``: left-padded prompt ids ``[B*n, P]``, response ids
        ``[B*n, R]`` padded with the pad id after eos, and decoded response texts.
    """
    tokenizer.padding_side = "left"
    enc = tokenizer([chat_prompt(tokenizer, p) for p in prompts], return_tensors="pt", padding=True)
    sample = temperature > 0
    out = model.generate(
        **enc,
        do_sample=sample,
        temperature=temperature if sample else None,
        top_k=0 if sample else None,
        top_p=1.0 if sample else None,
        num_return_sequences=num_samples,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    prompt_ids = enc.input_ids.repeat_interleave(num_samples, dim=0)
    response_ids = out[:, enc.input_ids.shape[1] :]
    texts = tokenizer.batch_decode(response_ids, skip_special_tokens=True)
    return prompt_ids, response_ids, texts


def accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    rows: list[dict],
    *,
    batch_size: int = 128,
    max_new_tokens: int = 64,
) -> float:
    """Greedy accuracy of ``model`` on ``rows`` (dicts with ``prompt`` and ``answer``).

    Args:
        model: Causal LM (set to eval mode here).
        tokenizer: Its tokenizer.
        rows: Dataset rows.
        batch_size: Prompts per ``generate`` call.
        max_new_tokens: Response length limit.

    Returns:
        Fraction of rows answered correctly.
    """
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(rows), batch_size):
        batch = rows[i : i + batch_size]
        _, _, texts = generate(
            model, tokenizer, [r["prompt"] for r in batch], max_new_tokens=max_new_tokens
        )
        correct += sum(is_correct(t, r["answer"]) for t, r in zip(texts, batch))
    model.train(was_training)
    return correct / max(len(rows), 1)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Greedy boxed-answer accuracy of a tiny math model.")
    p.add_argument("--model", required=True, help="HF model folder")
    p.add_argument("--data", default="examples/math/data/val.jsonl")
    p.add_argument("--limit", type=int, default=0, help="evaluate only the first N rows")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--show", type=int, default=3, help="print this many sample responses")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    tok = load_tokenizer(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model)
    rows = read_jsonl(a.data)
    rows = rows[: a.limit] if a.limit else rows
    t0 = time.time()
    acc = accuracy(model, tok, rows, batch_size=a.batch_size)
    if a.show:
        _, _, texts = generate(model, tok, [r["prompt"] for r in rows[: a.show]])
        for r, t in zip(rows, texts):
            print(f"  {r['prompt']!r} -> {t!r} (gold {r['answer']})")
    print(f"accuracy {acc:.3f} ({round(acc * len(rows))}/{len(rows)}) in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
