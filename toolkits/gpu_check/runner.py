"""Runs the checks one after another, each in its own Python process with its own time cap, under
one overall time budget; a check that raises, crashes or hangs is a ``fail`` and the next one
still runs.

Example (a check defined on the spot; ``plan`` decides what runs, nothing is started):
    >>> from toolkits.gpu_check import CheckSpec
    >>> ctx = Context(device="cpu", dry_run=True, workdir="/tmp", out_dir="/tmp")
    >>> plan([CheckSpec("gpu_only", "m:f", 10, needs_cuda=True, cpu_note="Triton")], ctx)
    [('gpu_only', 'skip', 'no CUDA device in this run (Triton)')]
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from toolkits.gpu_check import DRY_RUN_CAP_S, CheckSpec
from toolkits.gpu_check.report import failure, line, outcome

#: Seconds kept back from the budget for writing the report.
RESERVE_S = 5.0
#: Lines of a crashed check's log copied into its outcome.
LOG_TAIL_LINES = 15
#: Every check's output, one after another, in the output folder.
LOG_NAME = "gpu_check.log"
#: Set in every check's process unless already set: no progress bars, and Hugging Face libraries
#: never reach for the network (the GPU machine has none; a lookup would wait for its timeout).
CHILD_ENV = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_OFFLINE": "1",
             "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


@dataclasses.dataclass(frozen=True)
class Context:
    """What every check gets (it crosses into the check's process as JSON).

    Args:
        device: ``"cuda"`` or ``"cpu"``.
        dry_run: tiny sizes, CPU-friendly; figures are plumbing checks, not GPU results.
        workdir: scratch folder for model files (not returned).
        out_dir: where the JSON and the per-check logs go.
        peak_tflops: override of the peak bf16 dense TFLOPS used for MFU (None: by GPU name).
        seed: seed of every random model and batch.
    """

    device: str
    dry_run: bool
    workdir: str
    out_dir: str
    peak_tflops: float | None = None
    seed: int = 0

    def scratch(self, name: str) -> str:
        """A fresh sub-folder of the work folder.

        >>> Context("cpu", True, "/tmp/w", "/tmp/o").scratch("model").endswith("/model")
        True
        """
        path = Path(self.workdir) / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)


def parse_extra(text: str) -> CheckSpec:
    """``NAME=MODULE:FUNCTION[@SECONDS]`` -> a check spec (your own check in the same harness).

    >>> parse_extra("mine=my_pkg.checks:run@30")
    CheckSpec(name='mine', target='my_pkg.checks:run', cap_s=30.0, needs_cuda=False, needs_modules=(), cpu_note='')
    """
    name, sep, rest = text.partition("=")
    target, _, cap = rest.partition("@")
    if not sep or not name or ":" not in target:
        raise ValueError(f"--check {text!r}: expected NAME=MODULE:FUNCTION[@SECONDS]")
    try:
        cap_s = float(cap) if cap else 60.0
    except ValueError:
        raise ValueError(f"--check {text!r}: {cap!r} is not a number of seconds") from None
    return CheckSpec(name, target, cap_s)


def _missing_module(names: Iterable[str]) -> str | None:
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return name
    return None


def plan(specs: Iterable[CheckSpec], ctx: Context) -> list[tuple[str, str, str | None]]:
    """``(name, "run" | "skip", reason)`` per check, decided without importing anything heavy."""
    out = []
    for spec in specs:
        if spec.needs_cuda and ctx.device != "cuda":
            out.append((spec.name, "skip", f"no CUDA device in this run ({spec.cpu_note})"))
            continue
        missing = _missing_module(spec.needs_modules)
        if missing:
            out.append((spec.name, "skip", f"{missing} is not importable here: bring its wheel "
                                           "(scripts/fetch_gpu_wheels.sh, docs/gpu_check.md)"))
        else:
            out.append((spec.name, "run", None))
    return out


def _log_tail(path: Path) -> str | None:
    lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
    return "\n".join(lines[-LOG_TAIL_LINES:]) or None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _append_log(ctx: Context, name: str, log: Path) -> None:
    """Add one check's output to ``<out_dir>/gpu_check.log`` (one file: few files come back)."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    with open(Path(ctx.out_dir) / LOG_NAME, "a") as sink:
        sink.write(f"===== {name} =====\n{text}\n")


def run_one(spec: CheckSpec, ctx: Context, timeout_s: float) -> dict[str, Any]:
    """Run one check in a child process (``python -m toolkits.gpu_check.worker``), its output
    appended to ``<out_dir>/gpu_check.log``; its process group is killed at ``timeout_s``."""
    log = Path(ctx.scratch("logs")) / f"{spec.name}.log"
    result_file = Path(ctx.scratch("results")) / f"{spec.name}.json"
    result_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "toolkits.gpu_check.worker", "--target", spec.target,
           "--context", json.dumps(dataclasses.asdict(ctx)), "--result", str(result_file)]
    start = time.monotonic()
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**CHILD_ENV, **os.environ})
        try:
            proc.wait(timeout=timeout_s)
            ended = f"exited with code {proc.returncode}"
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            ended = f"timed out after {timeout_s:.0f} s (killed)"
    seconds = time.monotonic() - start
    _append_log(ctx, spec.name, log)
    if not result_file.is_file():
        error = ended if "timed out" in ended else f"the check's process {ended} and left no result"
        return failure(error, seconds, log_tail=_log_tail(log))
    result = json.loads(result_file.read_text())
    result["seconds"] = seconds
    if "timed out" in ended:  # the result was written, then the process hung on its way out
        result["note"] = f"the process {ended} after writing its result"
    if result["status"] == "fail" and result.get("error"):
        result["log_tail"] = _log_tail(log)
    return result


def run_all(specs: list[CheckSpec], ctx: Context, budget_s: float, echo=print) -> dict[str, dict]:
    """Every check in order under the overall ``budget_s``; returns ``{name: outcome}``. A check
    gets ``min(its cap, what is left of the budget)``; none starts with less than 10 s left."""
    deadline = time.monotonic() + budget_s - RESERVE_S
    Path(ctx.out_dir).mkdir(parents=True, exist_ok=True)
    (Path(ctx.out_dir) / LOG_NAME).write_text("")
    caps = {s.name: (min(s.cap_s, DRY_RUN_CAP_S) if ctx.dry_run else s.cap_s) for s in specs}
    results: dict[str, dict] = {}
    for (name, action, reason), spec in zip(plan(specs, ctx), specs):
        left = deadline - time.monotonic()
        if action == "skip":
            results[name] = {**outcome({}, skip=reason), "seconds": 0.0}
        elif left < 10:
            results[name] = {**outcome({}, skip=f"time budget of {budget_s:.0f} s spent"), "seconds": 0.0}
        else:
            results[name] = run_one(spec, ctx, min(caps[name], left))
        echo(line(name, results[name]))
    return results
