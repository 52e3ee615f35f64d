"""``kill -9`` of one worker in the middle of a real run: how long until the run stops, and does
its one-line error name the dead worker?

Each trial starts an entry script as a user would (a fresh private Ray cluster), waits until the
run has logged ``--after-step`` training steps, sleeps ``--delay`` seconds, sends SIGKILL to the
worker process of ``group[rank]`` (found through the ``RLINF_GROUP_NAME`` / ``RANK`` variables
in its environment) and measures the time until the driver exits. A trial passes when the run
exits non-zero, without a Python traceback on the terminal, with an ``error:`` line that names
``group[rank]`` as dead.

    .venv/bin/python bench/bench_kill9.py                 # every scenario, 2 trials each
    .venv/bin/python bench/bench_kill9.py --only math-collocated:rollout:0 --trials 5

The math runs use a random tiny Qwen2 (``toolkits.tiny_math.make_model``), the embodied runs the
toy task; both on the 2-slot CPU placements of the shipped configs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MATH = ROOT / "examples" / "math" / "main_grpo.py"
EMBODIED = ROOT / "examples" / "embodiment" / "main_embodied.py"

#: name -> (entry, config, extra overrides, [(group, rank), ...] to kill)
SCENARIOS = {
    "math-collocated": (MATH, "grpo_tiny_cpu", [], [("RolloutGroup", 0), ("ActorGroup", 1), ("RewardGroup", 0)]),
    "math-disaggregated": (MATH, "grpo_tiny_disaggregated", [], [("RolloutGroup", 0), ("ActorGroup", 0)]),
    "embodied-toy": (EMBODIED, "toy_ppo_mlp", ["runner.max_epochs=1000"],
                     [("EnvGroup", 0), ("RolloutGroup", 0), ("ActorGroup", 1)]),
}


def math_overrides(model: str, val: str, out: str) -> list[str]:
    return [f"actor.model.model_path={model}", f"rollout.model.model_path={model}",
            f"data.val_data_paths=[{val}]", "data.rollout_batch_size=4", "algorithm.group_size=2",
            "algorithm.training_batch_size_per_gpu=2", "runner.max_steps=1000", "runner.seq_length=96",
            "runner.val_check_interval=-1", "++runner.plot_curves=false", "++runner.export_hf=false",
            f"runner.output_dir={out}"]


def find_worker(group: str, rank: int, timeout: float = 30.0) -> int:
    """PID of the Ray worker process whose environment says it is ``group[rank]``."""
    want = {f"RLINF_GROUP_NAME={group}".encode(), f"RANK={rank}".encode()}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                env = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
            except OSError:
                continue
            if want <= env:
                return int(pid)
        time.sleep(0.2)
    raise RuntimeError(f"no process of {group}[{rank}] found")


def steps_logged(log_dir: Path) -> int:
    path = log_dir / "metrics.jsonl"
    if not path.is_file():
        return 0
    steps = [json.loads(line).get("step", 0) for line in path.read_text().splitlines() if line.strip()]
    return max(steps, default=0)


def trial(name: str, group: str, rank: int, after_step: int, delay: float, work: Path, model: str, val: str) -> dict:
    entry, config, extra, _ = SCENARIOS[name]
    out = work / f"{name}-{group}{rank}-{time.time_ns()}"
    args = (math_overrides(model, val, str(out)) if entry == MATH else [f"runner.output_dir={out}",
                                                                        "++runner.plot_curves=false"]) + extra
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen([sys.executable, str(entry), "--config-name", config, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    experiment = {"grpo_tiny_cpu": "grpo-tiny-cpu", "grpo_tiny_disaggregated": "grpo-tiny-disaggregated",
                  "toy_ppo_mlp": "toy-ppo-mlp"}[config]
    log_dir = out / experiment
    try:
        deadline = time.monotonic() + 300
        while steps_logged(log_dir) < after_step:
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended before step {after_step}: {proc.stderr.read()[-800:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no step {after_step} within 300 s")
            time.sleep(0.2)
        time.sleep(delay)
        pid = find_worker(group, rank)
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        try:
            stdout, stderr = proc.communicate(timeout=180)
            took = time.monotonic() - killed
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            took = float("inf")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [line for line in stderr.splitlines() if line.strip()]
    error = next((line for line in reversed(lines) if line.startswith("error:")), lines[-1] if lines else "")
    named = f"{group}[{rank}]" in error and ("dead" in error or "died" in error)
    clean = proc.returncode not in (0, None) and "Traceback" not in stderr
    return {"scenario": name, "killed": f"{group}[{rank}]", "seconds": took, "exit": proc.returncode,
            "named": named, "clean": clean, "error": error[:300]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--after-step", type=int, default=2, help="kill once this many steps are logged")
    parser.add_argument("--delay", type=float, default=0.7, help="seconds after that step")
    parser.add_argument("--only", default=None, help="scenario:group:rank, e.g. math-collocated:rollout:0")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    from toolkits.tiny_math.make_model import make_model

    work = Path(tempfile.mkdtemp(prefix="rlinf_kill9_"))
    model = str(make_model(work / "model"))
    val = work / "val.jsonl"
    rows_in = [json.loads(line) for line in open(ROOT / "examples/math/data/val.jsonl")][:4]
    val.write_text("".join(json.dumps(r) + "\n" for r in rows_in))
    plan = [(name, g, r) for name, (_, _, _, kills) in SCENARIOS.items() for g, r in kills]
    if args.only:
        name, g, r = args.only.split(":")
        plan = [(name, g, int(r))]
    rows = []
    for t in range(args.trials):  # interleaved: every scenario once per round
        for name, group, rank in plan:
            try:
                row = trial(name, group, rank, args.after_step, args.delay, work, model, str(val))
            except RuntimeError as exc:
                row = {"scenario": name, "killed": f"{group}[{rank}]", "seconds": float("nan"), "exit": None,
                       "named": False, "clean": False, "error": f"trial failed: {exc}"[:300]}
            rows.append(row)
            print(f"round {t + 1}: {row['scenario']} kill {row['killed']}: {row['seconds']:.1f} s, exit {row['exit']}, "
                  f"named {row['named']}: {row['error']}", flush=True)
    print(f"\nload average (1, 5, 15 min) at the end: {os.getloadavg()}")
    print("\n| run | killed | trials | detected in s (median, max) | exit | named as dead | no traceback |")
    print("|---|---|---|---|---|---|---|")
    for name, group, rank in plan:
        mine = [r for r in rows if r["scenario"] == name and r["killed"] == f"{group}[{rank}]"]
        secs = [r["seconds"] for r in mine]
        print(f"| {name} | {group}[{rank}] | {len(mine)} | {statistics.median(secs):.1f}, {max(secs):.1f} | "
              f"{sorted({r['exit'] for r in mine}, key=str)} | {sum(r['named'] for r in mine)}/{len(mine)} | "
              f"{sum(r['clean'] for r in mine)}/{len(mine)} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0 if all(r["named"] and r["clean"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
