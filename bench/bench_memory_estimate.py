"""The memory estimator (rlinf/config/memory.py) against measured CPU peaks.

Two models with random weights (fp32, built in a temp folder): ``tiny`` (vocab 2048, hidden 256,
4 layers) and ``0.5b`` (Qwen2.5-0.5B's shape: hidden 896, 24 layers, 14 heads, 2 KV heads,
intermediate 4864, vocab 151936, tied). For each, in a fresh process of its own:

* ``train``: an FSDP2 actor (world of one, gloo, fp32) computes old log-probs, then two training
  steps of one micro-batch of 2 x 256 tokens (64 prompt + 192 response), PPO loss with the entropy
  bonus, AdamW;
* ``generate``: the HF rollout engine (fp32, lean decode) generates 192 tokens for 8 prompts of 64.

Measured: the process's peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs`` once the
engine is built) minus its RSS before the engine was made. Before that baseline the process runs
the same step once on a throwaway 1-layer model and drops it, so the baseline holds what the
estimate does not model (Python, torch, transformers and their kernels, thread pools). The
estimate is the sum of the estimator's parts for that step. Goal: within 25 %.

Usage::

    python bench/bench_memory_estimate.py               # both shapes (the 0.5B step needs ~8 GB)
    python bench/bench_memory_estimate.py --shape tiny
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

SHAPES = {
    "tiny": dict(vocab_size=2048, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=2),
    "0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2),
}
SEQ, PROMPT, MICRO = 256, 64, 2
GEN_PROMPTS, GEN_PROMPT, GEN_NEW = 8, 64, 192
GOAL = 0.25


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


def _model_shape(shape: dict):
    from rlinf.config.memory import ModelShape

    return ModelShape(vocab=shape["vocab_size"], hidden=shape["hidden_size"], layers=shape["num_hidden_layers"],
                      heads=shape["num_attention_heads"], kv_heads=shape["num_key_value_heads"],
                      intermediate=shape["intermediate_size"])


WARMUP = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
              num_key_value_heads=1)


def _warm_up(run) -> None:
    """Run ``run(model_dir, shape)`` once on a throwaway 1-layer model (loads code and kernels)."""
    import gc

    from toolkits.gpu_check.common import save_random_qwen2

    with tempfile.TemporaryDirectory() as folder:
        run(save_random_qwen2(folder, seed=0, **WARMUP), WARMUP)
    gc.collect()


def _train_step(model_dir: str, shape: dict) -> int:
    """Engine, old log-probs, two steps; returns the peak RSS growth over the RSS before the engine."""
    import torch

    from rlinf.engines.training.fsdp import FSDPEngine
    from toolkits.gpu_check.common import actor_config, loss_fn, make_batch, split

    batch = make_batch(shape["vocab_size"], [PROMPT] * MICRO, [SEQ - PROMPT] * MICRO, seed=0)
    before = _status("VmRSS")
    engine = FSDPEngine(model_dir, actor_config(), device=torch.device("cpu"), total_steps=2)
    batch.old_logprobs = engine.compute_logprobs(batch, MICRO)[0]
    _reset_peak()
    for _ in range(2):
        engine.train_minibatch(split(batch, MICRO), loss_fn(), batch.num_response_tokens)
    return _status("VmHWM") - before


def child_train(model_dir: str, shape: dict) -> dict:
    from rlinf.config.memory import TrainSetup, training_items
    from toolkits.gpu_check.common import world_of_one

    with world_of_one("gloo"):
        _warm_up(_train_step)
        measured = _train_step(model_dir, shape)
    items = training_items(TrainSetup(_model_shape(shape), micro_batch=MICRO, seq=SEQ, response=SEQ - PROMPT,
                                      entropy=True))
    return {"measured": measured, "parts": {i.name: i.bytes for i in items}}


def _generate(model_dir: str, shape: dict) -> int:
    """Engine, one generate call; returns the peak RSS growth over the RSS before the engine."""
    import torch

    from rlinf.config.algorithm import SamplingParams
    from rlinf.engines.rollout.hf import HFRolloutEngine

    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, shape["vocab_size"], (GEN_PROMPT,), generator=g).tolist() for _ in range(GEN_PROMPTS)]
    before = _status("VmRSS")
    engine = HFRolloutEngine(model_dir, device="cpu", dtype=torch.float32, max_batch_size=64)
    _reset_peak()
    engine.generate(prompts, SamplingParams(max_new_tokens=GEN_NEW, min_new_tokens=GEN_NEW), n=1, seed=0)
    return _status("VmHWM") - before


def child_generate(model_dir: str, shape: dict) -> dict:
    from rlinf.config.memory import generate_items

    _warm_up(_generate)
    measured = _generate(model_dir, shape)
    items = generate_items(_model_shape(shape), 4, GEN_PROMPTS, GEN_PROMPT, GEN_NEW)
    return {"measured": measured, "parts": {i.name: i.bytes for i in items}}


def _child(kind: str, model_dir: str, shape: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--model-dir", model_dir, "--shape", shape],
                         capture_output=True, text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "2"})
    if out.returncode != 0:
        raise SystemExit(f"error: {kind} {shape} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=[*SHAPES, "both"], default="both")
    parser.add_argument("--child", choices=["save", "train", "generate"], help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        shape = SHAPES[args.shape]
        if args.child == "save":
            from toolkits.gpu_check.common import save_random_qwen2

            save_random_qwen2(args.model_dir, seed=0, **shape)
            print("{}")
            return 0
        print(json.dumps((child_train if args.child == "train" else child_generate)(args.model_dir, shape)))
        return 0
    rows = []
    for name in (SHAPES if args.shape == "both" else [args.shape]):
        with tempfile.TemporaryDirectory(prefix=f"memest_{name}_") as folder:
            _child("save", folder, name)
            for kind in ("train", "generate"):
                r = _child(kind, folder, name)
                est = sum(r["parts"].values())
                ratio = est / r["measured"]
                what = (f"FSDP2 step, {MICRO} x {SEQ} tokens, fp32" if kind == "train"
                        else f"HF generate, {GEN_PROMPTS} x ({GEN_PROMPT} + {GEN_NEW}) tokens, fp32")
                rows.append((name, what, est, r["measured"], ratio, r["parts"]))
    print("| model | step | estimate MiB | measured peak RSS MiB | estimate / measured | goal +-25 % |")
    print("|---|---|---|---|---|---|")
    for name, what, est, meas, ratio, _ in rows:
        print(f"| {name} | {what} | {est / 2**20:.1f} | {meas / 2**20:.1f} | {ratio:.2f} | "
              f"{'PASS' if abs(ratio - 1) <= GOAL else 'MISS'} |")
    for name, what, *_, parts in rows:
        print(f"# {name} {what}: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in parts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
