"""The placement planner against measured step times (issue 46): profile once, plan, run the
candidates the planner lists, and compare its ranking and its times with what the runs measure.

Workloads (each a real Ray run of its recipe, one process per worker, on this machine's cores):

* ``math``: the tiny GRPO main job (``examples/math/config/grpo_tiny_disaggregated.yaml``);
* ``pushcube``: ManiSkill PushCube PPO with the state MLP (``maniskill_ppo_mlp_cpu.yaml``: env,
  rollout, actor);
* ``tool``: the calculator tool agent with a slow tool (``calc_tiny_disaggregated.yaml`` with
  ``tools.calculator.latency``: lognormal, median 0.3 s, p95 3 s).

Per workload:

1. **profile**: ``--profile-steps`` steps of the config as placed and as many of a placement that
   gives the roles other unit counts, joined into one profile (:mod:`toolkits.autoplace.sizes`,
   what ``python -m toolkits.autoplace CONFIG --measure-steps K`` does);
2. **plan**: :func:`rlinf.scheduler.autoplace.plan_search` on ``--slots`` logical accelerators;
   the candidates run are the planner's best and ``--candidates - 1`` more spread evenly over the
   ranked list among those predicted within 3x of the best (no absurd ones to flatter the ranking),
   the config's own placement among them;
3. **measure**: every candidate runs ``--steps`` steps, in ``--rounds`` interleaved rounds (round 1:
   every candidate once, round 2: again, ...), so drift of the shared machine's load hits them
   alike; a run's step time is the median ``time/step`` of its steps after the first two (warm-up:
   on this machine the second step still ran 10-40 % slow in the 4-step runs of 2026-12-08); a
   candidate's is the median over rounds.

Goals per workload (issue 46): Spearman rank correlation of predicted vs measured step time >= 0.8;
the planner's chosen placement within 10 % of the measured best; median absolute prediction error
<= 25 %.

    .venv/bin/python bench/bench_autoplace.py                       # 3 workloads (about an hour)
    .venv/bin/python bench/bench_autoplace.py --only math --rounds 1 --candidates 4   # a look
    .venv/bin/python bench/bench_autoplace.py --quick               # smoke: tiny sizes, numbers mean nothing
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

GOAL_SPEARMAN = 0.8
GOAL_CHOSEN = 0.10
GOAL_ERROR = 0.25
WITHIN = 3.0  # candidates run: predicted within this factor of the best
LATENCY = "{distribution: lognormal, median_s: 0.3, p95_s: 3.0, seed: 0}"

#: name -> (config folder, config name, overrides for every run of it)
WORKLOADS = {
    "math": ("examples/math/config", "grpo_tiny_disaggregated", ["data.rollout_batch_size=16"]),
    "pushcube": ("examples/embodiment/config", "maniskill_ppo_mlp_cpu", []),
    "tool": ("examples/tool_agent/config", "calc_tiny_disaggregated",
             ["data.rollout_batch_size=8", "algorithm.group_size=4", "algorithm.training_batch_size_per_gpu=16",
              "agentloop.tool_concurrency=32",
              f"++tools.calculator.latency={LATENCY}"]),
}


# ---- statistics ------------------------------------------------------------------------------------
def ranks(values: list[float]) -> list[float]:
    """Ranks 1..n of ``values`` (ties: their mean rank).

    >>> ranks([3.0, 1.0, 2.0, 2.0])
    [4.0, 1.0, 2.5, 2.5]
    """
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation: Pearson's correlation of the ranks.

    >>> spearman([1, 2, 3, 4], [10, 20, 30, 40]), spearman([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
    """
    ra, rb = ranks(list(a)), ranks(list(b))
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else 0.0


def pick(ranked: list, n: int, current_label: str | None) -> list:
    """The best and ``n - 1`` more spread evenly over the ranked entries predicted within
    :data:`WITHIN` x the best (the config's own among them when it is within).

    >>> class R:
    ...     def __init__(self, s): self.step, self.label = s, f"c{s}"
    >>> [r.step for r in pick([R(s) for s in (1, 1.5, 2, 2.5, 3, 3.5, 9)], 3, None)]
    [1, 2, 3]
    """
    best = ranked[0].step
    pool = [r for r in ranked if r.step <= WITHIN * best]
    if len(pool) <= n:
        return pool
    idx = sorted({round(i * (len(pool) - 1) / (n - 1)) for i in range(n)})
    chosen = [pool[i] for i in idx]
    own = next((r for r in pool if r.label == current_label), None)
    if own is not None and own not in chosen:
        chosen[-2 if len(chosen) > 2 else -1] = own
        chosen.sort(key=lambda r: r.step)
    return chosen


def verdicts(rows: list[dict]) -> dict:
    """The goals of one workload from its rows (``predicted_s``, ``measured_s``, ``chosen``)."""
    pred = [r["predicted_s"] for r in rows]
    meas = [r["measured_s"] for r in rows]
    rho = spearman(pred, meas)
    best = min(meas)
    chosen = next(r for r in rows if r["chosen"])
    gap = chosen["measured_s"] / best - 1
    errors = [abs(p - m) / m for p, m in zip(pred, meas)]
    err = statistics.median(errors)
    return {"spearman": rho, "chosen_gap": gap, "median_error": err,
            "pass_spearman": rho >= GOAL_SPEARMAN, "pass_chosen": gap <= GOAL_CHOSEN, "pass_error": err <= GOAL_ERROR}


# ---- configs, profiles, plans, runs ------------------------------------------------------------------
def _set(tree: dict, key: str, value: object) -> None:
    from toolkits.autoplace.ranking import set_dotted

    set_dotted(tree, key, value)


def write_workload_config(name: str, work: str, extra: list[str]) -> str:
    """The workload's shipped config with its overrides and ``extra`` (``key=value``, YAML values),
    written self-contained to ``<work>/<name>/config.yaml`` (read back the way the CLI reads a config)."""
    import yaml

    from toolkits.autoplace.inputs import load_run

    folder, config, overrides = WORKLOADS[name]
    run = load_run(os.path.join(ROOT, folder, config + ".yaml"))
    tree = json.loads(json.dumps(run.written))
    for item in overrides + extra:
        key, _, value = item.partition("=")
        _set(tree, key.lstrip("+"), yaml.safe_load(value))
    out_dir = os.path.join(work, name)
    os.makedirs(out_dir, exist_ok=True)
    _set(tree, "runner.output_dir", os.path.join(out_dir, "runs"))
    path = os.path.join(out_dir, "config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump({**run.hydra, **tree}, f, sort_keys=False, width=120)
    return path


def measure(config: str, out: str, steps: int) -> str:
    """The profile of ``config`` (``steps`` steps as placed, and as many at a second size:
    :func:`toolkits.autoplace.sizes.measure_two_sizes`, what ``--measure-steps`` does)."""
    from toolkits.autoplace.inputs import load_run
    from toolkits.autoplace.sizes import measure_two_sizes

    run = load_run(config)
    raw = json.loads(json.dumps(run.raw))
    _set(raw, "runner.experiment_name", "profile")
    _set(raw, "runner.logger.log_path", os.path.join(raw["runner"]["output_dir"], "profile"))
    measure_two_sizes(run, raw, steps, out, print_fn=_log)
    return out


def plan(config: str, profile: str) -> dict:
    """The planner's JSON for ``config`` with ``profile`` (``python -m toolkits.autoplace --json``)."""
    from toolkits.autoplace.__main__ import run as cli

    return json.loads(cli([config, "--profile", profile, "--json"]))


def run_candidate(config: str, entry: dict, steps: int, tag: str) -> dict:
    """One run of ``config`` with the candidate's settings; its step times from ``metrics.jsonl``."""
    from rlinf.runners.autoplace_measure import measure_overrides
    from rlinf.runners.recipe import run_recipe
    from rlinf.utils.metric_logger import read_metrics
    from toolkits.autoplace.inputs import load_run

    run = load_run(config)
    raw = json.loads(json.dumps(run.raw))
    for key, value in {**entry["settings"], **measure_overrides(steps)}.items():
        _set(raw, key, value)
    log = os.path.join(raw["runner"]["output_dir"], tag)
    _set(raw, "runner.experiment_name", tag)
    _set(raw, "runner.logger.log_path", log)  # the config's interpolation is resolved already
    shutil.rmtree(log, ignore_errors=True)
    load = os.getloadavg()[0]
    started = time.monotonic()
    run_recipe(run.recipe, raw, print_fn=_log)
    rows = [r for r in read_metrics(os.path.join(log, "metrics.jsonl")) if "time/step" in r]
    times = [r["time/step"] for r in rows]
    return {"tag": tag, "label": entry["label"], "steps": times, "step_s": statistics.median(steady(times)),
            "whole_s": time.monotonic() - started, "load": load}


def steady(times: list[float]) -> list[float]:
    """The steps a run's step time is taken from: after the first two (warm-up), or after the
    first when a run has fewer than four, or all of a one-step run.

    >>> steady([2.0, 1.5, 1.0, 1.1]), steady([2.0, 1.0, 1.1]), steady([2.0])
    ([1.0, 1.1], [1.0, 1.1], [2.0])
    """
    return times[2:] if len(times) >= 4 else (times[1:] or times)


def _log(*parts) -> None:
    print(" ".join(str(p) for p in parts), file=sys.stderr, flush=True)


class _Entry:
    def __init__(self, data: dict):
        self.data, self.step, self.label = data, data["step_s"], data["label"]


def bench_workload(name: str, args) -> dict:
    """Profile, plan, run the picked candidates in interleaved rounds; the rows and the verdicts."""
    config = write_workload_config(name, args.work, args.set)
    profile = os.path.join(args.work, name, "profile.yaml")
    measure(config, profile, args.profile_steps)
    result = plan(config, profile)
    ranked = [_Entry(c) for c in result["candidates"]]
    current = next((c["label"] for c in result["candidates"] if c["is_current"]), None)
    chosen = pick(ranked, args.candidates, current)
    runs: dict[str, list[dict]] = {e.label: [] for e in chosen}
    for rnd in range(args.rounds):
        order = chosen if rnd % 2 == 0 else list(reversed(chosen))
        for i, e in enumerate(order):
            tag = f"r{rnd}-c{chosen.index(e)}"
            _log(f"[bench_autoplace] {name} round {rnd + 1}/{args.rounds}, {i + 1}/{len(order)}: {e.label}")
            runs[e.label].append(run_candidate(config, e.data, args.steps, tag))
    rows = []
    for e in chosen:
        measured = statistics.median(r["step_s"] for r in runs[e.label])
        rows.append({"label": e.label, "mode": e.data["mode"], "predicted_s": e.step, "measured_s": measured,
                     "rounds": [round(r["step_s"], 3) for r in runs[e.label]], "chosen": e is ranked[0],
                     "current": e.label == current, "bottleneck": e.data.get("bottleneck")})
    return {"workload": name, "config": config, "profile": profile, "candidates_listed": len(ranked),
            "rows": rows, "verdicts": verdicts(rows), "runs": runs}


def table(results: list[dict], args) -> str:
    """The markdown tables: per candidate, then the goals per workload."""
    lines = [f"# bench_autoplace: {os.cpu_count()} CPUs; {args.rounds} interleaved rounds x {args.steps} steps "
             f"per candidate (step time: median after the first two steps, then median over rounds)", "",
             "| workload | placement | mode | predicted s/step | measured s/step (rounds) | error | |",
             "|---|---|---|---:|---|---:|---|"]
    for res in results:
        for r in sorted(res["rows"], key=lambda r: r["measured_s"]):
            marks = ", ".join(m for m, on in (("planner's choice", r["chosen"]), ("config's own", r["current"])) if on)
            err = (r["predicted_s"] - r["measured_s"]) / r["measured_s"]
            lines.append(f"| {res['workload']} | {r['label']} | {r['mode']} | {r['predicted_s']:.2f} | "
                         f"{r['measured_s']:.2f} ({', '.join(f'{x:.2f}' for x in r['rounds'])}) | "
                         f"{err:+.0%} | {marks} |")
    lines += ["", "| workload | candidates listed / run | Spearman (>= 0.8) | chosen vs measured best (<= 10 %) | "
              "median abs error (<= 25 %) |", "|---|---|---:|---:|---:|"]
    for res in results:
        v = res["verdicts"]
        ok = {True: "PASS", False: "MISS"}
        lines.append(f"| {res['workload']} | {res['candidates_listed']} / {len(res['rows'])} | "
                     f"{v['spearman']:.2f} {ok[v['pass_spearman']]} | {v['chosen_gap']:+.1%} {ok[v['pass_chosen']]} | "
                     f"{v['median_error']:.1%} {ok[v['pass_error']]} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(WORKLOADS), help="workloads, comma-separated")
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6, help="steps per candidate run (the first two are warm-up)")
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--work", default="results/bench_autoplace")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra config key for every workload (YAML value)")
    parser.add_argument("--quick", action="store_true", help="smoke: 2 candidates, 1 round, 2 steps, math only")
    args = parser.parse_args(argv)
    if args.quick:
        args.only, args.candidates, args.rounds, args.steps, args.profile_steps = "math", 2, 1, 2, 2
    args.work = os.path.abspath(args.work)
    results = []
    for name in args.only.split(","):
        if name not in WORKLOADS:
            parser.error(f"--only: unknown workload {name!r} (known: {', '.join(WORKLOADS)})")
        results.append(bench_workload(name, args))
        with open(os.path.join(args.work, "summary.json"), "w") as f:
            json.dump(results, f, indent=1)
    print(table(results, args))


if __name__ == "__main__":
    main()
