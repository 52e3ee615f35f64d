"""Fully asynchronous RL against the synchronous loop and the lookahead queue (issue 45): trained
samples per second, who waits, and held-out success, on a tool agent whose tool has a heavy tail.

Sides, each a real run of the recipe (:func:`rlinf.runners.recipe.run_recipe` with the tool-agent
recipe, Ray, one process per worker: FSDP actor on slots 0-1, the HF agent rollout with its tool
pool and the reward on slot 2, as in ``examples/tool_agent/config/calc_tiny_disaggregated.yaml``):

* ``sync``: ``runner.rollout_mode: sync`` (k = 0): a step generates its batch, waits for its
  slowest episode, trains, sends the weights;
* ``async``: ``rollout_mode: async``, the lookahead queue: whole batches up to k steps ahead
  (``algorithm.max_head_offpolicyness = k``, decoupled PPO), each batch still waits for its
  slowest episode;
* ``fully_async``: ``calc_tiny_fully_async.yaml``: episodes stream, a step takes the first
  ``rollout_batch_size`` finished groups its staleness bound allows, weights reach episodes in
  flight.

Every side trains the same number of samples (``--steps`` x ``--batch`` prompts x ``--group``
episodes), with the same episodes in flight (``--batch`` x ``--group``: a sync / async batch;
fully_async's ``rollout.max_concurrent_rollouts``), the same staleness bound ``--k`` on both
asynchronous sides, ``agentloop.tool_concurrency`` = episodes in flight (no call queues behind
another in the tool pool), and the calculator waits before each call for a seeded lognormal time
(median 0.3 s, 95th percentile 3 s: ``tools.calculator.latency``, seed = the run's seed; the
pool's 10 s call limit of the config stays). Sides run interleaved (seed 0: sync, async,
fully_async; seed 1: the same ...), so drift of the shared machine's load hits them alike.

Measured per run (the training loop = ``fit`` from its start to the end of the last step's weight
sync; no validation inside it: ``runner.val_check_interval: -1`` validates only after the last step):

* **trained samples/s** = trained samples / the training loop's wall time (the last step's
  ``time/elapsed``: Ray start-up, model load and the final held-out validation are outside it);
* **trainer waiting** = share of that wall time the trainer waited for samples: per step
  ``time/step - time/update - time/sync - time/after_rollout`` (the step's wait for its batch's
  last sample; scoring and log-probs after that are work);
* **rollout not generating** = share of that wall time the rollout rank was not inside an engine
  ``generate`` call (its episodes all waited for tools, or it had none: waiting for the trainer,
  parked for weights, between requests); measured the same way on every side by a timer around the
  rank's ``engine.generate`` (this script's worker subclass, nothing else changed); fully_async
  also gives the rank's own split from ``timeline.json``: parked for weights (``paused``);
* **held-out success** after the last step: greedy, on ``--heldout`` prompts (the shipped 128 of
  ``mul_val.jsonl`` plus further distinct pairs from the generator that made the data,
  :func:`toolkits.tool_agent.make_tasks.draw_pairs`, none in the train or val file), with its
  95 % Wilson interval (greedy, 128 prompts per engine call: ``algorithm.val_rollout_batch_size_per_gpu``,
  validation only).

Goals (issue 45): fully_async / sync >= 2.0 in trained samples/s (medians over seeds), and
fully_async's held-out success not below sync's 95 % interval, per seed. ``--math`` adds the math
main job (``grpo_tiny_disaggregated`` / ``grpo_tiny_async`` / ``grpo_tiny_fully_async``, same
sizes per side, no tool): its ratio is reported, no goal (compute-bound on 2 cores). The timeline
PNG of the first fully_async tool run (trainer: wait / score / update / sync; rollout: generate /
idle / parked for weights) is written next to ``summary.json``.

    .venv/bin/python bench/bench_fully_async.py                    # 3 sides x 2 seeds + math (~45 min)
    .venv/bin/python bench/bench_fully_async.py --no-math --seeds 0
    .venv/bin/python bench/bench_fully_async.py --quick            # tiny sizes, a smoke run (~5 min)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

TOOL_CONFIG_DIR = os.path.join(ROOT, "examples", "tool_agent", "config")
MATH_CONFIG_DIR = os.path.join(ROOT, "examples", "math", "config")
SIDES = ("sync", "async", "fully_async")
TOOL_CONFIGS = {"sync": "calc_tiny_disaggregated", "async": "calc_tiny_disaggregated",
                "fully_async": "calc_tiny_fully_async"}
MATH_CONFIGS = {"sync": "grpo_tiny_disaggregated", "async": "grpo_tiny_async", "fully_async": "grpo_tiny_fully_async"}
GOAL_SPEEDUP = 2.0
LATENCY = "{distribution: lognormal, median_s: 0.3, p95_s: 3.0, seed: %d}"


# ---- held-out prompts --------------------------------------------------------------------------------
def heldout_file(path: str, n: int) -> str:
    """``n`` held-out multiplication prompts in ``path``: the shipped ``mul_val.jsonl`` first, then
    pairs drawn after the train split by the generator that made both files (seed 0), skipping
    any pair already in the train or val file."""
    from toolkits.tool_agent.make_tasks import N_TRAIN, N_VAL, SEED, draw_pairs, make_prompt, read_jsonl, write_jsonl

    data = os.path.join(ROOT, "examples", "tool_agent", "data")
    val = read_jsonl(os.path.join(data, "mul_val.jsonl"))
    used = {r["prompt"] for r in val} | {r["prompt"] for r in read_jsonl(os.path.join(data, "mul_train.jsonl"))}
    rows = list(val[:n])
    for a, b in draw_pairs(N_VAL + N_TRAIN + n, SEED)[N_VAL + N_TRAIN:]:
        if len(rows) < n and make_prompt(a, b) not in used:
            rows.append({"prompt": make_prompt(a, b), "answer": str(a * b)})
    if len(rows) < n:
        raise ValueError(f"only {len(rows)} held-out prompts outside the train and val files, asked for {n}")
    write_jsonl(rows, Path(path))
    return path


# ---- the rollout rank's engine time (a worker subclass) and its collection (a runner subclass) ----------
def timed_worker(base: type) -> type:
    """``base`` (a generation worker class) whose engine's ``generate`` calls are timed: wall-clock
    ``(start, end)`` of each, returned by ``bench_rounds()``. Everything else is ``base``'s."""

    class Timed(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._bench_rounds: list[tuple[float, float]] = []
            inner = self.engine.generate

            def generate(*a, **kw):
                t = time.time()
                try:
                    return inner(*a, **kw)
                finally:
                    self._bench_rounds.append((t, time.time()))

            self.engine.generate = generate  # the agent loop and the stream call it through the engine object

        def bench_rounds(self) -> list[tuple[float, float]]:
            return list(self._bench_rounds)

    Timed.__name__ = Timed.__qualname__ = f"Timed{base.__name__}"
    return Timed


def rounds_runner(base: type) -> type:
    """``base`` (a runner class) that writes ``<run>/bench_rounds.json`` after ``fit``: its start
    (wall clock) and every rollout rank's engine calls."""

    class Runner(base):
        def fit(self, print_fn=print):
            start = time.time()
            try:
                return super().fit(print_fn)
            finally:
                try:
                    ranks = self.groups.rollout.execute("bench_rounds").wait()
                except Exception as exc:  # noqa: BLE001 - the run's own error is what matters
                    print(f"[bench] engine rounds not collected: {exc}", file=sys.stderr)
                    ranks = []
                with open(os.path.join(self.run_dir, "bench_rounds.json"), "w") as f:
                    json.dump({"fit_start": start, "ranks": ranks}, f)

    Runner.__name__ = Runner.__qualname__ = f"Bench{base.__name__}"
    return Runner


def bench_recipe(kind: str):
    """The tool-agent (or math) recipe with the timed rollout worker and the collecting runner."""
    from rlinf.runners.math.recipe import MathRecipe
    from rlinf.runners.tool_agent.recipe import ToolAgentRecipe

    if kind == "tool":
        class Recipe(ToolAgentRecipe):
            def launch(self, start, cluster, plan, print_fn=print):
                from rlinf.runners.math.groups import launch_math_groups
                from rlinf.runners.math.loop import total_training_steps
                from rlinf.workers.rollout.agent_worker import AgentRolloutWorker

                cfg = start.cfg
                total = total_training_steps(cfg, start.train.batches_per_epoch)
                return launch_math_groups(cfg, cluster, plan, total, timed_worker(AgentRolloutWorker),
                                          (cfg.agentloop, dict(cfg.tools), cfg.response_budget))

            def runner_class(self):
                return rounds_runner(super().runner_class())
    else:
        class Recipe(MathRecipe):
            def launch(self, start, cluster, plan, print_fn=print):
                from rlinf.runners.math.groups import launch_math_groups
                from rlinf.runners.math.loop import total_training_steps
                from rlinf.workers.rollout.generation_worker import GenerationWorker

                total = total_training_steps(start.cfg, start.train.batches_per_epoch)
                return launch_math_groups(start.cfg, cluster, plan, total, timed_worker(GenerationWorker))

            def runner_class(self):
                return rounds_runner(super().runner_class())
    return Recipe()


# ---- one run ----------------------------------------------------------------------------------------------
def overrides(kind: str, side: str, seed: int, out: str, args) -> list[str]:
    """The Hydra overrides of one run (on top of the side's shipped config)."""
    b, g = (args.batch, args.group) if kind == "tool" else (args.math_batch, args.group)
    steps = args.steps if kind == "tool" else args.math_steps
    ov = [f"runner.output_dir={out}", "runner.experiment_name=run", f"runner.max_steps={steps}",
          "runner.val_check_interval=-1", "++runner.export_hf=false", "++runner.plot_curves=false",
          f"++runner.seed={seed}", f"data.seed={1234 + seed}", f"data.rollout_batch_size={b}",
          f"algorithm.group_size={g}", f"++runner.rollout_mode={side}",
          f"++algorithm.max_head_offpolicyness={0 if side == 'sync' else args.k}",
          "++algorithm.val_rollout_batch_size_per_gpu=128"]  # validation: 128 prompts per engine call, not 4
    if side != "sync":
        ov += ["algorithm.loss_type=decoupled_ppo", "++algorithm.behav_imp_weight_cap=5.0"]
    if side == "fully_async":
        ov += [f"++rollout.max_concurrent_rollouts={b * g}"]
    if kind == "tool":
        ov += [f"agentloop.tool_concurrency={b * g}", f"++tools.calculator.latency={LATENCY % seed}",
               f"data.val_data_paths=[{args.heldout_path}]", f"rollout.model.model_path={args.model}",
               f"actor.model.model_path={args.model}"]
    return ov + list(args.set)


def compose_run(kind: str, side: str, seed: int, out: str, args):
    """The composed Hydra config of one run."""
    from hydra import compose, initialize_config_dir

    from rlinf.config.resolvers import register_resolvers

    register_resolvers()
    config_dir, configs = (TOOL_CONFIG_DIR, TOOL_CONFIGS) if kind == "tool" else (MATH_CONFIG_DIR, MATH_CONFIGS)
    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        return compose(config_name=configs[side], overrides=overrides(kind, side, seed, out, args))


def run_one(kind: str, side: str, seed: int, args) -> dict:
    """One run; returns its figures (see the module docstring)."""
    from rlinf.runners.recipe import run_recipe

    name = f"{kind}-{side}-seed{seed}"
    out = os.path.abspath(os.path.join(args.out, name))
    shutil.rmtree(out, ignore_errors=True)
    cfg = compose_run(kind, side, seed, out, args)
    load_before = os.getloadavg()
    started = time.monotonic()
    run_recipe(bench_recipe(kind), cfg, print_fn=lambda line: print(f"[{name}] {line}", file=sys.stderr, flush=True))
    run = {"kind": kind, "side": side, "seed": seed, "run_dir": os.path.join(out, "run"),
           "whole_run_s": time.monotonic() - started, "load_before": load_before, "load_after": os.getloadavg()}
    return measure(run)


def measure(run: dict) -> dict:
    """``run`` (kind, side, seed, run_dir, ...) with the figures read from its run folder."""
    from rlinf.utils.metric_logger import read_metrics

    run_dir = run["run_dir"]
    rows = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    steps = [r for r in rows if "time/step" in r]
    wall = steps[-1]["time/elapsed"]
    trained = sum(r["update/samples"] for r in steps)
    wait = sum(max(0.0, r["time/step"] - r.get("time/update", 0.0) - r.get("time/sync", 0.0)
                   - r.get("time/after_rollout", 0.0)) for r in steps)
    sync = sum(r.get("time/sync", 0.0) for r in steps)
    with open(os.path.join(run_dir, "bench_rounds.json")) as f:
        rounds = json.load(f)
    fit_start = rounds["fit_start"]
    generating = [_clipped(rank, fit_start, fit_start + wall) for rank in rounds["ranks"]]
    with open(os.path.join(run_dir, "timeline.json")) as f:
        timeline = json.load(f)
    fit0 = fit_start - timeline["t0"]
    paused = [(e["start"] + timeline["t0"], e["end"] + timeline["t0"]) for e in timeline["events"]
              if e["who"].startswith("rollout") and e["what"] == "paused"]
    val = [r for r in rows if "val/accuracy" in r][-1]
    n_val = int(val.get("val/count", 0))
    ranks = max(len(generating), 1)
    return {**run, "steps": len(steps), "trained": trained, "wall_s": wall, "samples_per_s": trained / wall,
            "trainer_wait_samples": wait / wall, "trainer_sync": sync / wall, "trainer_wait": (wait + sync) / wall,
            "rollout_not_generating": 1 - (sum(generating) / ranks / wall if generating else 0.0),
            "rollout_paused": (_clipped(paused, fit_start, fit_start + wall) / ranks / wall
                               if run["side"] == "fully_async" else None),
            "staleness": statistics.mean(r.get("rollout/staleness", 0.0) for r in steps),
            "staleness_max": max(r.get("rollout/staleness_max", 0.0) for r in steps),
            "interrupted": sum(r.get("rollout/interrupted_sequences", 0.0) for r in steps),
            "tool_call_rate_last": steps[-1].get("agent/tool_call_rate"), "fit_offset_s": fit0,
            "heldout": val["val/accuracy"], "heldout_n": n_val, "heldout_correct": round(val["val/accuracy"] * n_val)}


def _clipped(intervals, lo: float, hi: float) -> float:
    """Total length of ``(start, end)`` intervals inside ``[lo, hi]``."""
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in intervals)


# ---- the timeline picture ----------------------------------------------------------------------------------
def plot_timeline(run_dir: str, path: str, title: str) -> str:
    """PNG of who did what when in one run: the trainer's wait / score / update / sync per step and
    each rollout rank's generate rounds, idle waits (for tools or admission) and pauses for weights
    (``timeline.json``;
    a step's ``wait+score`` is split at its ``time/rollout``, the wait for finished groups)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from rlinf.utils.metric_logger import read_metrics

    with open(os.path.join(run_dir, "timeline.json")) as f:
        tl = json.load(f)
    with open(os.path.join(run_dir, "bench_rounds.json")) as f:
        fit0 = json.load(f)["fit_start"] - tl["t0"]
    steps = [r for r in read_metrics(os.path.join(run_dir, "metrics.jsonl")) if "time/step" in r]
    end = steps[-1]["time/elapsed"]
    colors = {"wait": "#d62728", "score": "#ff7f0e", "update": "#1f77b4", "sync": "#9467bd",
              "generate": "#2ca02c", "idle": "#bbbbbb", "paused": "#8c564b"}
    labels = {"wait": "trainer: waiting for samples", "score": "trainer: reward + log-probs",
              "update": "trainer: update", "sync": "trainer: weight sync", "generate": "rollout: generating",
              "idle": "rollout: idle (every episode waits for a tool, or none admitted)",
              "paused": "rollout: parked for weights"}
    rows: dict[str, list[tuple[str, float, float]]] = {}
    waits = iter(r.get("time/rollout", 0.0) for r in steps)
    for e in tl["events"]:
        s, t = e["start"] - fit0, e["end"] - fit0
        if t < 0 or s > end:
            continue
        who = e["who"]
        if who == "trainer" and e["what"] in ("wait+score", "rollout+score"):
            w = next(waits, 0.0)
            rows.setdefault(who, []).append(("wait", s, s + w))
            rows[who].append(("score", s + w, t))
        elif e["what"] in colors:
            rows.setdefault(who, []).append((e["what"], s, t))
    names = sorted(rows, key=lambda w: (w != "trainer", w))
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.6 * len(names)), dpi=80)
    for y, who in enumerate(reversed(names)):
        for what in colors:
            spans = [(s, t - s) for w, s, t in rows[who] if w == what and t > s]
            if spans:
                ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colors[what], linewidth=0)
    ax.set_yticks(range(len(names)), list(reversed(names)))
    ax.set_xlim(0, end)
    ax.set_xlabel("seconds since the training loop started (white on a rollout row: the loop's own work between "
                  "rounds)")
    ax.set_title(title, fontsize=10)
    used = {w for who in rows for w, _, _ in rows[who]}
    fig.legend(handles=[Patch(color=colors[w], label=labels[w]) for w in colors if w in used], fontsize=7,
               ncol=3, loc="lower center", frameon=False)
    fig.tight_layout(rect=(0, 0.22 if len(names) < 3 else 0.15, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


# ---- tables --------------------------------------------------------------------------------------------------
def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def runs_table(results: list[dict]) -> str:
    from rlinf.utils.confidence import wilson_interval

    lines = ["| job | side | seed | steps | trained samples | training loop (s) | samples/s "
             "| trainer waiting: for samples + in weight sync | rollout not generating (parked for weights) "
             "| staleness mean / max | interrupted sequences "
             "| held-out success [95% CI] | load 1-min before / after |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---|---|"]
    for r in results:
        lo, hi = wilson_interval(r["heldout_correct"], r["heldout_n"])
        parked = f" ({_pct(r['rollout_paused'])})" if r["rollout_paused"] is not None else ""
        lines.append(f"| {r['kind']} | {r['side']} | {r['seed']} | {r['steps']} | {r['trained']:.0f} "
                     f"| {r['wall_s']:.1f} | {r['samples_per_s']:.1f} | {_pct(r['trainer_wait_samples'])} + "
                     f"{_pct(r['trainer_sync'])} = {_pct(r['trainer_wait'])} "
                     f"| {_pct(r['rollout_not_generating'])}"
                     f"{parked} | {r['staleness']:.2f} / {r['staleness_max']:.0f} | {r['interrupted']:.0f} "
                     f"| {100 * r['heldout']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] of {r['heldout_n']} "
                     f"| {r['load_before'][0]:.1f} / {r['load_after'][0]:.1f} |")
    return "\n".join(lines)


def summary_table(results: list[dict]) -> str:
    from rlinf.utils.confidence import wilson_interval

    lines = ["| job | side | samples/s (median of seeds) | x sync | trainer waiting (samples + weight sync) "
             "| rollout not generating "
             "| held-out success per seed | goal |", "|---|---|---:|---:|---:|---:|---|---|"]
    for kind in ("tool", "math"):
        mine = [r for r in results if r["kind"] == kind]
        if not mine:
            continue
        med = {side: statistics.median(r["samples_per_s"] for r in mine if r["side"] == side)
               for side in SIDES if any(r["side"] == side for r in mine)}
        for side in med:
            runs = [r for r in mine if r["side"] == side]
            ratio = med[side] / med["sync"] if "sync" in med else None
            goal = ""
            if kind == "tool" and side == "fully_async" and ratio is not None:
                speed = "PASS" if ratio >= GOAL_SPEEDUP else "MISS"
                held = []
                for r in runs:
                    base = [s for s in mine if s["side"] == "sync" and s["seed"] == r["seed"]]
                    if base:
                        lo, _ = wilson_interval(base[0]["heldout_correct"], base[0]["heldout_n"])
                        held.append(("PASS" if r["heldout"] >= lo else "MISS") + f" (seed {r['seed']}: "
                                    f"{100 * r['heldout']:.1f}% vs sync's low {100 * lo:.1f}%)")
                goal = f"x{GOAL_SPEEDUP:g}: {speed}; held-out not below sync's interval: " + ", ".join(held)
            elif kind == "math" and side == "fully_async":
                goal = "reported, no goal (compute-bound)"
            success = ", ".join(f"{100 * r['heldout']:.1f}%" for r in sorted(runs, key=lambda r: r["seed"]))
            lines.append(f"| {kind} | {side} | {med[side]:.2f} | {'-' if ratio is None else f'{ratio:.2f}'} "
                         f"| {_pct(statistics.median(r['trainer_wait'] for r in runs))} "
                         f"| {_pct(statistics.median(r['rollout_not_generating'] for r in runs))} "
                         f"| {success} | {goal} |")
    return "\n".join(lines)


def run_all(args) -> list[dict]:
    """Every run of the invocation, interleaved (per seed: the sides in order; then the math job)."""
    args.heldout_path = heldout_file(os.path.abspath(os.path.join(args.out, "heldout.jsonl")), args.heldout)
    seeds = [int(s) for s in args.seeds.split(",")]
    sides = args.sides.split(",")
    jobs = [("tool", side, seed) for seed in seeds for side in sides]
    if args.math:
        jobs += [("math", side, seed) for seed in seeds for side in sides]
    for kind, side, seed in jobs:  # every config composes before the first run starts
        compose_run(kind, side, seed, os.path.abspath(os.path.join(args.out, "check")), args)
    results = []
    for kind, side, seed in jobs:
        results.append(run_one(kind, side, seed, args))
        print(runs_table(results[-1:]).splitlines()[-1], flush=True)
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps per tool-agent run")
    parser.add_argument("--batch", type=int, default=16, help="prompts (groups) per step: data.rollout_batch_size")
    parser.add_argument("--group", type=int, default=8, help="episodes per prompt: algorithm.group_size")
    parser.add_argument("--k", type=int, default=2, help="staleness bound of async and fully_async")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--heldout", type=int, default=512, help="held-out prompts (>= 512 for the goal)")
    parser.add_argument("--no-math", dest="math", action="store_false", help="skip the math main job")
    parser.add_argument("--math-steps", type=int, default=10)
    parser.add_argument("--math-batch", type=int, default=32)
    parser.add_argument("--model", default="results/tiny_tool/warm")
    parser.add_argument("--out", default="results/bench_fully_async")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a Hydra override for every tool-agent and math run")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, numbers mean nothing")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: re-measure the runs of <out>/summary.json and print the tables again")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.batch, args.group, args.heldout, args.seeds = 3, 8, 8, 32, "0"
        args.math_steps, args.math_batch = 3, 8
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        from toolkits.tool_agent.prepare import prepare

        prepare(os.path.dirname(os.path.abspath(args.model)))
    if args.report:
        with open(os.path.join(args.out, "summary.json")) as f:
            saved = json.load(f)
        for key in ("steps", "batch", "group", "k"):
            setattr(args, key, saved["args"][key])
        results = [measure({k: r[k] for k in ("kind", "side", "seed", "run_dir", "whole_run_s", "load_before",
                                              "load_after")}) for r in saved["runs"]]
    else:
        results = run_all(args)
    png = None
    first = next((r for r in results if r["kind"] == "tool" and r["side"] == "fully_async"), None)
    if first is not None:
        png = plot_timeline(first["run_dir"], os.path.join(args.out, "timeline_fully_async.png"),
                            f"tool agent, fully_async, seed {first['seed']}: {first['steps']} steps of "
                            f"{args.batch}x{args.group} samples, k={args.k}")
    loads = [r["load_before"][0] for r in results] + [r["load_after"][0] for r in results]
    print(f"\n# bench_fully_async: {os.cpu_count()} CPUs; Ray, actor (2 ranks) and rollout apart; "
          f"{args.steps} steps x {args.batch} prompts x {args.group} episodes per tool run, k={args.k}, "
          f"calculator latency lognormal median 0.3 s / p95 3 s; 1-min load average {min(loads):.1f}-{max(loads):.1f}")
    print(runs_table(results))
    print()
    print(summary_table(results))
    if png:
        print(f"\ntimeline of one fully_async run: {png}")
    if not args.report:
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump({"args": vars(args), "runs": results}, f, indent=1)


if __name__ == "__main__":
    main()
