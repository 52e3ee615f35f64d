"""Build the tiny web policy in one command: demonstrations, tokenizer, model, warm start, check.

    python -m toolkits.web_tasks.prepare --out results/tiny_web

1. ``<out>/demos.jsonl``: the expert on the train tasks of ``--family`` in real Chromium
   (:mod:`.demos`; settings of ``examples/web_agent/config/web_agent_tiny_cpu.yaml``). Defaults:
   the learning demo's family ``shop_category``, 4 episodes per train task, 75 % of them
   ``guess`` episodes (answer a random category at once), the rest the expert's (click ``Back to
   category``, answer the heading), plus 3 counterfactual copies of each answer on a listing.
2. ``<out>/base``: a tokenizer trained on those chats (:mod:`.tokenizer`) and a random tiny
   ``Qwen2ForCausalLM`` (:mod:`.make_model`).
3. ``<out>/warm``: the supervised warm start (:mod:`.warm_start`), the folder the tiny web config
   trains (``policy_config.base_model: results/tiny_web/warm``).
4. The warm policy's success on the held-out test tasks of the family (:mod:`.evaluate`): greedy,
   and sampled at temperature 1 with 4 episodes per task (what the tiny config evaluates).

Each stage is cached: ``<out>/READY`` records the settings and results, and a second run with
the same arguments prints them and returns at once; the demonstrations are reused when only the
model or training settings change.

Measured on this machine (2 shared CPU cores, no GPU), defaults: see ``RESULTS`` below, copied
from ``<out>/READY`` of the reference run.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from rlinf.utils.extras import exit_if_missing
from toolkits.web_tasks.demos import augment_rows, collect_demos, read_jsonl, write_jsonl
from toolkits.web_tasks.evaluate import TRAIN_TASKS, evaluate_model, select_tasks, tiny_settings
from toolkits.web_tasks.make_model import MAX_NEW_TOKENS, describe, make_model
from toolkits.web_tasks.make_tasks import DEMO_FAMILY
from toolkits.web_tasks.tokenizer import DEFAULT_VOCAB_SIZE, tokenizer_from_demos
from toolkits.web_tasks.warm_start import encode_demos, warm_start

STAMP = "READY"
DATA = TRAIN_TASKS.parent
#: sampled (temperature 1) episodes per held-out task in the final check
SAMPLED_REPEATS = 4
RESULTS = ("2026-11-26, load 3-8: 102 s in all (demonstrations 24 s: 256 episodes, 328 steps; warm start "
           "67 s: 400 steps on 544 rows, loss 5.09 -> 0.16); 0.70M params; held-out success 25 % greedy "
           "(16 tasks), 50 % sampled (64 episodes: 39 % look, and then answer right, the rest guess)")


@dataclass(frozen=True)
class Settings:
    """Everything the result depends on (the cache key)."""

    family: str = DEMO_FAMILY
    train_tasks: str = str(DATA / f"train_{DEMO_FAMILY}.jsonl")
    test_tasks: str = str(DATA / f"test_{DEMO_FAMILY}.jsonl")
    repeats: int = 4
    noise: float = 0.0
    searches: int = 0
    search_share: float = 0.0
    guess_share: float = 0.75
    clicks: int = 0
    answers: int = 3
    types: int = 0
    size: str = "tiny"
    vocab_size: int = DEFAULT_VOCAB_SIZE
    whole_names: bool = True
    max_positions: int = 1024
    steps: int = 400
    batch_size: int = 16
    lr: float = 3e-3
    prompt_weight: float = 0.3
    seed: int = 0
    threads: int = 2

    def demo_key(self) -> dict:
        """The settings the demonstrations depend on, with the train file's digest."""
        digest = hashlib.sha256(Path(self.train_tasks).read_bytes()).hexdigest()[:16]
        return {"family": self.family, "train_tasks": self.train_tasks, "digest": digest,
                "repeats": self.repeats, "noise": self.noise, "searches": self.searches, "seed": self.seed,
                "search_share": self.search_share, "guess_share": self.guess_share,
                "settings": repr(tiny_settings())}

    def key(self) -> dict:
        digest = hashlib.sha256(Path(self.test_tasks).read_bytes()).hexdigest()[:16]
        return {**asdict(self), **self.demo_key(), "test_digest": digest}


def _stamped(path: Path, key: dict) -> dict | None:
    """The stamp's content when it was written for ``key``, else None."""
    if not path.is_file():
        return None
    stamp = json.loads(path.read_text())
    return stamp if stamp.get("key") == key else None


def prompt_lengths(tokenizer, rows: list[dict]) -> dict:
    """Token counts of the demonstration prompts (chat template included) and replies."""
    encoded = encode_demos(tokenizer, rows)
    prompts = [n for _, n in encoded]
    replies = [len(ids) - n for ids, n in encoded]
    return {"prompt_mean": round(statistics.mean(prompts), 1), "prompt_max": max(prompts),
            "reply_max": max(replies), "chars_max": max(len(r["prompt"]) for r in rows)}


def build_demos(out: Path, s: Settings, log=print) -> list[dict]:
    """``<out>/demos.jsonl`` (cached by its own stamp)."""
    path, stamp = out / "demos.jsonl", out / "demos.stamp"
    if _stamped(stamp, s.demo_key()) and path.is_file():
        return read_jsonl(path)
    started = time.perf_counter()
    tasks = select_tasks(s.train_tasks, s.family)
    rows, stats = asyncio.run(collect_demos(tasks, repeats=s.repeats, noise=s.noise, searches=s.searches,
                                            seed=s.seed, search_share=s.search_share, guess_share=s.guess_share))
    if stats["expert_success_clean"] < 1.0:
        raise RuntimeError(f"the expert failed clean {s.family} train episodes: {stats['failed'][:5]}")
    write_jsonl(rows, path)
    stats["seconds"] = round(time.perf_counter() - started, 1)
    stamp.write_text(json.dumps({"key": s.demo_key(), "stats": stats}))
    log(f"[tiny_web] {len(tasks)} train tasks, {stats['episodes']} expert episodes: {stats['rows']} "
        f"demonstration steps ({stats['rows_after_noise']} after a random action) in {stats['seconds']} s -> {path}")
    return rows


def prepare(out: str | Path, s: Settings = Settings(), log=print) -> dict:
    """Build (or reuse) ``<out>/warm``; returns the stamp: ``key`` and ``results``."""
    out = Path(out)
    stamp_path = out / STAMP
    torch.set_num_threads(s.threads)
    done = _stamped(stamp_path, s.key())
    if done and (out / "warm" / "config.json").is_file():
        return done
    out.mkdir(parents=True, exist_ok=True)
    stamp_path.unlink(missing_ok=True)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    rows = build_demos(out, s, log)
    timings["demos_s"] = round(time.perf_counter() - t, 1)

    t = time.perf_counter()
    from rlinf.envs.web_sites.catalog import shop_catalog

    names = [p.name for p in shop_catalog(0).products] if s.whole_names else []
    tok = tokenizer_from_demos(rows, s.vocab_size, s.max_positions, names)
    lengths = prompt_lengths(tok, rows)
    if lengths["prompt_max"] + MAX_NEW_TOKENS > s.max_positions:
        raise ValueError(f"max_positions {s.max_positions} is less than the longest prompt "
                         f"({lengths['prompt_max']} tokens) + {MAX_NEW_TOKENS} reply tokens")
    for name in ("base", "warm"):
        shutil.rmtree(out / name, ignore_errors=True)
    make_model(tok, out / "base", s.size, s.seed, s.max_positions)
    timings["tokenizer_model_s"] = round(time.perf_counter() - t, 1)
    from transformers import AutoModelForCausalLM

    size_line = describe(AutoModelForCausalLM.from_pretrained(str(out / "base")))
    log(f"[tiny_web] tokenizer {len(tok)} tokens, prompts {lengths['prompt_mean']} tokens on average, "
        f"{lengths['prompt_max']} at most; model {size_line}")

    extra = augment_rows(rows, s.clicks, s.answers, s.seed, types=s.types, made_up=not s.whole_names)
    log(f"[tiny_web] warm start on {len(rows)} demonstration steps + {len(extra)} counterfactual copies ...")
    res = warm_start(out / "base", rows + extra, out / "warm", steps=s.steps, batch_size=s.batch_size, lr=s.lr,
                     seed=s.seed, prompt_weight=s.prompt_weight, log=log)
    timings["warm_start_s"] = round(res["seconds"], 1)

    t = time.perf_counter()
    test = select_tasks(s.test_tasks, s.family)
    held_out = asyncio.run(evaluate_model(out / "warm", test, settings=tiny_settings("test")))
    repeated = [dict(task, repeat=r) for task in test for r in range(SAMPLED_REPEATS)]
    sampled = asyncio.run(evaluate_model(out / "warm", repeated, temperature=1.0, seed=s.seed,
                                         settings=tiny_settings("test")))
    timings["evaluate_s"] = round(time.perf_counter() - t, 1)
    results = {"model": size_line, "lengths": lengths, "demo_rows": len(rows), "augmented_rows": len(extra),
               "timings": timings,
               "first_loss": round(sum(res["losses"][:10]) / min(10, len(res["losses"])), 4),
               "last_loss": round(sum(res["losses"][-10:]) / min(10, len(res["losses"])), 4),
               "held_out": {k: held_out[k] for k in ("tasks", "success_rate", "exact_rate", "avg_steps",
                                                     "invalid_action_rate", "statuses")},
               "held_out_sampled": {k: sampled[k] for k in ("tasks", "success_rate", "avg_steps", "statuses")}}
    stamp = {"key": s.key(), "results": results}
    stamp_path.write_text(json.dumps(stamp, indent=1))
    return stamp


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    d = Settings()
    p = argparse.ArgumentParser(description="Build the tiny web policy (cached).")
    p.add_argument("--out", default="results/tiny_web")
    p.add_argument("--family", default=d.family)
    p.add_argument("--train-tasks", default=d.train_tasks)
    p.add_argument("--test-tasks", default=d.test_tasks)
    p.add_argument("--repeats", type=int, default=d.repeats)
    p.add_argument("--noise", type=float, default=d.noise)
    p.add_argument("--searches", type=int, default=d.searches)
    p.add_argument("--search-share", type=float, default=d.search_share,
                   help="share of expert episodes that search from the shop home instead of browsing")
    p.add_argument("--guess-share", type=float, default=d.guess_share,
                   help="share of episodes that answer a random value at once (closed-answer families)")
    p.add_argument("--clicks", type=int, default=d.clicks, help="counterfactual copies per listing click")
    p.add_argument("--answers", type=int, default=d.answers, help="counterfactual copies per answer")
    p.add_argument("--types", type=int, default=d.types, help="counterfactual copies per typed search")
    p.add_argument("--size", default=d.size)
    p.add_argument("--vocab-size", type=int, default=d.vocab_size)
    p.add_argument("--no-whole-names", dest="whole_names", action="store_false",
                   help="spell product names with BPE pieces instead of one token each")
    p.add_argument("--max-positions", type=int, default=d.max_positions)
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--prompt-weight", type=float, default=d.prompt_weight)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--threads", type=int, default=d.threads)
    a = p.parse_args(argv)
    exit_if_missing(["web"], "Playwright (the expert demonstrations drive the browser)")
    s = Settings(**{f.name: getattr(a, f.name) for f in fields(Settings)})
    started = time.perf_counter()
    stamp = prepare(a.out, s)
    r = stamp["results"]
    print(f"[tiny_web] {Path(a.out) / 'warm'}: {r['model']}; held-out {s.family} success "
          f"{r['held_out']['success_rate']:.3f} over {r['held_out']['tasks']} tasks (greedy), "
          f"{r['held_out_sampled']['success_rate']:.3f} over {r['held_out_sampled']['tasks']} sampled episodes; "
          f"timings {r['timings']} ({time.perf_counter() - started:.1f} s this call)")


if __name__ == "__main__":
    main()
