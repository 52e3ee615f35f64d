"""Synthetic arithmetic dataset for the tiny CPU math GRPO job.

Problems are ``a + b`` over ``0..max_operand`` (default 999; optionally also ``a - b`` with a
non-negative result). Distinct problems are drawn with a seeded generator and cut into disjoint
val / train slices, so the split is deterministic and has no overlap.

The supervised demonstrations (``sft.jsonl``, drawn from the train slice only) come in two
styles, mixed at random:

* direct (``1 - worked_frac``): ``"358 + 288 = 646, so the answer is \\boxed{646}"``: the sum in
  one shot, which a tiny model rarely gets right for three-digit numbers;
* worked (``worked_frac``): ``"Units 8+8=16, tens 5+8+1=14, hundreds 3+2+1=6, so the answer is
  \\boxed{646}"``: column addition, reliable once the single-digit facts are learned.

A short warm start on this mix gives a model that answers directly most of the time (so greedy
accuracy is low) but writes the working in a good share of samples (so sampled groups mix right
and wrong answers). Reinforcement learning then has an easy, visible thing to learn: prefer the
working.

Files written (JSON Lines, one object per line):

* ``train.jsonl`` and ``val.jsonl``: ``{"prompt": str, "answer": str}``; ``answer`` is the gold
  integer as a string.
* ``sft.jsonl``: ``{"prompt": str, "answer": str, "response": str}``.

Example:
    python -m toolkits.tiny_math.make_dataset --out examples/math/data
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path

PROMPT_TEMPLATE = "What is {a} {op} {b}? Put the final answer in \\boxed{{}}."
RESPONSE_TEMPLATE = "{a} {op} {b} = {c}, so the answer is \\boxed{{{c}}}"
WORKED_TEMPLATE = "{steps}, so the answer is \\boxed{{{c}}}"
PLACES = ("Units", "tens", "hundreds", "thousands")


@dataclass(frozen=True)
class DatasetSpec:
    """Parameters of the generated dataset.

    Attributes:
        max_operand: Largest operand value (operands are drawn from ``0..max_operand``).
        ops: Operators to include, a subset of ``"+-"``.
        n_train: Number of train rows.
        n_val: Number of held-out val rows.
        n_sft: Number of supervised demonstrations (taken from the train slice).
        worked_frac: Fraction of ``+`` demonstrations written as digit-by-digit working; the
            rest answer directly.
        seed: Seed of the draw that decides the problems, the split and the styles.
    """

    max_operand: int = 999
    ops: str = "+"
    n_train: int = 3000
    n_val: int = 256
    n_sft: int = 2000
    worked_frac: float = 0.5
    seed: int = 0


def _space_size(spec: DatasetSpec) -> int:
    """Number of distinct problems allowed by ``spec``."""
    m = spec.max_operand + 1
    return sum(m * m if op == "+" else m * (m + 1) // 2 for op in spec.ops)


def _sample_problems(spec: DatasetSpec, n: int) -> list[tuple[int, str, int]]:
    """Draws ``n`` distinct problems ``(a, op, b)`` in a seeded order.

    Raises:
        ValueError: On an unknown operator or if fewer than ``n`` distinct problems exist.
    """
    if not spec.ops or any(op not in "+-" for op in spec.ops):
        raise ValueError(f"unsupported operators {spec.ops!r}; use '+' and/or '-'")
    if n > _space_size(spec):
        raise ValueError(f"only {_space_size(spec)} distinct problems; {n} requested")
    rng = random.Random(spec.seed)
    seen: set[tuple[int, str, int]] = set()
    out = []
    while len(out) < n:
        op = rng.choice(spec.ops)
        a, b = rng.randint(0, spec.max_operand), rng.randint(0, spec.max_operand)
        if op == "-" and b > a:
            a, b = b, a
        if (a, op, b) not in seen:
            seen.add((a, op, b))
            out.append((a, op, b))
    return out


def solve(a: int, op: str, b: int) -> int:
    """Returns the value of ``a op b``."""
    return a + b if op == "+" else a - b


def make_prompt(a: int, op: str, b: int) -> str:
    """Returns the user prompt for one problem."""
    return PROMPT_TEMPLATE.format(a=a, op=op, b=b)


def make_response(a: int, op: str, b: int, worked: bool = False) -> str:
    """Returns a demonstration response for one problem; it ends with ``\\boxed{answer}``.

    Args:
        a: First operand.
        op: ``"+"`` or ``"-"``.
        b: Second operand.
        worked: If True, column addition written out place by place (units, then tens and
            hundreds with their carry), e.g. ``"Units 8+8=16, tens 5+8+1=14, so the answer is
            \\boxed{146}"``; only for ``+`` with operands below 10000. Otherwise the direct
            one-line answer ``"58 + 88 = 146, so the answer is \\boxed{146}"``.

    Returns:
        The response text.
    """
    c = solve(a, op, b)
    if not worked:
        return RESPONSE_TEMPLATE.format(a=a, op=op, b=b, c=c)
    if op != "+" or max(a, b) >= 10 ** len(PLACES):
        limit = 10 ** len(PLACES)
        raise ValueError(f"worked responses exist only for '+' with operands below {limit}")
    parts, carry = [], 0
    for i in range(len(str(max(a, b)))):
        da, db = a // 10**i % 10, b // 10**i % 10
        total = da + db + carry
        terms = f"{da}+{db}" if i == 0 else f"{da}+{db}+{carry}"
        parts.append(f"{PLACES[i]} {terms}={total}")
        carry = total // 10
    return WORKED_TEMPLATE.format(steps=", ".join(parts), c=c)


def build(spec: DatasetSpec = DatasetSpec()) -> dict[str, list[dict[str, str]]]:
    """Builds the three splits in memory.

    Args:
        spec: Dataset parameters.

    Returns:
        A mapping with keys ``train``, ``val`` and ``sft`` to lists of row dicts.

    Raises:
        ValueError: If the problem space is too small for the requested split sizes.
    """
    if spec.n_sft > spec.n_train:
        raise ValueError("n_sft must not exceed n_train (demonstrations come from the train slice)")
    problems = _sample_problems(spec, spec.n_val + spec.n_train)
    val = problems[: spec.n_val]
    train = problems[spec.n_val :]
    sft = train[: spec.n_sft]
    limit = 10 ** len(PLACES)
    can_work = [i for i, (a, op, b) in enumerate(sft) if op == "+" and max(a, b) < limit]
    n_worked = round(spec.worked_frac * len(can_work))
    worked = set(random.Random(spec.seed + 1).sample(can_work, n_worked))

    def row(p: tuple[int, str, int]) -> dict[str, str]:
        return {"prompt": make_prompt(*p), "answer": str(solve(*p))}

    return {
        "train": [row(p) for p in train],
        "val": [row(p) for p in val],
        "sft": [
            {**row(p), "response": make_response(*p, worked=i in worked)}
            for i, p in enumerate(sft)
        ],
    }


def write_jsonl(rows: list[dict[str, str]], path: Path) -> None:
    """Writes ``rows`` as JSON Lines to ``path`` (parents are created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    """Reads a JSON Lines file into a list of dicts."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_dataset(out_dir: str | Path, spec: DatasetSpec = DatasetSpec()) -> dict[str, Path]:
    """Builds the splits and writes ``train.jsonl``, ``val.jsonl`` and ``sft.jsonl``.

    Args:
        out_dir: Output folder.
        spec: Dataset parameters.

    Returns:
        The path of each written file, keyed by split name.
    """
    splits = build(spec)
    paths = {}
    for name, rows in splits.items():
        paths[name] = Path(out_dir) / f"{name}.jsonl"
        write_jsonl(rows, paths[name])
    return paths


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    d = DatasetSpec()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="examples/math/data", help="output folder")
    p.add_argument("--max-operand", type=int, default=d.max_operand)
    p.add_argument("--ops", default=d.ops, help="operators, e.g. '+' or '+-'")
    p.add_argument("--n-train", type=int, default=d.n_train)
    p.add_argument("--n-val", type=int, default=d.n_val)
    p.add_argument("--n-sft", type=int, default=d.n_sft)
    p.add_argument("--worked-frac", type=float, default=d.worked_frac)
    p.add_argument("--seed", type=int, default=d.seed)
    a = p.parse_args(argv)
    spec = DatasetSpec(a.max_operand, a.ops, a.n_train, a.n_val, a.n_sft, a.worked_frac, a.seed)
    for name, path in write_dataset(a.out, spec).items():
        print(f"{name}: {sum(1 for _ in open(path))} rows -> {path}")


if __name__ == "__main__":
    main()
