"""What the Hydra entry points share: run a recipe, turn a config error into one line and exit
code 2, print the first / last evaluation figure.

An entry file is a few lines (see ``examples/math/main_grpo.py``)::

    @hydra.main(version_base="1.3", config_path="config", config_name="grpo_tiny_cpu")
    def main(cfg):
        run_entry(MATH_RECIPE, cfg)

    if __name__ == "__main__":
        precheck_config_files(__file__, "grpo_tiny_cpu")   # the compose step (rlinf.runners.compose)
        main()
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

from rlinf.runners.compose import REPO_ROOT, precheck_config_files  # noqa: F401 - the entries' imports
from rlinf.scheduler.errors import ClusterError, OutOfMemoryError, SchedulerError, WorkerError
from rlinf.utils.typed_config import ConfigError


def run_entry(recipe, cfg: Any, print_fn: Callable = print) -> dict[str, float]:
    """Run ``recipe`` on ``cfg`` (:func:`~rlinf.runners.recipe.run_recipe`); print
    ``<recipe.summary_label>: first X% -> last Y% (+Z points)`` from the summary's
    ``val/first_<metric>`` / ``val/last_<metric>``; a :class:`ConfigError` or a
    :class:`~rlinf.scheduler.ClusterError` (the cluster cannot host the placement) or a missing set-up
    extra (:mod:`rlinf.runners.extras_check`) exits with
    code 2 and one line, a failed worker with code 1 and one line (details in a file), a full disk
    during a checkpoint with code 1 and one line saying where."""
    # lazy: checkpoint + the recipe layer (~0.13 s) only in run_main; entries import this for the precheck first
    from rlinf.runners.checkpoint import CheckpointDiskFull, disk_full_line
    from rlinf.runners.extras_check import missing_extras_line
    from rlinf.runners.recipe import run_recipe

    metric, label = recipe.summary_metric, recipe.summary_label
    missing = missing_extras_line(recipe, cfg)
    if missing is not None:  # an extra the run needs is not installed: the one command that installs it
        print(f"error: {missing}", file=sys.stderr)
        sys.exit(2)
    try:
        summary = run_recipe(recipe, cfg, print_fn)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    except ClusterError as exc:
        print(f"cluster error: {exc}", file=sys.stderr)
        sys.exit(2)
    except CheckpointDiskFull as exc:  # the disk is full: no error log either, one line
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except OSError as exc:  # a full disk met elsewhere (logs), or while shutting down after a failed save
        line = disk_full_line(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        sys.exit(1)
    except SchedulerError as exc:  # a worker raised or died: one line here, the rest in a file
        print(f"error: {one_line(exc)} (details: {write_error_log(cfg, exc)})", file=sys.stderr)
        sys.exit(1)
    first, last = summary.get(f"val/first_{metric}"), summary.get(f"val/last_{metric}")
    if first is not None:
        print_fn(f"[rlinf] {label}: first validation {100 * first:.1f}% -> last validation "
                 f"{100 * last:.1f}% ({100 * (last - first):+.1f} points)")
    elif summary.get(f"val/{metric}_reported") == 0.0:
        print_fn(f"[rlinf] {label}: not reported (the environment reports no success)")
    print_fn(f"[rlinf] done: {int(summary['steps'])} steps")
    return summary


def one_line(exc: BaseException) -> str:
    """A scheduler error in one line: who (group[rank], node, method) and the exception's last
    line (a worker's remote traceback ends with it); an out-of-memory error is its own one line
    (who, the cause, the memory figures, what to lower, the last peak)."""
    if isinstance(exc, OutOfMemoryError):
        return str(exc)
    if isinstance(exc, WorkerError):
        lines = [line for line in exc.remote_traceback.strip().splitlines() if line.strip()]
        return f"{exc.worker} on node {exc.node} raised in {exc.method}(): {lines[-1].strip() if lines else ''}"
    return " ".join(str(exc).split("\n")[0].split())


def write_error_log(cfg: Any, exc: BaseException) -> str:
    """Write ``exc`` with its remote traceback to ``<runner.logger.log_path>/error.log`` (a web
    run's: ``<save_path>/error.log``; a temporary file when the config names no log folder);
    returns the path."""
    folder = None
    try:
        folder = str(cfg["runner"]["logger"]["log_path"])
    except Exception:  # noqa: BLE001 - any config shape: try the web layout, then a temporary file
        try:
            folder = str(cfg["save_path"])
        except Exception:  # noqa: BLE001 - no log folder at all
            pass
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        if folder is None:
            raise OSError("no log folder")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "error.log")
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        fd, path = tempfile.mkstemp(prefix="rlinf_error_", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(text)
    return path
