"""The tool agent's learning demo (issue 26): does held-out success rise by >= 30 points within
10 minutes of RL on 2 cores, does the tool-call rate rise, and do the controls stay flat?

Arms of ``examples/tool_agent/config/calc_tiny_cpu.yaml`` (GRPO; 3-digit x 2-3-digit
multiplication; the tiny model of ``python -m toolkits.tool_agent.prepare``, which calls the
calculator in some episodes and guesses in the others), run one after the other through the real
entry (:func:`rlinf.runners.tool_agent.recipe.run_tool_agent`: Ray, FSDP actor, HF rollout with
the agent loop and its tool pool, math-verify reward):

* ``tool``: the run as configured, once per ``--seeds`` seed (``runner.seed`` and ``data.seed``);
* ``shuffled``: rewards permuted across the batch before the advantages (the same reward
  distribution, the credit destroyed); held-out success is judged honestly;
* ``notool``: ``agentloop.max_turns=1``: an episode that calls the calculator ends there without
  an answer, so only direct answers can score (the no-tool baseline; RL can only learn to guess).

Each arm validates greedily on the 128 held-out prompts before the first step and every
``--val-interval`` steps, and stops after ``--minutes`` of wall time (``runner.max_minutes``; the
validation after the last step is included). The table gives held-out success and the held-out
tool-call rate at the start and at the end, the time of the last validation, and the goal.

    .venv/bin/python bench/bench_tool_agent.py                        # tool x2 seeds, shuffled, notool (~40 min)
    .venv/bin/python bench/bench_tool_agent.py --arms tool --seeds 0  # one arm
    .venv/bin/python bench/bench_tool_agent.py --quick                # 2 steps per arm (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

CONFIG_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "examples", "tool_agent", "config"))
GOAL_POINTS = 30.0


def shuffle_rewards(seed: int):
    """Patch the runner so that every step's rewards are permuted across the batch before the
    advantages (the control arm); returns the undo."""
    import torch

    from rlinf.runners.tool_agent.loop import ToolAgentRunner

    original = ToolAgentRunner._rollout_batch
    gen = torch.Generator().manual_seed(seed)

    def rollout_batch(self):
        batch, metrics = original(self)
        batch.rewards = batch.rewards[torch.randperm(batch.batch_size, generator=gen)]
        return batch, metrics

    ToolAgentRunner._rollout_batch = rollout_batch
    return lambda: setattr(ToolAgentRunner, "_rollout_batch", original)


def run_arm(arm: str, seed: int, args) -> dict:
    from hydra import compose, initialize_config_dir

    from rlinf.config.resolvers import register_resolvers
    from rlinf.runners.tool_agent.recipe import run_tool_agent
    from rlinf.utils.metric_logger import read_metrics

    register_resolvers()
    name = f"{arm}-seed{seed}"
    out = os.path.abspath(os.path.join(args.out, name))
    shutil.rmtree(out, ignore_errors=True)
    overrides = [f"runner.output_dir={out}", "runner.experiment_name=run", f"++runner.max_minutes={args.minutes}",
                 f"runner.max_steps={args.steps}", f"runner.val_check_interval={args.val_interval}",
                 f"++runner.seed={seed}", f"data.seed={1234 + seed}", f"rollout.model.model_path={args.model}",
                 f"actor.model.model_path={args.model}", *args.set]
    if arm == "notool":
        overrides.append("agentloop.max_turns=1")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name=args.config, overrides=overrides)
    undo = shuffle_rewards(seed) if arm == "shuffled" else (lambda: None)
    load = os.getloadavg()[0]
    started = time.monotonic()
    try:
        run_tool_agent(cfg, print_fn=lambda line: print(f"[{name}] {line}", file=sys.stderr, flush=True))
    finally:
        undo()
    minutes = (time.monotonic() - started) / 60
    rows = read_metrics(os.path.join(out, "run", "metrics.jsonl"))
    vals = [{"step": int(r["step"]), "minutes": r.get("time/elapsed", 0.0) / 60, "success": r["val/accuracy"],
             "tool_call_rate": r.get("val_agent/tool_call_rate")} for r in rows if "val/accuracy" in r]
    train = [r for r in rows if "agent/tool_call_rate" in r]
    return {"arm": arm, "seed": seed, "minutes": minutes, "steps": len(train), "vals": vals, "load_before": load,
            "train_tool_call_rate": [r["agent/tool_call_rate"] for r in train],
            "train_success": [r["agent/success"] for r in train]}


def table(results: list[dict]) -> str:
    lines = ["| arm | seed | steps | last validation at (min) | held-out success: start -> end | points "
             "| held-out tool-call rate: start -> end | goal |", "|---|---:|---:|---:|---|---:|---|---|"]
    for r in results:
        v = r["vals"]
        if not v:
            lines.append(f"| {r['arm']} | {r['seed']} | {r['steps']} | - | no validation | | | |")
            continue
        first, last = v[0], v[-1]
        points = 100 * (last["success"] - first["success"])
        rate = (f"{100 * first['tool_call_rate']:.0f}% -> {100 * last['tool_call_rate']:.0f}%"
                if first["tool_call_rate"] is not None else "-")
        if r["arm"] == "tool":
            goal = "PASS" if points >= GOAL_POINTS and last["minutes"] <= 10.0 else "MISS"
        else:
            goal = "flat (control)" if abs(points) < GOAL_POINTS / 3 else "moved"
        success = f"{100 * first['success']:.1f}% -> {100 * last['success']:.1f}%"
        lines.append(f"| {r['arm']} | {r['seed']} | {r['steps']} | {last['minutes']:.1f} | {success} | {points:+.1f} "
                     f"| {rate} | {goal} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=9.0, help="wall-time cap of each arm (runner.max_minutes)")
    parser.add_argument("--steps", type=int, default=400, help="step cap of each arm")
    parser.add_argument("--val-interval", type=int, default=5)
    parser.add_argument("--seeds", default="0,1", help="seeds of the tool arm (the controls use the first)")
    parser.add_argument("--arms", default="tool,shuffled,notool")
    parser.add_argument("--config", default="calc_tiny_cpu")
    parser.add_argument("--model", default="results/tiny_tool/warm")
    parser.add_argument("--out", default="results/bench_tool_agent")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a Hydra override")
    parser.add_argument("--quick", action="store_true", help="two steps per arm (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.val_interval = 2, 2
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        from toolkits.tool_agent.prepare import prepare

        prepare(os.path.dirname(os.path.abspath(args.model)))
    seeds = [int(s) for s in args.seeds.split(",")]
    results = []
    for arm in args.arms.split(","):
        for seed in (seeds if arm == "tool" else seeds[:1]):
            results.append(run_arm(arm, seed, args))
            print(table(results[-1:]).splitlines()[-1], flush=True)
    print(f"\n# bench_tool_agent: {os.cpu_count()} CPUs; wall-time cap {args.minutes:g} min per arm; "
          f"goal: held-out success +{GOAL_POINTS:g} points within 10 min (tool arms)")
    print(table(results))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
