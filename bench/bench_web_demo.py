"""The web-agent learning demo (issue 14): does held-out success rise within N minutes of RL on
2 cores, and does the same run with shuffled rewards not?

Two arms of ``examples/web_agent/config/web_agent_tiny_cpu.yaml`` (the tiny policy of
``python -m toolkits.web_tasks.prepare --out results/tiny_web``), run one after the other in
this process through the real entry (:func:`rlinf.runners.web_agent.recipe.run_web`: Ray, env
ranks with Chromium, HF rollout, FSDP actor):

* ``real``: the run as configured.
* ``shuffled``: before every update the rewards (and verdicts) of the iteration's train
  trajectories are permuted among them, so the update sees the same reward distribution with
  the credit destroyed; evaluation rollouts are judged honestly.

Each arm evaluates on the held-out test tasks before the first iteration and every
``--test-interval`` iterations, and stops after ``--minutes`` of wall time (the runner's
``max_minutes``; the evaluation of that last iteration is included). The table gives held-out
success (sampled at ``policy_config.test_temperature``; successes over all episodes, crashed ones
counted as failures) at the start and at the end of each arm, and at every evaluation.

    .venv/bin/python bench/bench_web_demo.py --minutes 10            # both arms, ~25 min
    .venv/bin/python bench/bench_web_demo.py --quick                  # 1 iteration each (smoke)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

CONFIG_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "examples", "web_agent", "config"))


def shuffle_rewards(rng: random.Random):
    """Patch the runner's update so that it trains on permuted rewards (the control arm)."""
    from rlinf.runners.web_agent.loop import WebAgentRunner

    original = WebAgentRunner.update

    def update(self, trajectories, iteration):
        verdicts = [(t.get("reward"), t.get("judge")) for t in trajectories]
        rng.shuffle(verdicts)
        for traj, (reward, judge) in zip(trajectories, verdicts):
            traj["reward"], traj["judge"] = reward, judge
        return original(self, trajectories, iteration)

    WebAgentRunner.update = update
    return lambda: setattr(WebAgentRunner, "update", original)


def run_arm(arm: str, args) -> dict:
    from hydra import compose, initialize_config_dir

    from rlinf.runners.web_agent.recipe import run_web
    from rlinf.utils.metric_logger import read_metrics

    save = os.path.join(args.out, arm)
    overrides = [f"save_path={save}", f"runner.iterations={args.iterations}", f"runner.seed={args.seed}",
                 f"runner.test_interval={args.test_interval}", f"runner.max_minutes={args.minutes}",
                 *args.set]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name=args.config, overrides=overrides)
    undo = shuffle_rewards(random.Random(args.seed)) if arm == "shuffled" else (lambda: None)
    started = time.monotonic()
    try:
        run_web(cfg, print_fn=lambda line: print(f"[{arm}] {line}", file=sys.stderr, flush=True))
    finally:
        undo()
    minutes = (time.monotonic() - started) / 60
    rows = read_metrics(os.path.join(save, "metrics.jsonl"))
    # held-out success over every episode (seed 004's success_rate leaves crashed ones out)
    tests = [(r["step"], r["test/success_rate_all"]) for r in rows if "test/success_rate_all" in r]
    train = [r["train/success_rate"] for r in rows if "train/success_rate" in r]
    return {"arm": arm, "minutes": minutes, "iterations": len(train), "tests": tests,
            "train_first": train[0] if train else None, "train_last": train[-1] if train else None}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="wall-time cap of each arm (runner.max_minutes)")
    parser.add_argument("--iterations", type=int, default=200, help="iteration cap of each arm")
    parser.add_argument("--test-interval", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="real,shuffled")
    parser.add_argument("--config", default="web_agent_tiny_cpu")
    parser.add_argument("--out", default="results/bench_web_demo")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a Hydra override")
    parser.add_argument("--quick", action="store_true", help="one iteration per arm (a smoke test)")
    args = parser.parse_args(argv)
    from rlinf.utils.extras import exit_if_missing

    exit_if_missing(["math", "web"])
    if args.quick:
        args.iterations, args.test_interval = 1, 1
    import shutil

    results = []
    for arm in args.arms.split(","):
        shutil.rmtree(os.path.join(args.out, arm), ignore_errors=True)
        load = os.getloadavg()[0]
        result = run_arm(arm, args)
        result["load_before"] = load
        results.append(result)
    print("| arm | iterations | minutes | held-out success: start -> end (evaluations) "
          "| train success first -> last | load before |")
    print("|---|---:|---:|---|---|---:|")
    for r in results:
        tests = r["tests"]
        start, end = (tests[0][1], tests[-1][1]) if tests else (float("nan"), float("nan"))
        path = ", ".join(f"{s}:{100 * v:.0f}%" for s, v in tests)
        print(f"| {r['arm']} | {r['iterations']} | {r['minutes']:.1f} | {100 * start:.1f}% -> {100 * end:.1f}% "
              f"({end - start:+.3f}; {path}) | {100 * (r['train_first'] or 0):.0f}% "
              f"-> {100 * (r['train_last'] or 0):.0f}% "
              f"| {r['load_before']:.1f} |")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
