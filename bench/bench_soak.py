"""Memory that stays flat (issue 25): long runs of the real entries with every process's RSS
sampled, and the growth after warm-up per role.

One after the other, each its own process through its example's Hydra entry (local Ray started by
that driver, so every Ray worker, the Playwright driver and Chromium are in the driver's process
tree):

* ``math``: ``examples/math/main_grpo.py`` on ``grpo_tiny_cpu`` (GRPO, tiny Qwen2), ``--steps`` steps;
* ``embodied``: ``examples/embodiment/main_embodied.py`` on ``maniskill_ppo_mlp_cpu`` (PPO on
  ManiSkill PushCube), ``--iterations`` iterations;
* ``web``: ``examples/web_agent/main.py`` on ``web_agent_tiny_cpu`` (GRPO in real headless
  Chromium), ``--web-iterations`` iterations.

Every ``--interval`` seconds the whole tree of the driver is walked with psutil; each process gets a
role (:func:`role_of`: ``driver``, a Ray worker by its process title ``ray::<Class>``, ``chromium``
(every Chromium process), ``playwright driver``, ``ray system`` (GCS, raylet, ...), otherwise the
role of its nearest classified ancestor with `` child``) and the RSS of a role is the sum over its
processes. Each sample is tagged with the steps finished so far (the highest ``step`` in the run's
``metrics.jsonl``); a role's value for step ``s`` is its peak over the samples taken while step
``s + 1`` ran. Growth (:func:`growth`): the first ``--warmup`` fraction of steps is dropped, then
(median of the last 10 % of steps - median of the first 10 % after warm-up) / the latter, per role
and for the total; the goal is < 5 % per role. ``2nd half`` is the same from the middle of the run
on (a cache that fills and stops shows a large growth but ~0 here).

    .venv/bin/python bench/bench_soak.py                        # all three, ~1 h on 2 cores
    .venv/bin/python bench/bench_soak.py --only web --web-iterations 60
    .venv/bin/python bench/bench_soak.py --quick                # a few steps each (smoke; ~3 min)
    .venv/bin/python bench/bench_soak.py --tables bench/results/soak_<date>.json --warmup 0.2

RSS counts shared pages in every process that maps them (forked workers, Chromium's zygote), so
the total is an upper bound of the memory in use; growth is what this measures. All samples go
to ``bench/results/soak_<date>.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import psutil

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PY = sys.executable
GOAL_GROWTH = 0.05
MIB = 1024 * 1024
RAY_SYSTEM = ("gcs_server", "raylet", "dashboard", "log_monitor", "monitor.py", "runtime_env", "ray_client_server")
#: Ray's own processes that carry a ``ray::`` title like workers
RAY_AGENTS = ("DashboardAgent", "RuntimeEnvAgent")


@dataclass
class Part:
    """One run of the soak: its entry, config and how its length is set."""

    name: str
    script: str
    config: str
    steps: int
    overrides: list[str] = field(default_factory=list)

    def command(self, out_dir: str) -> tuple[list[str], str]:
        """The command line and the ``metrics.jsonl`` it writes, for a run in ``out_dir``."""
        cmd = [PY, os.path.join(ROOT, self.script), "--config-name", self.config]
        if self.name == "web":
            save = os.path.join(out_dir, "web")
            cmd += [f"save_path={save}", f"runner.iterations={self.steps}", "runner.max_minutes=600"]
            metrics = os.path.join(save, "metrics.jsonl")
        else:
            exp = f"soak-{self.name}"
            cmd += [f"runner.output_dir={out_dir}", f"runner.experiment_name={exp}", "runner.save_interval=-1"]
            metrics = os.path.join(out_dir, exp, "metrics.jsonl")
            if self.name == "math":
                cmd += [f"runner.max_steps={self.steps}", "runner.max_epochs=1000"]
            else:
                cmd += [f"runner.max_epochs={self.steps}"]
        return cmd + self.overrides, metrics


def parts(args) -> list[Part]:
    """The selected parts with their lengths (``--quick``: a few steps each)."""
    quick = args.quick
    every = [
        Part("math", "examples/math/main_grpo.py", "grpo_tiny_cpu", 4 if quick else args.steps,
             [f"runner.val_check_interval={2 if quick else 50}"]),
        Part("embodied", "examples/embodiment/main_embodied.py", "maniskill_ppo_mlp_cpu",
             3 if quick else args.iterations, ["runner.val_check_interval=10"] + (["env.eval.total_num_envs=8"]
                                                                                 if quick else [])),
        Part("web", "examples/web_agent/main.py", "web_agent_tiny_cpu", 2 if quick else args.web_iterations,
             [f"runner.test_interval={1 if quick else 10}"]),
    ]
    only = args.only.split(",")
    unknown = set(only) - {p.name for p in every}
    if unknown:
        raise SystemExit(f"error: --only: unknown part(s) {sorted(unknown)}; choose from math, embodied, web")
    return [p for p in every if p.name in only]


# -- classification ------------------------------------------------------------------------------

def own_role(pid: int, driver: int, name: str, cmdline: list[str]) -> str | None:
    """The role a process has by itself, or None when it takes its ancestor's.

    >>> own_role(7, 7, "python", ["python", "main.py"])
    'driver'
    >>> own_role(8, 7, "ray::MathActor", ["ray::MathActor.run_step", ""])
    'MathActor'
    >>> own_role(9, 7, "headless_shell", ["/usr/lib/chromium/headless_shell", "--type=renderer"])
    'chromium'
    >>> own_role(10, 7, "python", ["python", "-m", "multiprocessing.spawn"]) is None
    True
    """
    head = cmdline[0] if cmdline else ""
    if pid == driver:
        return "driver"
    if head.startswith("ray::"):
        title = head[5:].split()[0] if head[5:].split() else "IDLE"
        title = title.split(".")[0]
        return "ray idle worker" if title == "IDLE" else "ray system" if title in RAY_AGENTS else title
    exe = os.path.basename(head)
    if "chrom" in name.lower() or "headless_shell" in name or "chrom" in exe.lower():
        return "chromium"
    joined = " ".join(cmdline)
    if "playwright" in joined and ("node" in name or "node" in exe):
        return "playwright driver"
    if name in RAY_SYSTEM or any(s in joined for s in RAY_SYSTEM):
        return "ray system"
    return None


def role_of(pid: int, info: dict[int, tuple[int, str, list[str]]], driver: int, memo: dict[int, str]) -> str:
    """``pid``'s role: its own (:func:`own_role`), else its nearest classified ancestor's + `` child``.

    ``info`` maps pid -> (ppid, name, cmdline) of every process of the tree.

    >>> info = {1: (0, "python", ["python"]), 2: (1, "raylet", ["raylet"]),
    ...         3: (2, "ray::Env", ["ray::Env"]), 4: (3, "python", ["python", "-c", "pool"])}
    >>> role_of(4, info, 1, {})
    'Env child'
    """
    if pid in memo:
        return memo[pid]
    ppid, name, cmdline = info[pid]
    role = own_role(pid, driver, name, cmdline)
    if role is None:
        parent = role_of(ppid, info, driver, memo) if ppid in info and ppid != pid else "other"
        role = parent if parent.endswith(" child") or parent == "chromium" else f"{parent} child"
    memo[pid] = role
    return role


def sample_tree(driver: int) -> dict[int, tuple[str, int]]:
    """pid -> (role, RSS in bytes) of the driver and every descendant alive now."""
    try:
        root = psutil.Process(driver)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    info, rss = {}, {}
    for p in procs:
        try:
            with p.oneshot():
                info[p.pid] = (p.ppid(), p.name(), p.cmdline())
                rss[p.pid] = p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    memo: dict[int, str] = {}
    return {pid: (role_of(pid, info, driver, memo), r) for pid, r in rss.items()}


# -- the numbers -------------------------------------------------------------------------------

def per_step(samples: list[dict], role: str | None) -> list[tuple[int, float]]:
    """(step, peak RSS in bytes of ``role``, or of all processes when None) for each step with samples.

    A sample's ``step`` is the number of steps finished when it was taken; samples before the
    first step finished (start-up) and after the last are left out.

    >>> s = [{"step": None, "pids": {"1": ["a", 9]}}, {"step": 0, "pids": {"1": ["a", 5], "2": ["b", 1]}},
    ...      {"step": 0, "pids": {"1": ["a", 6]}}, {"step": 1, "pids": {"1": ["a", 7]}}]
    >>> per_step(s, "a"), per_step(s, None)
    ([(0, 6), (1, 7)], [(0, 6), (1, 7)])
    """
    peaks: dict[int, float] = {}
    for s in samples:
        if s["step"] is None:
            continue
        value = sum(r for ro, r in s["pids"].values() if role is None or ro == role)
        peaks[s["step"]] = max(peaks.get(s["step"], 0), value)
    return sorted(peaks.items())


def growth(values: list[float], warmup: float = 0.1, window: float = 0.1, start: float | None = None) -> dict:
    """Growth of a per-step series after warm-up.

    The first ``warmup`` fraction of the steps is dropped; ``base`` is the median of the next
    ``window`` fraction (of all steps, at least one), ``end`` the median of the last ``window``
    fraction, growth = (end - base) / base. ``start`` (a fraction) puts the base window there
    instead of right after warm-up (``0.5``: growth over the second half).

    >>> g = growth([100] * 10 + [100, 100, 101, 102, 103, 104, 105, 106, 108, 110])
    >>> g["base"], g["end"], round(g["growth"], 2)
    (100.0, 110.0, 0.1)
    >>> growth([5, 5, 5, 5, 5, 5, 5, 5, 5, 5])["growth"]
    0.0
    """
    n = len(values)
    if n == 0:
        return {"base": math.nan, "end": math.nan, "growth": math.nan}
    k = max(1, math.ceil(window * n))
    first = min(n - 1, math.ceil((warmup if start is None else start) * n))
    base = statistics.median(values[first:first + k])
    end = statistics.median(values[n - k:])
    return {"base": float(base), "end": float(end), "growth": (end - base) / base if base else math.nan}


def summarize(samples: list[dict], warmup: float) -> list[dict]:
    """One row per role (and ``total``): pids, RSS after warm-up and at the end, growth, 2nd-half growth."""
    roles = sorted({ro for s in samples if s["step"] is not None for ro, _ in s["pids"].values()})
    rows = []
    for role in [*roles, None]:
        series = per_step(samples, role)
        values = [v for _, v in series]
        g, half = growth(values, warmup), growth(values, warmup, start=0.5)
        pids = {pid for s in samples if s["step"] is not None for pid, (ro, _) in s["pids"].items()
                if role is None or ro == role}
        live = [sum(1 for ro, _ in s["pids"].values() if role is None or ro == role)
                for s in samples if s["step"] is not None]
        rows.append({"role": role or "total", "pids_live": max(live) if live else 0, "pids_seen": len(pids),
                     "steps": len(values), **g, "growth_2nd_half": half["growth"],
                     "pass": bool(g["growth"] < GOAL_GROWTH)})
    return rows


def table(part: dict) -> str:
    """The markdown table of one part (its header line, then role rows)."""
    lines = [f"**{part['name']}**: {part['steps_done']} steps in {part['minutes']:.1f} min "
             f"(warm-up: first {part['warmup_steps']} steps dropped), load (1-min avg) "
             f"{part['load_min']:.1f}-{part['load_max']:.1f}, mean {part['load_mean']:.1f}; exit {part['returncode']}"
             + (" (stopped early by the soak)" if part.get("interrupted") else ""),
             "",
             "| role | pids (max live / seen) | RSS after warm-up (MiB) | RSS at end (MiB) | growth | 2nd half "
             "| goal < 5 % |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in part["rows"]:
        lines.append(f"| {r['role']} | {r['pids_live']} / {r['pids_seen']} | {r['base'] / MIB:.0f} | "
                     f"{r['end'] / MIB:.0f} | {100 * r['growth']:+.1f} % | {100 * r['growth_2nd_half']:+.1f} % | "
                     f"{'PASS' if r['pass'] else 'MISS'} |")
    return "\n".join(lines)


# -- running ----------------------------------------------------------------------------------

class StepTail:
    """The highest ``step`` written so far to a ``metrics.jsonl`` (None before the first step)."""

    def __init__(self, path: str):
        self.path, self.offset, self.step = path, 0, None
        self.buffer = ""

    def poll(self) -> int | None:
        if os.path.exists(self.path):
            with open(self.path) as f:
                f.seek(self.offset)
                self.buffer += f.read()
                self.offset = f.tell()
            *lines, self.buffer = self.buffer.split("\n")
            for line in lines:
                if line.strip():
                    step = int(json.loads(line).get("step", 0))
                    if step > 0:
                        self.step = step if self.step is None else max(self.step, step)
        return self.step


def stop(proc: subprocess.Popen) -> None:
    """End a run's process group: SIGINT (the runner shuts its workers down), then SIGTERM, then SIGKILL."""
    for sig, grace_s in ((signal.SIGINT, 30.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def run_part(part: Part, args, log) -> dict:
    """Run one part as its own process and sample its tree until it exits."""
    out_dir = tempfile.mkdtemp(prefix=f"rlinf_soak_{part.name}_")
    cmd, metrics = part.command(out_dir)
    # PYTHONPATH: the workers import this tree's rlinf (also when it is a copy of the repository)
    env = dict(os.environ, RAY_ADDRESS="local", REPO_PATH=ROOT, HYDRA_FULL_ERROR="1",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    log(f"[soak] {part.name}: {' '.join(cmd[1:])}")
    err = open(os.path.join(out_dir, "output.log"), "w")
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=err, stderr=subprocess.STDOUT, start_new_session=True)
    tail, samples, loads = StepTail(metrics), [], []
    last_step, last_log, interrupted = None, t0, False
    try:
        while proc.poll() is None:
            step = tail.poll()
            # tagged with the steps finished: start-up (before the first) and shut-down (after the last) untagged
            tagged = None if step is None or step >= part.steps else step
            tree = sample_tree(proc.pid)
            loads.append(os.getloadavg()[0])
            samples.append({"t": round(time.time() - t0, 2), "step": tagged,
                            "pids": {str(pid): [role, rss] for pid, (role, rss) in tree.items()}})
            if step != last_step or time.time() - last_log > 60:
                if step is not None and (step % max(1, part.steps // 20) == 0 or time.time() - last_log > 60):
                    total = sum(rss for _, rss in tree.values()) / MIB
                    log(f"[soak] {part.name}: step {step}/{part.steps}, {len(tree)} processes, {total:.0f} MiB, "
                        f"load {loads[-1]:.1f}")
                    last_log = time.time()
                last_step = step
            time.sleep(args.interval)
    except KeyboardInterrupt:  # stopped early: the run is stopped too, and what was measured is kept
        interrupted = True
        log(f"[soak] {part.name}: interrupted; stopping the run")
    finally:
        stop(proc)
        err.close()
    step = tail.poll()
    warmup_steps = math.ceil(args.warmup * len({s["step"] for s in samples if s["step"] is not None}))
    return {"name": part.name, "command": " ".join(cmd[1:]), "out_dir": out_dir, "returncode": proc.returncode,
            "interrupted": interrupted,
            "steps_done": step or 0, "minutes": (time.time() - t0) / 60, "warmup_steps": warmup_steps,
            "load_min": min(loads, default=math.nan), "load_max": max(loads, default=math.nan),
            "load_mean": statistics.fmean(loads) if loads else math.nan,
            "rows": summarize(samples, args.warmup), "samples": samples}


def report(header: str, results: list[dict], warmup: float) -> None:
    """Print the header and one table per part, the rows computed again from the samples with ``warmup``."""
    print(header)
    for r in results:
        r["rows"] = summarize(r["samples"], warmup)
        r["warmup_steps"] = math.ceil(warmup * len({s["step"] for s in r["samples"] if s["step"] is not None}))
        print("\n" + table(r))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="math,embodied,web", help="comma-separated parts: math, embodied, web")
    parser.add_argument("--steps", type=int, default=300, help="math GRPO steps")
    parser.add_argument("--iterations", type=int, default=200, help="embodied PPO iterations")
    parser.add_argument("--web-iterations", type=int, default=50, help="web agent iterations")
    parser.add_argument("--warmup", type=float, default=0.1, help="fraction of the steps dropped as warm-up")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--json", default=None,
                        help="where to write every sample (default bench/results/soak_<date>.json)")
    parser.add_argument("--quick", action="store_true", help="a few steps of each part (a smoke run)")
    parser.add_argument("--tables", metavar="JSON", default=None,
                        help="run nothing: print the tables of a saved soak (e.g. with another --warmup)")
    args = parser.parse_args(argv)
    if args.tables:
        with open(args.tables) as f:
            saved = json.load(f)
        report(saved["header"], saved["parts"], args.warmup)
        return
    selected = parts(args)
    # started in the background (`... &`) SIGINT is ignored, and the runs would inherit that: take it
    # (and SIGTERM) as an interrupt so that a stopped soak stops its run too
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = datetime.datetime.now()
    mem = psutil.virtual_memory()
    header = (f"soak {started:%Y-%m-%d %H:%M}: {os.cpu_count()} cores, {mem.total / 2**30:.0f} GiB "
              f"({mem.available / 2**30:.1f} GiB available at start), load at start {os.getloadavg()[0]:.1f}; "
              f"sample every {args.interval} s; growth: median of the last 10 % of steps vs the first 10 % "
              "after warm-up, goal < 5 % per role")
    path = args.json or os.path.join(ROOT, "bench", "results", f"soak_{started:%Y-%m-%d_%H%M}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    results = []
    for part in selected:
        results.append(run_part(part, args, log))
        log(table(results[-1]) + "\n")
        with open(path, "w") as f:  # after every part: a soak stopped later keeps what it measured
            json.dump({"header": header, "argv": sys.argv[1:], "parts": results}, f)
        if results[-1]["interrupted"]:
            break
    report(header, results, args.warmup)
    print(f"\nsamples: {path}")
    if any(r["returncode"] != 0 and not r.get("interrupted") for r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
