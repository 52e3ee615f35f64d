"""``runner.recover_mode`` (AReaL's): resume and restart a run from its last complete checkpoint.

* ``disabled``: a failure ends the run (``runner.resume_dir`` still resumes by hand).
* ``resume``: start from the latest complete checkpoint of this run's folder
  (``<output_dir>/<experiment_name>/checkpoints``; an explicit ``runner.resume_dir`` wins);
  refused before Ray when there is none.
* ``fault``: when a worker dies or raises, the groups are shut down and the run starts again from
  its latest complete checkpoint (from scratch when there is none yet), up to
  ``runner.recover_retries`` times.
* ``auto``: both: a run that finds a checkpoint of its own folder resumes from it (so rerunning
  the same command after the driver was killed continues), and failures restart as with fault.

A checkpoint counts only once its ``trainer_state.json`` is written (last), so a checkpoint cut
short by the failure is never loaded. Resuming truncates ``metrics.jsonl`` and tensorboard after
the checkpointed step, so the metrics continue from there without duplicates. Checkpoints can
also be taken by wall time (``runner.save_interval_secs``), which bounds the work a failure loses.

Example (the entries call it)::

    run_with_recovery(raw, run_once=_run_math_once, print_fn=print)   # doctest: +SKIP
"""

from __future__ import annotations

import copy
import os
from typing import Any, Callable

from rlinf.runners import checkpoint as ckpt
from rlinf.scheduler.errors import ClusterError, SchedulerError
from rlinf.utils.typed_config import ConfigError


def _plain(raw: Any) -> dict:
    if isinstance(raw, dict):
        return copy.deepcopy(raw)
    from omegaconf import OmegaConf

    from rlinf.config.resolvers import register_resolvers

    register_resolvers()
    return OmegaConf.to_container(raw, resolve=True)


def _runner(raw: dict):
    from rlinf.config.runner import RunnerConfig
    from rlinf.utils.typed_config import parse_section

    return parse_section(RunnerConfig, raw.get("runner"), "runner")


def latest_checkpoint(runner) -> str | None:
    """The latest complete ``global_step_<N>`` folder of this run, or None."""
    folder = os.path.join(runner.output_dir, runner.experiment_name, "checkpoints")
    if not os.path.isdir(folder):
        return None
    try:
        return ckpt.resolve_resume_dir(folder)
    except ConfigError:
        return None


def _with_resume(raw: dict, path: str | None) -> dict:
    out = copy.deepcopy(raw)
    out.setdefault("runner", {})["resume_dir"] = path
    return out


def run_with_recovery(raw: Any, run_once: Callable[[Any, Callable], dict], print_fn=print) -> dict:
    """Run ``run_once(raw, print_fn)`` under ``runner.recover_mode`` (see the module docstring)."""
    plain = _plain(raw)
    runner = _runner(plain)
    mode = runner.recover_mode
    if mode == "disabled":
        return run_once(raw, print_fn)
    if mode in ("auto", "resume") and not runner.resume_dir:
        found = latest_checkpoint(runner)
        if found is None and mode == "resume":
            raise ConfigError("runner.recover_mode", f"resume: no complete checkpoint in "
                                                     f"{os.path.join(runner.output_dir, runner.experiment_name, 'checkpoints')}")
        if found is not None:
            print_fn(f"[rlinf] recover_mode {mode}: resuming from {found}")
            plain = _with_resume(plain, found)
    attempts = 0
    while True:
        try:
            return run_once(plain, print_fn)
        except (ClusterError, ConfigError):
            raise
        except SchedulerError as exc:
            if mode not in ("auto", "fault") or attempts >= runner.recover_retries:
                raise
            attempts += 1
            found = latest_checkpoint(runner)
            where = f"from {found}" if found else "from the start (no complete checkpoint yet)"
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            print_fn(f"[rlinf] recover_mode {mode}: {first}; restarting {where} "
                     f"(attempt {attempts} of {runner.recover_retries})")
            plain = _with_resume(plain, found)
