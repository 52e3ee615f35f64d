"""What the Hydra entry points share: run the job, turn a config error into one line and exit
code 2, print the first / last evaluation figure."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from rlinf.utils.typed_config import ConfigError

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def precheck_config_files(entry_file: str, default_name: str, argv: list[str] | None = None) -> None:
    """Before Hydra starts: read the chosen config (``--config-name``, else ``default_name``) and
    the files its defaults pull in from the entry's ``config/`` folder and the shared
    ``config/``; a YAML slip (tab, unclosed bracket, duplicate key) exits with code 2 and one
    ``config error: <file>:<line>:<col>: ...`` line. Then the config is composed with the
    command line's overrides as Hydra will: a bad override (a typo'd key without ``+``, a missing
    config group option, unparsable syntax) is one ``config error:`` line too."""
    from rlinf.config.yaml_check import (ConfigFileError, check_config_files, config_name_from_argv,
                                         overrides_from_argv)

    argv = sys.argv[1:] if argv is None else argv
    name = config_name_from_argv(argv, default_name)
    config_dir = os.path.join(os.path.dirname(os.path.abspath(entry_file)), "config")
    try:
        check_config_files(config_dir, name, [os.path.join(REPO_ROOT, "config")])
    except ConfigFileError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    problem = hydra_compose_problem(config_dir, name, overrides_from_argv(argv))
    if problem:
        print(f"config error: {problem}", file=sys.stderr)
        sys.exit(2)


def hydra_compose_problem(config_dir: str, name: str, overrides: list[str]) -> str | None:
    """Compose config ``name`` with ``overrides`` as Hydra will; None when that works, else
    Hydra's complaint in one line (a bad override, a missing config group or file, a key that
    needs ``+`` to be added)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir, version_base="1.3"):
            compose(name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        lines = [line.strip() for line in str(exc).splitlines()
                 if line.strip() and not line.strip().startswith(("Set the environment variable HYDRA_FULL_ERROR",
                                                                  "See https://hydra.cc"))]
        text = " ".join(lines).split(" Config search path:")[0] or type(exc).__name__
        bad = _unparsable_override(overrides)
        return f"override {bad!r}: {text}" if bad else text
    return None


def _unparsable_override(overrides: list[str]) -> str | None:
    """The first override Hydra's grammar refuses, if any."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except HydraException:
            return override
    return None


def run_entry(run: Callable[[Any], dict[str, float]], cfg: Any, metric: str, label: str) -> dict[str, float]:
    """Call ``run(cfg)``; print ``label: first X% -> last Y% (+Z points)`` from the summary's
    ``val/first_<metric>`` / ``val/last_<metric>``; a :class:`ConfigError` or a
    :class:`~rlinf.scheduler.ClusterError` (the cluster cannot host the placement) exits with
    code 2 and one line."""
    from rlinf.scheduler.errors import ClusterError, SchedulerError

    try:
        summary = run(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    except ClusterError as exc:
        print(f"cluster error: {exc}", file=sys.stderr)
        sys.exit(2)
    except SchedulerError as exc:  # a worker raised or died: one line here, the rest in a file
        print(f"error: {one_line(exc)} (details: {write_error_log(cfg, exc)})", file=sys.stderr)
        sys.exit(1)
    first, last = summary.get(f"val/first_{metric}"), summary.get(f"val/last_{metric}")
    if first is not None:
        print(f"[rlinf] {label}: first validation {100 * first:.1f}% -> last validation "
              f"{100 * last:.1f}% ({100 * (last - first):+.1f} points)")
    print(f"[rlinf] done: {int(summary['steps'])} steps")
    return summary


def one_line(exc: BaseException) -> str:
    """A scheduler error in one line: who (group[rank], node, method) and the exception's last
    line (a worker's remote traceback ends with it)."""
    from rlinf.scheduler.errors import WorkerError

    if isinstance(exc, WorkerError):
        lines = [line for line in exc.remote_traceback.strip().splitlines() if line.strip()]
        return f"{exc.worker} on node {exc.node} raised in {exc.method}(): {lines[-1].strip() if lines else ''}"
    return " ".join(str(exc).split("\n")[0].split())


def write_error_log(cfg: Any, exc: BaseException) -> str:
    """Write ``exc`` with its remote traceback to ``<runner.logger.log_path>/error.log`` (or a
    temporary file when the config names no log folder); returns the path."""
    import tempfile
    import traceback

    folder = None
    try:
        folder = str(cfg["runner"]["logger"]["log_path"])
    except Exception:  # noqa: BLE001 - any config shape: fall back to a temporary file
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
