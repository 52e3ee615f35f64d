"""Build the tool agent's tiny model once: random tiny Qwen2 + tool tokenizer, then the warm start.

``<out>/base`` is the random model, ``<out>/warm`` the warm-started one (both HF folders with the
tokenizer) that the tool-agent demo trains with RL. A ``READY`` stamp in ``<out>/warm`` records
the settings; a second call with the same settings returns at once, other settings rebuild.

Sizes (tied embeddings, the tool tokenizer's vocabulary: 383 tokens, its BPE training stops below the
512 asked for when the corpus has no merge left):

* ``tiny``: :mod:`toolkits.tiny_math.make_model`'s tiny shape (hidden 128, 3 layers, 4 heads,
  2 KV heads, MLP 384), 651,520 parameters;
* ``tiny4``: the same with 4 layers and MLP 512, 782,848 parameters.

Example:
    python -m toolkits.tool_agent.prepare --out results/tiny_tool
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from toolkits.tiny_math.make_model import SIZES as TINY_MATH_SIZES
from toolkits.tiny_math.make_model import save_model
from toolkits.tool_agent.tokenizer import build_tokenizer
from toolkits.tool_agent.warm_start import warm_start

__all__ = ["SIZES", "STAMP", "make_config", "make_base", "prepare"]

STAMP = "READY"
SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(TINY_MATH_SIZES["tiny"]),
    "tiny4": {**TINY_MATH_SIZES["tiny"], "num_hidden_layers": 4, "intermediate_size": 512},
}
DEFAULTS = {"size": "tiny", "steps": 1600, "copy_steps": 1000, "lr": 3e-3, "batch_size": 16, "tool_fraction": 0.2,
            "tool_practice": None, "seed": 0}


def make_config(tokenizer: PreTrainedTokenizerFast, size: str = "tiny") -> Qwen2Config:
    """The ``Qwen2Config`` of one of :data:`SIZES` for ``tokenizer``'s vocabulary and special ids.

    >>> make_config(build_tokenizer(), "tiny").num_hidden_layers
    3
    """
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose from {', '.join(sorted(SIZES))}")
    return Qwen2Config(vocab_size=len(tokenizer), max_position_embeddings=512, rope_theta=10000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=True, use_sliding_window=False, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                       torch_dtype="float32", **SIZES[size])


def make_base(out: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Writes a randomly initialised model with the tool tokenizer into ``out``."""
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    return save_model(Qwen2ForCausalLM(make_config(tokenizer, size)), tokenizer, out)


def prepare(out: str | Path, train_path: str | Path = "examples/tool_agent/data/mul_train.jsonl",
            **settings) -> Path:
    """``<out>/warm``: the warm-started model, built only if missing or built with other settings.

    Args:
        out: Folder for ``base`` and ``warm``.
        train_path: The train tasks (JSON Lines of ``prompt`` / ``answer``).
        settings: Any of :data:`DEFAULTS` (``size``, ``steps``, ``copy_steps``, ``lr``,
            ``batch_size``, ``tool_fraction``, ``tool_practice``, ``seed``; see
            :func:`~toolkits.tool_agent.warm_start.warm_start`).
    """
    unknown = set(settings) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; expected some of {sorted(DEFAULTS)}")
    if not Path(train_path).is_file():
        raise ValueError(f"no train tasks at {train_path}; write them with python -m toolkits.tool_agent.make_tasks")
    s = {**DEFAULTS, **settings}
    if s["size"] not in SIZES:
        raise ValueError(f"unknown size {s['size']!r}; choose from {', '.join(sorted(SIZES))}")
    out = Path(out)
    warm, stamp = out / "warm", out / "warm" / STAMP
    stamped = {**s, "train": str(train_path)}
    if stamp.is_file() and json.loads(stamp.read_text()) == stamped:
        print(f"[tiny_tool] {warm} is ready (same settings)", flush=True)
        return warm
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    make_base(out / "base", s["size"], s["seed"])
    t1 = time.perf_counter()
    print(f"[tiny_tool] random {s['size']} Qwen2 + tokenizer in {t1 - t0:.1f} s -> {out / 'base'}; warm start "
          f"({s['steps']} steps, the first {s['copy_steps']} on tool episodes only, then tool fraction "
          f"{s['tool_fraction']}, practice {s['tool_practice']}) on {train_path} ...", flush=True)
    res = warm_start(out / "base", train_path, warm, steps=s["steps"], copy_steps=s["copy_steps"],
                     batch_size=s["batch_size"], lr=s["lr"], tool_fraction=s["tool_fraction"],
                     tool_practice=s["tool_practice"], seed=s["seed"])
    stamp.write_text(json.dumps(stamped))
    print(f"[tiny_tool] warm start done in {res['seconds']:.0f} s (final loss {res['loss']:.3f}); "
          f"total {time.perf_counter() - t0:.0f} s -> {warm}", flush=True)
    return warm


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Build the tool agent's tiny warm-started model (cached).")
    p.add_argument("--out", default="results/tiny_tool")
    p.add_argument("--data", default="examples/tool_agent/data/mul_train.jsonl", help="train tasks (JSONL)")
    p.add_argument("--size", default=DEFAULTS["size"], choices=sorted(SIZES))
    p.add_argument("--steps", type=int, default=DEFAULTS["steps"])
    p.add_argument("--copy-steps", type=int, default=DEFAULTS["copy_steps"],
                   help="first steps on tool episodes only (learn to copy digits)")
    p.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    p.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    p.add_argument("--tool-fraction", type=float, default=DEFAULTS["tool_fraction"])
    p.add_argument("--tool-practice", type=float, default=DEFAULTS["tool_practice"],
                   help="share of tool episodes after the copy steps (at least --tool-fraction)")
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    try:
        print(prepare(a.out, a.data, size=a.size, steps=a.steps, copy_steps=a.copy_steps, lr=a.lr,
                      batch_size=a.batch_size, tool_fraction=a.tool_fraction, tool_practice=a.tool_practice,
                      seed=a.seed))
    except ValueError as exc:
        p.error(str(exc))


if __name__ == "__main__":
    main()
