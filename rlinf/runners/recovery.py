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

Each recipe says where its checkpoints are and how a restart resumes
(:meth:`~rlinf.runners.recipe.Recipe.recovery`, :meth:`~rlinf.runners.recipe.Recipe.with_resume`);
:func:`~rlinf.runners.recipe.run_recipe` calls :func:`run_with_recovery`.

Example:
    >>> import tempfile
    >>> latest_checkpoint(tempfile.mkdtemp()) is None
    True
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlinf.runners import checkpoint as ckpt
from rlinf.scheduler.errors import ClusterError, SchedulerError
from rlinf.utils.typed_config import ConfigError


@dataclass(frozen=True)
class Recovery:
    """``runner.recover_mode`` as a recipe reads it from the raw config (before the full parse).

    Attributes:
        mode: disabled, auto, fault or resume.
        retries: restarts allowed after failures.
        checkpoints: the folder holding this run's ``global_step_<N>`` checkpoints.
        explicit_resume: the user named a checkpoint to resume from (it wins over auto).
    """

    mode: str
    retries: int
    checkpoints: str
    explicit_resume: bool = False


def _plain(raw: Any) -> dict:
    from rlinf.config.root import resolve_hydra

    return copy.deepcopy(raw) if isinstance(raw, dict) else resolve_hydra(raw)


def runner_recovery(raw: dict) -> Recovery:
    """:class:`Recovery` of a run whose ``runner:`` section is
    :class:`~rlinf.config.runner.RunnerConfig` (checkpoints under
    ``<output_dir>/<experiment_name>/checkpoints``; ``runner.resume_dir`` names one by hand)."""
    from rlinf.config.runner import RunnerConfig
    from rlinf.utils.typed_config import parse_section

    runner = parse_section(RunnerConfig, raw.get("runner"), "runner")
    return Recovery(runner.recover_mode, runner.recover_retries,
                    os.path.join(runner.output_dir, runner.experiment_name, "checkpoints"),
                    explicit_resume=bool(runner.resume_dir))


def latest_checkpoint(folder: str) -> str | None:
    """The latest complete ``global_step_<N>`` folder under ``folder``, or None."""
    if not os.path.isdir(folder):
        return None
    try:
        return ckpt.resolve_resume_dir(folder)
    except ConfigError:
        return None


def with_resume_dir(raw: dict, path: str | None) -> dict:
    """A copy of ``raw`` with ``runner.resume_dir: path``."""
    out = copy.deepcopy(raw)
    out.setdefault("runner", {})["resume_dir"] = path
    return out


def run_with_recovery(recipe, raw: Any, run_once: Callable[[dict], dict], print_fn=print) -> dict:
    """Run ``run_once(plain_raw)`` under ``runner.recover_mode`` as ``recipe`` reads it
    (:meth:`~rlinf.runners.recipe.Recipe.recovery`); see the module docstring."""
    plain = _plain(raw)
    rec = recipe.recovery(plain)
    mode = rec.mode
    if mode == "disabled":
        return run_once(plain)
    if mode in ("auto", "resume") and not rec.explicit_resume:
        found = latest_checkpoint(rec.checkpoints)
        if found is None and mode == "resume":
            raise ConfigError("runner.recover_mode", f"resume: no complete checkpoint in {rec.checkpoints}")
        if found is not None:
            print_fn(f"[rlinf] recover_mode {mode}: resuming from {found}")
            plain = recipe.with_resume(plain, found)
    attempts = 0
    while True:
        try:
            return run_once(plain)
        except (ClusterError, ConfigError):
            raise
        except SchedulerError as exc:
            if mode not in ("auto", "fault") or attempts >= rec.retries:
                raise
            attempts += 1
            found = latest_checkpoint(rec.checkpoints)
            where = f"from {found}" if found else "from the start (no complete checkpoint yet)"
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            print_fn(f"[rlinf] recover_mode {mode}: {first}; restarting {where} "
                     f"(attempt {attempts} of {rec.retries})")
            plain = recipe.with_resume(plain, found)
