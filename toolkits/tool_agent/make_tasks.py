"""Multiplication tasks a tiny model cannot solve alone, and the texts of their demonstrations.

Each task multiplies a 3-digit number ``a`` (100..999) by a 2- or 3-digit number ``b`` (10..999).
The product has 4 to 6 digits, far beyond what a model of a million parameters computes in one
shot, but the ``calculator`` tool returns it exactly, so a right answer almost always means the
tool was called and its result copied. The three product lengths are drawn equally often: with
uniform operands 4-digit products would be rare, and a tiny model copying the result into the
box then learns the common lengths' distances only and miscopies the short results.

The draw is deterministic (one seeded :class:`random.Random` drawing distinct ``(a, b)`` pairs):
the first ``n_val`` pairs are the validation split, the next ``n_train`` the train split, so the
two never share a pair.

The prompt writes the product exactly as the call's expression (``347*86``, no spaces), so both
are the same tokens and the model learns to copy them (one digit a token) into the call.

The texts the model writes (the warm start teaches them, the hermes format parses them):

* the call: ``<tool_call>\\n{"name": "calculator", "arguments": {"expression": "347*86"}}\\n</tool_call>``;
* the answer: ``The answer is \\boxed{29842}.``.

Files written (JSON Lines): ``mul_train.jsonl`` and ``mul_val.jsonl``, ``{"prompt": str,
"answer": str}`` (the answer is the product's digits).

Example:
    python -m toolkits.tool_agent.make_tasks --out examples/tool_agent/data

    >>> make_prompt(347, 86)
    'What is 347*86? Use the calculator tool, then put the final answer in \\\\boxed{}.'
    >>> print(tool_call_text(347, 86))
    <tool_call>
    {"name": "calculator", "arguments": {"expression": "347*86"}}
    </tool_call>
    >>> answer_text(29842)
    'The answer is \\\\boxed{29842}.'
    >>> val, train = build_tasks(n_train=5, n_val=3)
    >>> len(val), len(train), {r["prompt"] for r in val} & {r["prompt"] for r in train}
    (3, 5, set())
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

from toolkits.tiny_math.make_dataset import read_jsonl, write_jsonl

__all__ = ["PROMPT_TEMPLATE", "make_prompt", "tool_call_text", "answer_text", "parse_prompt", "guess_product",
           "draw_pairs", "build_tasks", "write_tasks", "read_jsonl"]

PROMPT_TEMPLATE = "What is {a}*{b}? Use the calculator tool, then put the final answer in \\boxed{{}}."
CALL_TEMPLATE = '<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{a}*{b}"}}}}\n</tool_call>'
ANSWER_TEMPLATE = "The answer is \\boxed{{{value}}}."
_PROMPT_RE = re.compile(r"What is (\d+)\*(\d+)\?")
N_TRAIN, N_VAL, SEED = 2000, 128, 0


def make_prompt(a: int, b: int) -> str:
    """The user prompt of the task ``a * b`` (the same wording for train and val)."""
    return PROMPT_TEMPLATE.format(a=a, b=b)


def tool_call_text(a: int, b: int) -> str:
    """The model's first turn of a tool episode: one hermes ``calculator`` call (without eos)."""
    return CALL_TEMPLATE.format(a=a, b=b)


def answer_text(value: int | str) -> str:
    """The model's answer turn (without eos): ``The answer is \\boxed{value}.``"""
    return ANSWER_TEMPLATE.format(value=value)


def parse_prompt(prompt: str) -> tuple[int, int]:
    """The operands of a prompt made by :func:`make_prompt`.

    >>> parse_prompt(make_prompt(347, 86))
    (347, 86)
    """
    m = _PROMPT_RE.search(prompt)
    if m is None:
        raise ValueError(f"not a multiplication prompt: {prompt[:60]!r}")
    return int(m.group(1)), int(m.group(2))


def guess_product(a: int, b: int, rng: random.Random) -> str:
    """A plausible but wrong product: the right number of digits and the right leading digit, each
    later digit redrawn with probability 1/2 (at least one redrawn and changed).

    >>> g = guess_product(347, 86, random.Random(0))
    >>> len(g) == 5 and g[0] == "2" and g != "29842"
    True
    """
    digits = list(str(a * b))
    changed = False
    for i in range(1, len(digits)):
        if rng.random() < 0.5:
            new = str(rng.randrange(10))
            changed |= new != digits[i]
            digits[i] = new
    if not changed:  # force one change so the guess is never the product
        i = rng.randrange(1, len(digits))
        digits[i] = str((int(digits[i]) + rng.randrange(1, 10)) % 10)
    return "".join(digits)


def draw_pairs(n: int, seed: int = SEED) -> list[tuple[int, int]]:
    """``n`` distinct ``(a, b)`` pairs: ``a`` in 100..999, ``b`` in 10..999, the product's length
    (4, 5 or 6 digits) drawn first, uniformly, then the operands (``b`` of 2 or 3 digits, half
    each) until their product has that length.

    >>> sorted({len(str(a * b)) for a, b in draw_pairs(30)})
    [4, 5, 6]
    """
    rng, seen, out = random.Random(seed), set(), []
    while len(out) < n:
        length = rng.choice((4, 5, 6))
        a, b = 0, 0
        while len(str(a * b)) != length:
            a = rng.randint(100, 999)
            b = rng.randint(10, 99) if rng.random() < 0.5 else rng.randint(100, 999)
        if (a, b) not in seen:
            seen.add((a, b))
            out.append((a, b))
    return out


def build_tasks(n_train: int = N_TRAIN, n_val: int = N_VAL, seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """``(val, train)`` rows ``{"prompt", "answer"}``: disjoint, deterministic for ``seed``."""
    if n_train < 0 or n_val < 0:
        raise ValueError(f"n_train and n_val must be >= 0, got {n_train} and {n_val}")
    pairs = draw_pairs(n_val + n_train, seed)
    rows = [{"prompt": make_prompt(a, b), "answer": str(a * b)} for a, b in pairs]
    return rows[:n_val], rows[n_val:]


def write_tasks(out_dir: str | Path, n_train: int = N_TRAIN, n_val: int = N_VAL, seed: int = SEED) -> dict[str, Path]:
    """Writes ``mul_train.jsonl`` and ``mul_val.jsonl`` into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    val, train = build_tasks(n_train, n_val, seed)
    paths = {"train": out / "mul_train.jsonl", "val": out / "mul_val.jsonl"}
    write_jsonl(train, paths["train"])
    write_jsonl(val, paths["val"])
    return paths


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Write the multiplication tasks of the tool-agent demo.")
    p.add_argument("--out", default="examples/tool_agent/data")
    p.add_argument("--n-train", type=int, default=N_TRAIN)
    p.add_argument("--n-val", type=int, default=N_VAL)
    p.add_argument("--seed", type=int, default=SEED)
    a = p.parse_args(argv)
    try:
        paths = write_tasks(a.out, a.n_train, a.n_val, a.seed)
    except ValueError as exc:
        p.error(str(exc))
    print(f"wrote {a.n_train} train and {a.n_val} val tasks -> {paths['train']}, {paths['val']}")


if __name__ == "__main__":
    main()
