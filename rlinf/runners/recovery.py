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

A checkpoint counts only once its ``trainer_state.json`` is written (last) and its folder renamed
into place, so a checkpoint cut short by the failure is never loaded. Every automatic resume
checks the checkpoint's manifest first (before any worker starts): a damaged latest checkpoint (a file missing,
truncated or altered) is skipped for the previous one that checks out, said in one line. A
checkpoint no manifest vouches for (none, or a file it does not list) is refused, naming the file
and ``runner.resume_unverified``, rather than skipped (skipping would start an older run's folder
afresh); ``runner.resume_unverified: true`` loads it. A ``runner.resume_dir`` named by hand is
never replaced: a damaged one is refused.

Resuming truncates ``metrics.jsonl`` and tensorboard after the checkpointed step, so the metrics
continue from there without duplicates. Checkpoints can also be taken by wall time
(``runner.save_interval_secs``), which bounds the work a failure loses.

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

from rlinf.config.root import resolve_hydra
from rlinf.config.runner import RunnerConfig
from rlinf.runners import checkpoint as ckpt
from rlinf.scheduler.errors import ClusterError, SchedulerError
from rlinf.utils.typed_config import ConfigError, parse_section


@dataclass(frozen=True)
class Recovery:
    """``runner.recover_mode`` as a recipe reads it from the raw config (before the full parse).

    Attributes:
        mode: disabled, auto, fault or resume.
        retries: restarts allowed after failures.
        checkpoints: the folder holding this run's ``global_step_<N>`` checkpoints.
        explicit_resume: the user named a checkpoint to resume from (it wins over auto).
        resume_unverified: ``runner.resume_unverified``: load a checkpoint without a manifest
            or with files it does not list (see :func:`~rlinf.runners.checkpoint.check_checkpoint`).
    """

    mode: str
    retries: int
    checkpoints: str
    explicit_resume: bool = False
    resume_unverified: bool = False


def _plain(raw: Any) -> dict:
    return copy.deepcopy(raw) if isinstance(raw, dict) else resolve_hydra(raw)


def runner_recovery(raw: dict, runner_cls: type | None = None) -> Recovery:
    """:class:`Recovery` of a run whose ``runner:`` section is
    :class:`~rlinf.config.runner.RunnerConfig` (or ``runner_cls``, a subclass of it; checkpoints
    under ``<output_dir>/<experiment_name>/checkpoints``; ``runner.resume_dir`` names one by hand)."""
    runner = parse_section(runner_cls or RunnerConfig, raw.get("runner"), "runner")
    return Recovery(runner.recover_mode, runner.recover_retries,
                    os.path.join(runner.output_dir, runner.experiment_name, "checkpoints"),
                    explicit_resume=bool(runner.resume_dir), resume_unverified=runner.resume_unverified)


def latest_checkpoint(folder: str, say: Callable[[str], None] | None = None,
                      label: str = "recover_mode", resume_unverified: bool = False,
                      key: str = "runner.recover_mode") -> str | None:
    """The latest complete checkpoint under ``folder`` that passes its checks
    (:func:`~rlinf.runners.checkpoint.check_checkpoint`: trainer state, manifest), or None. Damaged
    ones are skipped for the one before; ``say`` gets one line about them (once per damaged folder
    and process, so the checks of a later attempt stay quiet), starting with ``[rlinf] <label>:``.

    Raises:
        UnverifiedCheckpointError: on ``key``: the latest complete checkpoint has no manifest or a
            file it does not list, and not ``resume_unverified`` (the start-up note then goes to
            ``say``).
    """
    if not os.path.isdir(folder):
        return None
    skipped = []
    found = None
    for _, step_dir in ckpt.complete_steps(folder):
        try:
            ckpt.check_checkpoint(step_dir, resume_unverified, say, key=key)
        except ckpt.UnverifiedCheckpointError:
            raise
        except ConfigError as exc:
            why = str(exc).removeprefix(f"{key}: ")
            skipped.append((step_dir, why.replace(f"; {ckpt.DAMAGED_HINT}", "").replace(f": {ckpt.DAMAGED_HINT}", "")))
            continue
        found = step_dir
        break
    fresh = [(d, why) for d, why in skipped if d not in _REPORTED]
    if fresh and say is not None:
        _REPORTED.update(d for d, _ in fresh)
        where = f"resuming from {found} instead" if found else "no earlier complete checkpoint"
        more = f" (and {len(fresh) - 1} more damaged checkpoint(s) skipped)" if len(fresh) > 1 else ""
        say(f"[rlinf] {label}: {os.path.basename(fresh[0][0])} is damaged ({fresh[0][1]}){more}; "
            f"{where}")
    return found


#: damaged checkpoints already reported by :func:`latest_checkpoint` in this process
_REPORTED: set[str] = set()


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
        found = latest_checkpoint(rec.checkpoints, print_fn, f"recover_mode {mode}", rec.resume_unverified)
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
            found = latest_checkpoint(rec.checkpoints, print_fn, f"recover_mode {mode}", rec.resume_unverified)
            where = f"from {found}" if found else "from the start (no complete checkpoint yet)"
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            print_fn(f"[rlinf] recover_mode {mode}: {first}; restarting {where} "
                     f"(attempt {attempts} of {rec.retries})")
            plain = recipe.with_resume(plain, found)
