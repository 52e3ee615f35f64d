"""Math reward throughput: MathVerifier's process pool vs math-verify called in-process.

Run: ``python bench/bench_math_reward.py [--quick]`` (default about 40 s on 2 cores; ``--quick``
about 10 s). Not a test: numbers depend on the machine and its load.

Workload: "typical" pairs shaped like a GRPO batch: PAIRS / 8 problems x 8 sampled responses
(same gold within a group). Gold kinds: integer, fraction, k*sqrt(m), expanded square,
interval, two-element set, assignment ``x = n``; responses are ~500 characters of filler plus
``\\boxed{...}`` holding an equivalent form (``0.75`` for ``\\frac{3}{4}``, ``(x+a)^2``...) or a
wrong one, about half each, and 1 in 16 without a box. Every timed run gets freshly drawn
numbers so neither side gains from math-verify's / sympy's parse caches across runs.

Paths, each scoring the same kind of batch (boxed answer extraction included in both):

* reference -- on the main thread: ``extract_boxed_answer``, then ``verify(parse(gold),
  parse(answer))`` with math-verify's default signal-alarm timeouts; gold parsed every time.
* MathVerifier(num_processes=N) -- ``score(responses, golds)``; children cache parsed golds.

Method: one untimed warm-up batch per path (starts the children), then RUNS timed batches per
path with the order of paths rotating; cells are the best run (all runs go to stderr).
The hostile table times single ``score([response], ["2"])`` calls on a warm 1-process verifier
with the default 2 s budget, with the default answer-length cap and with the cap off.
"""

from __future__ import annotations

import argparse
import random
import sys
import time


def make_batch(seed: int, n: int) -> tuple[list[str], list[str]]:
    """``n`` (response, gold) pairs in groups of 8 sharing a gold; numbers drawn from ``seed``."""
    rng = random.Random(seed)
    filler = "We simplify step by step, checking each case. " * 10
    responses, golds = [], []
    for _ in range(max(1, n // 8)):
        a, b = rng.randint(2, 10**6), rng.randint(2, 10**6)
        kind = rng.randrange(7)
        if kind == 0:
            gold, right, wrong = str(a), f"{a}.0", str(a + 1)
        elif kind == 1:
            q = rng.choice([2, 4, 5, 8, 10, 20])
            gold, right, wrong = rf"\frac{{{a}}}{{{q}}}", str(a / q), rf"\frac{{{a + 1}}}{{{q}}}"
        elif kind == 2:
            m = rng.choice([2, 3, 5, 6, 7])
            k = a % 1000 + 2
            gold, right = rf"{k}\sqrt{{{m}}}", rf"\sqrt{{{k * k * m}}}"
            wrong = rf"{k + 1}\sqrt{{{m}}}"
        elif kind == 3:
            c = a % 1000
            gold, right, wrong = f"x^2+{2 * c}x+{c * c}", f"(x+{c})^2", f"(x+{c + 1})^2"
        elif kind == 4:
            lo, hi = sorted((a, b + 10**6))
            gold, right, wrong = f"[{lo},{hi})", f"[{lo}, {hi})", f"({lo},{hi}]"
        elif kind == 5:
            gold, right, wrong = rf"\{{{a},{b}\}}", rf"\{{{b},{a}\}}", rf"\{{{a},{b + 1}\}}"
        else:
            gold, right, wrong = str(a), f"x = {a}", f"x = {a + 2}"
        for _ in range(8):
            roll = rng.random()
            if roll < 1 / 16:
                response = filler + " I am not sure."
            else:
                answer = right if roll < 0.55 else wrong
                response = filler + rf"So the answer is $\boxed{{{answer}}}$."
            responses.append(response)
            golds.append(gold)
    return responses, golds


def reference_score(responses: list[str], golds: list[str]) -> list[bool]:
    from math_verify import parse, verify

    from rlinf.rewards import extract_boxed_answer

    out = []
    for response, gold in zip(responses, golds):
        answer = extract_boxed_answer(response)
        out.append(bool(answer) and verify(parse(f"${gold}$"), parse(f"${answer}$")))
    return out


HOSTILE = {
    r"nested \frac (10k chars)": "\\frac{" * 999 + "1" + "}{2}" * 999,
    "((((... (10k chars)": "(" * 10000,
    "x_{0}+x_{1}+... long sum (10k chars)": "+".join(f"x_{{{i}}}" for i in range(1234)),
    "power tower 9^9^9^9^9^9": "9^{9^{9^{9^{9^{9}}}}}",
    "10^{10^{10}}": "10^{10^{10}}",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 pairs, 1 run, 2 hostile inputs")
    args = parser.parse_args()
    from rlinf.rewards import MathVerifier

    n_pairs, runs = (104, 1) if args.quick else (1000, 3)
    verifiers = {f"MathVerifier(num_processes={p})": MathVerifier(num_processes=p) for p in (1, 2)}
    paths = {"math-verify in-process, main thread (reference)": reference_score}
    paths.update({name: v.score for name, v in verifiers.items()})
    best: dict[str, float] = {}
    seed = 1000
    for _name, fn in paths.items():  # warm-up: imports, child start-up
        fn(*make_batch(seed, 64))
        seed += 1
    for run in range(runs):
        order = list(paths)[run % len(paths):] + list(paths)[:run % len(paths)]
        for name in order:
            responses, golds = make_batch(seed, n_pairs)
            seed += 1
            start = time.perf_counter()
            paths[name](responses, golds)
            rate = len(responses) / (time.perf_counter() - start)
            best[name] = max(best.get(name, 0.0), rate)
            print(f"run {run}: {name}: {rate:.0f} checks/s", file=sys.stderr)
    # Same batch through both sides: the verdicts must agree.
    responses, golds = make_batch(7, n_pairs)
    pooled = verifiers["MathVerifier(num_processes=1)"].score(responses, golds)
    agree = sum(a == b for a, b in zip(reference_score(responses, golds), pooled))

    ref = best["math-verify in-process, main thread (reference)"]
    print(f"\n### Typical pairs ({n_pairs} per batch, best of {runs})\n")
    print("| path | checks/s | vs reference |")
    print("|---|---:|---:|")
    for name in paths:
        print(f"| {name} | {best[name]:.0f} | {best[name] / ref:.2f}x |")
    print(f"\nVerdicts of the reference and MathVerifier agree on {agree}/{len(responses)} pairs.")

    hostile = list(HOSTILE.items())[: 2 if args.quick else 5]
    capped = verifiers["MathVerifier(num_processes=1)"]
    uncapped = MathVerifier(max_answer_chars=None)
    uncapped.score([r"\boxed{2}"], ["2"])  # warm
    print("\n### Hostile answers (one per call, 1 process, 2 s budget)\n")
    print("| boxed answer | chars | verdict | latency, default cap 2048 chars | latency, no cap |")
    print("|---|---:|---|---:|---:|")
    worst = [0.0, 0.0]
    for label, text in hostile:
        cells = []
        for i, v in enumerate((capped, uncapped)):
            start = time.perf_counter()
            verdict = v.score([rf"\boxed{{{text}}}"], ["2"])[0]
            seconds = time.perf_counter() - start
            worst[i] = max(worst[i], seconds)
            cells.append(f"{seconds:.3f} s")
        print(f"| {label.replace('|', '/')} | {len(text)} | {verdict} | {cells[0]} | {cells[1]} |")
    print(f"| **worst case** | | | {worst[0]:.3f} s | {worst[1]:.3f} s |")
    for v in (*verifiers.values(), uncapped):
        v.close()


if __name__ == "__main__":
    main()
