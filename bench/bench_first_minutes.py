"""A new user's first minutes: clone the repository into a temporary folder and time
``bash scripts/main.sh`` there, from nothing to its held-out accuracy line.

Method: ``git clone`` of the source repository (default: this checkout's committed ``HEAD``; the
clone has no ``.venv`` and no ``results/``), then ``bash scripts/main.sh`` in the clone with
``RLINF_VENV`` unset, so the set-up creates the clone's own ``.venv`` (the CPU torch through
``constraints/cpu.txt``, like any fresh set-up). Every output line is time-stamped as it arrives;
the phases are

* set-up: start -> ``[setup] done`` (virtualenv, pip install of the main job's extra);
* warm start: -> the last line of ``toolkits.tiny_math.prepare`` (tiny model, tokenizer, supervised
  warm start; cached afterwards);
* job: -> ``[rlinf] held-out accuracy: ...`` (the GRPO run).

The 1-minute load average is printed before and after: the machine is shared, and a figure taken
under load is not the idle figure. Run it with the system Python (the clone has no venv yet)::

    python3 bench/bench_first_minutes.py                 # clone HEAD of this checkout, ~4-7 min
    python3 bench/bench_first_minutes.py --keep          # keep the clone (its path is printed)
    python3 bench/bench_first_minutes.py --src URL --ref BRANCH

The pip cache and the local package index of the machine are whatever they are; the figure
includes pip's downloads only where the index is remote.

Example (the phase split of a recorded run):
    >>> phases([(0.0, "[setup] creating virtualenv"), (60.0, "[setup] done"), (61.0, "[tiny_math] x"),
    ...         (150.0, "[rlinf] memory estimate (per rank):"), (250.0, "[rlinf] held-out accuracy: 1% -> 2%")])
    {'setup_s': 60.0, 'warm_start_s': 90.0, 'job_s': 100.0, 'total_s': 250.0}
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETUP_DONE = "[setup] done"
ACCURACY = "held-out accuracy"
JOB_START = "[rlinf]"  # the entry's first lines (memory estimate) follow the warm start


def phases(lines: list[tuple[float, str]]) -> dict[str, float]:
    """Seconds of set-up, warm start and job from time-stamped output lines (seconds since start)."""
    setup = next((t for t, line in lines if line.startswith(SETUP_DONE)), 0.0)
    job_start = next((t for t, line in lines if t >= setup and line.startswith(JOB_START)), None)
    end = next((t for t, line in lines if ACCURACY in line), None)
    if end is None:
        raise RuntimeError("no held-out accuracy line in the output")
    job_start = end if job_start is None else job_start
    return {"setup_s": round(setup, 1), "warm_start_s": round(job_start - setup, 1),
            "job_s": round(end - job_start, 1), "total_s": round(end, 1)}


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def run(src: str, ref: str | None, keep: bool, log: Path | None) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="rlinf-first-minutes-"))
    clone = tmp / "rlinf"
    try:
        cmd = ["git", "clone", "-q"] + (["--branch", ref] if ref else []) + [src, str(clone)]
        subprocess.run(cmd, check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("RLINF_VENV", "RLINF_EXTRAS", "VIRTUAL_ENV")}
        before = load_average()
        start = time.monotonic()
        lines: list[tuple[float, str]] = []
        out = open(log, "w") if log else None
        proc = subprocess.Popen(["bash", "scripts/main.sh"], cwd=clone, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in proc.stdout:
            t = time.monotonic() - start
            lines.append((t, line.rstrip("\n")))
            print(f"[{t:6.1f}s] {line}", end="", file=out or sys.stderr, flush=True)
        rc = proc.wait()
        if out:
            out.close()
        if rc != 0:
            raise RuntimeError(f"bash scripts/main.sh exited with {rc} (output above{f' and in {log}' if log else ''})")
        result = phases(lines)
        result.update(load_before=round(before, 2), load_after=round(load_average(), 2))
        if keep:
            print(f"clone kept at {clone}", file=sys.stderr)
        return result
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default=str(REPO), help="repository to clone (default: this checkout)")
    parser.add_argument("--ref", default=None, help="branch or tag to clone (default: HEAD)")
    parser.add_argument("--keep", action="store_true", help="keep the clone and its .venv")
    parser.add_argument("--log", type=Path, default=None, help="write the time-stamped output here, not stderr")
    args = parser.parse_args(argv)
    r = run(args.src, args.ref, args.keep, args.log)
    print(f"| set-up | warm start | job | total (clone -> held-out accuracy) | load (1 min) before / after |\n"
          f"|---|---|---|---|---|\n"
          f"| {r['setup_s']:.0f} s | {r['warm_start_s']:.0f} s | {r['job_s']:.0f} s | "
          f"{r['total_s'] // 60:.0f} min {r['total_s'] % 60:02.0f} s | {r['load_before']} / {r['load_after']} |")


if __name__ == "__main__":
    main()
