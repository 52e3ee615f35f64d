"""PushCube PPO side by side: our runner (``examples/embodiment/main_embodied.py --config-name
maniskill_ppo_mlp_cpu``) against a CleanRL-style single-file PPO (``bench/single_file_ppo.py``)
on the same task, env count and hyper-parameters.

Run: ``python bench/bench_pushcube_vs_single_file.py [--minutes 15] [--target 0.8]
[--extra-evals 0] [--keep K] [--seed 1] [--order single,ours] [--only ours|single] [--json PATH] [--quick]``.

The two run back to back in this one invocation (``--order``, default the single file first),
each as its own process on the otherwise idle machine, each until ``--extra-evals`` evals after its
first eval at or above ``--target`` (with ``--keep K``: after the first such eval whose next
``--extra-evals`` evals are all >= K), or ``--minutes`` of wall time, whichever comes first. Clocks start
when the process is launched (imports, Ray start-up and simulator start-up count). Both evaluate every 10
iterations of 400 samples (8 envs x 50 steps) on 32 deterministic episodes with fixed seeds.

Reported per side: env steps/s end to end (train env steps at the stop / wall seconds from launch
to the stop, evaluations included), minutes to the first eval >= 0.8 (and >= 0.9), the best and
the last eval. Goals: ours >= 1.2x the single file's env steps/s, and no slower to 0.8.

``--quick``: a few seconds of the single file and one step of ours, 8 eval episodes each, for the
smoke test (~1 min, most of it our Ray start-up); its numbers mean nothing. ``--json PATH`` writes the eval curves.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PY = sys.executable
SAMPLES_PER_ITER = 8 * 50   # env.train.total_num_envs x episode length, both sides
GOAL_SPEEDUP = 1.2


class JsonlTail:
    """The records appended to a JSON-lines file since the last call, whole lines only: a line the
    writer has not finished yet stays for the next call (reading it half-written once ended a
    30-minute bench run with a JSONDecodeError), and only the new bytes are read each time.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "m.jsonl")
    >>> tail = JsonlTail(path)
    >>> tail.new()
    []
    >>> with open(path, "w") as f:
    ...     _ = f.write('{"a": 1}\\n{"b"')
    >>> tail.new()
    [{'a': 1}]
    >>> with open(path, "a") as f:
    ...     _ = f.write(': 2}\\n')
    >>> tail.new()
    [{'b': 2}]
    """

    def __init__(self, path: str):
        self.path, self.offset, self.partial = path, 0, b""

    def new(self) -> list[dict]:
        if not os.path.exists(self.path):
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        self.offset += len(chunk)
        *whole, self.partial = (self.partial + chunk).split(b"\n")
        return [json.loads(line) for line in whole if line.strip()]


def _stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGINT the process group (our runner shuts its workers down), SIGKILL after ``grace_s``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def should_stop(evals: list[dict], args) -> bool:
    """Stop at the ``--extra-evals``-th eval after the first one >= ``--target``; with ``--keep``,
    only once some eval >= ``--target`` is followed by ``--extra-evals`` evals all >= ``--keep``
    (a run that drops below keeps going, until ``--minutes``)."""
    n = args.extra_evals
    for i, e in enumerate(evals):
        if e["success"] >= args.target and len(evals) - 1 - i >= n:
            if args.keep is None or all(x["success"] >= args.keep for x in evals[i + 1:i + 1 + n]):
                return True
            continue
        if e["success"] >= args.target and args.keep is None:
            return False
    return False


def run_single(args, log) -> dict:
    """The single-file PPO in its own process; evals read from its stdout as they arrive."""
    cmd = [PY, os.path.join(ROOT, "bench", "single_file_ppo.py"), "--seed", str(args.seed),
           "--minutes", "0.1" if args.quick else str(args.minutes)]
    if args.quick:
        cmd += ["--eval-episodes", "8", "--eval-every", "1"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    evals = []
    for line in proc.stdout:
        if line.startswith("{"):
            rec = json.loads(line)
            evals.append({"minutes": (time.perf_counter() - t0) / 60, "env_steps": rec["env_steps"],
                          "success": rec["eval_success"]})
            log(f"  single-file  {evals[-1]['minutes']:6.2f} min  {rec['env_steps']:7d} steps  "
                f"eval {rec['eval_success']:.3f}")
            if should_stop(evals, args):
                _stop(proc, grace_s=5.0)
                return {"name": "single-file PPO", "evals": evals, "wall_s": time.perf_counter() - t0}
    proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"single_file_ppo.py exited with {proc.returncode}")
    return {"name": "single-file PPO", "evals": evals, "wall_s": time.perf_counter() - t0}


def run_ours(args, log) -> dict:
    """Our runner in its own process; evals read from its metrics.jsonl as they are written."""
    out_dir = tempfile.mkdtemp(prefix="rlinf_pushcube_")
    name = f"bench-pushcube-seed{args.seed}"
    cmd = [PY, os.path.join(ROOT, "examples", "embodiment", "main_embodied.py"),
           "--config-name", args.config, f"runner.seed={args.seed}", f"runner.output_dir={out_dir}",
           f"runner.experiment_name={name}", "runner.val_check_interval=10", "runner.save_interval=-1"]
    if args.quick:
        cmd += ["runner.max_epochs=1", "env.eval.total_num_envs=8"]
    cmd += args.set
    env = dict(os.environ, RAY_ADDRESS="local", REPO_PATH=ROOT)
    metrics = os.path.join(out_dir, name, "metrics.jsonl")
    # stderr (progress bar, Ray logs) to a file: an unread pipe fills up and blocks the runner
    err_path = os.path.join(out_dir, "stderr.log")
    err = open(err_path, "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
                            text=True, start_new_session=True)
    evals, stop_t, tail = [], None, JsonlTail(metrics)
    try:
        while True:
            done = proc.poll() is not None
            for rec in tail.new():
                if "eval/success_rate" in rec:
                    evals.append({"minutes": (time.perf_counter() - t0) / 60,
                                  "env_steps": int(rec["step"]) * SAMPLES_PER_ITER,
                                  "success": rec["eval/success_rate"]})
                    log(f"  ours         {evals[-1]['minutes']:6.2f} min  {evals[-1]['env_steps']:7d} steps  "
                        f"eval {rec['eval/success_rate']:.3f}")
                    if should_stop(evals, args) and stop_t is None:
                        stop_t = time.perf_counter()
            if done or stop_t is not None or (time.perf_counter() - t0) / 60 >= args.minutes:
                break
            time.sleep(0.2)
        wall = (stop_t or time.perf_counter()) - t0
    finally:
        _stop(proc)
        err.close()
    if proc.returncode not in (0, -signal.SIGINT, -signal.SIGKILL, 130, 1) or not evals:
        raise RuntimeError(f"our runner failed ({proc.returncode}):\n{open(err_path).read()[-3000:]}")
    return {"name": "ours (rlinf runner)", "evals": evals, "wall_s": wall}


def summarize(res: dict) -> dict:
    ev = res["evals"]
    first = lambda thr: next((e["minutes"] for e in ev if e["success"] >= thr), None)  # noqa: E731
    steps = ev[-1]["env_steps"] if ev else 0
    wall = ev[-1]["minutes"] * 60 if ev else res["wall_s"]  # launch -> the last eval (the stop)
    return {"name": res["name"], "env_steps": steps, "wall_s": wall, "sps": steps / max(wall, 1e-9),
            "to_08": first(0.8), "to_09": first(0.9), "best": max((e["success"] for e in ev), default=0.0),
            "last": ev[-1]["success"] if ev else 0.0}


def fmt_min(x):
    return "not reached" if x is None else f"{x:.2f}"


def plot(json_paths: list[str], out_png: str) -> None:
    """Eval success vs minutes from launch for every run in the ``--json`` files, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for path in json_paths:
        data = json.load(open(path))
        seed = data["args"]["seed"]
        for side, res in data["results"].items():
            ev = res["evals"]
            ax.plot([e["minutes"] for e in ev], [e["success"] for e in ev], marker=".",
                    linestyle="--" if side == "single" else "-", label=f"{res['name']}, seed {seed}")
    ax.axhline(0.8, color="grey", linewidth=0.5)
    ax.axhline(0.9, color="grey", linewidth=0.5)
    ax.set_xlabel("minutes from launch")
    ax.set_ylabel("eval success (32 episodes)")
    ax.set_title("ManiSkill PushCube-v1, 2 CPU cores")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_png, dpi=80)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=15.0, help="wall-time cap per side")
    p.add_argument("--target", type=float, default=0.8, help="stop a side at its first eval >= this ...")
    p.add_argument("--extra-evals", type=int, default=0, help="... plus this many evals after it")
    p.add_argument("--keep", type=float, default=None, help="... which must all be >= this (else go on)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--order", default="single,ours")
    p.add_argument("--only", choices=["ours", "single"], default=None)
    p.add_argument("--config", default="maniskill_ppo_mlp_cpu")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override for our runner (repeatable), e.g. ++algorithm.max_head_offpolicyness=1")
    p.add_argument("--json", default=None, help="write the eval curves here")
    p.add_argument("--plot", nargs="+", default=None, metavar="JSON", help="only draw the curves of "
                   "these --json files to --png and exit")
    p.add_argument("--png", default=os.path.join(ROOT, "bench", "results", "pushcube_curves.png"))
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    if args.plot:
        plot(args.plot, args.png)
        print(f"wrote {args.png}")
        return
    if args.quick:
        args.minutes = min(args.minutes, 2.0)
    order = [args.only] if args.only else args.order.split(",")
    log = lambda m: print(m, flush=True)  # noqa: E731
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min average)", flush=True)
    results = {}
    for side in order:
        keep = "" if args.keep is None else f", all >= {args.keep}"
        log(f"{side}: running (cap {args.minutes:g} min, stop {args.extra_evals} evals after the first "
            f"eval >= {args.target}{keep})")
        results[side] = (run_single if side == "single" else run_ours)(args, log)
    print(f"load after: {os.getloadavg()[0]:.2f} (1-min average)")
    rows = {k: summarize(v) for k, v in results.items()}
    print()
    print("| run | env steps | wall s | env steps/s (end to end) | min to 0.8 | min to 0.9 | best eval | last eval |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows.values():
        print(f"| {r['name']} | {r['env_steps']} | {r['wall_s']:.0f} | {r['sps']:.0f} | {fmt_min(r['to_08'])} | "
              f"{fmt_min(r['to_09'])} | {r['best']:.3f} | {r['last']:.3f} |")
    if "ours" in rows and "single" in rows:
        o, s = rows["ours"], rows["single"]
        ratio = o["sps"] / max(s["sps"], 1e-9)
        t_ratio = "-" if o["to_08"] is None or s["to_08"] is None else f"{o['to_08'] / s['to_08']:.2f}x"
        print(f"| ratio ours / single | | | {ratio:.2f}x | {t_ratio} | | | |")
        sp_goal = "PASS" if ratio >= GOAL_SPEEDUP else "MISS"
        t_goal = ("PASS" if o["to_08"] is not None and (s["to_08"] is None or o["to_08"] <= s["to_08"])
                  else "MISS")
        print(f"\nenv steps/s goal (>= {GOAL_SPEEDUP}x): {sp_goal}; minutes to 0.8 goal (ours <= single): {t_goal}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "summary": rows}, f, indent=1)


if __name__ == "__main__":
    main()

