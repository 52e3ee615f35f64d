"""Build the embedded default model once: random tiny Qwen2 + local tokenizer, then the warm start.

The result (``<out>/warm``, an HF folder) is what ``examples/math/config/grpo_tiny_cpu.yaml``
trains. A ``READY`` stamp records the settings; a second call with the same settings returns at
once, other settings rebuild.

Example:
    python -m toolkits.tiny_math.prepare --out results/tiny_math
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

from toolkits.tiny_math.make_model import make_model
from toolkits.tiny_math.warm_start import warm_start

STAMP = "READY"


def prepare(out: str | Path, size: str = "tiny", steps: int = 800, seed: int = 0,
            sft_path: str = "examples/math/data/sft.jsonl") -> Path:
    """``<out>/warm``: the warm-started model (built only if missing or built differently)."""
    out = Path(out)
    warm, stamp = out / "warm", out / "warm" / STAMP
    settings = {"size": size, "steps": steps, "seed": seed, "sft": str(sft_path)}
    if stamp.is_file() and json.loads(stamp.read_text()) == settings:
        return warm
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    make_model(out / "base", size, seed)
    print(f"[tiny_math] built a random {size} Qwen2 model + tokenizer in {out / 'base'}; "
          f"warm start ({steps} supervised steps on {sft_path}) ...", flush=True)
    warm_start(out / "base", sft_path, warm, steps=steps, seed=seed)
    stamp.write_text(json.dumps(settings))
    print(f"[tiny_math] warm start done in {time.perf_counter() - t:.0f} s -> {warm}", flush=True)
    return warm


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Build the embedded tiny math model (cached).")
    p.add_argument("--out", default="results/tiny_math")
    p.add_argument("--size", default="tiny")
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(prepare(a.out, a.size, a.steps, a.seed))


if __name__ == "__main__":
    main()
