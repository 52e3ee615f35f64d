"""Where a run's checkpoints live, how they are saved (whole or not at all) and checked before a
resume.

Layout under ``<runner.output_dir>/<runner.experiment_name>/checkpoints/`` (a web run:
``<save_path>/checkpoints/``)::

    global_step_<N>/
        actor/                 sharded model + optimizer (DCP / DeepSpeed / Megatron), LR position, RNG per rank
        critic/                (math PPO) the critic's, likewise
        state_norm.pt          (embodied, rollout.normalize_states) the running state statistics
        manifest.json          every file above with its size and SHA-256 (:mod:`rlinf.runners.manifest`)
        trainer_state.json     step, data-loader position, metric history: written last

A save (:func:`save_step`) writes into ``global_step_<N>.partial/`` and renames it into place once
the manifest and ``trainer_state.json`` are written, so an earlier checkpoint is never touched and a
save cut short leaves no ``global_step_<N>`` folder. A full disk (ENOSPC / EDQUOT, in the driver or
in a worker) removes the partial folder and raises :class:`CheckpointDiskFull`, one line naming the
checkpoint, its folder and the free space of its mount.

``runner.resume_dir`` may name a ``global_step_<N>`` folder or the ``checkpoints`` folder (then the
latest complete step is taken). A checkpoint counts as complete once ``trainer_state.json`` exists;
:func:`resume_point` also checks the manifest (before Ray): a missing, truncated or altered file is
refused naming it. Every resume (``runner.resume_dir``, ``recover_mode``, the web run's
``runner.resume: auto``, and each runner's ``load_checkpoint``) goes through
:func:`check_checkpoint`, which also refuses a checkpoint without ``manifest.json`` (saved before
manifests existed) or holding a file its manifest does not list, naming the file and
``runner.resume_unverified``; with ``runner.resume_unverified: true`` it is loaded, said in one
start-up note.

Example:
    >>> import tempfile, os
    >>> root = tempfile.mkdtemp()
    >>> def workers(folder):   # what the worker groups write
    ...     os.makedirs(f"{folder}/actor"); _ = open(f"{folder}/actor/w.bin", "wb").write(b"w")
    >>> step_dir = save_step(root, 3, workers, {"step": 3})
    >>> sorted(os.listdir(step_dir)), resume_point(root) == (step_dir, 3)
    (['actor', 'manifest.json', 'trainer_state.json'], True)
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Callable

from rlinf.runners.manifest import DamagedCheckpoint, UnverifiedCheckpoint, verify_checkpoint, write_manifest
from rlinf.utils.typed_config import ConfigError

STATE_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


PARTIAL_SUFFIX = ".partial"
_REPLACED_SUFFIX = ".replaced"
#: errno values that mean "the disk is full" (no space; quota exhausted)
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded", f"[Errno {errno.ENOSPC}]",
                   f"[Errno {errno.EDQUOT}]")


class CheckpointDiskFull(RuntimeError):
    """The disk filled up while a checkpoint was saved; its partial folder was removed and the
    earlier checkpoints are untouched. The message is the one line the entry prints."""


def step_path(checkpoints_dir: str, step: int) -> str:
    """``checkpoints_dir/global_step_<step>`` (not created)."""
    return os.path.join(checkpoints_dir, f"global_step_{step}")


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` and flush it to the disk: every file the driver writes into a
    checkpoint goes through here."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_trainer_state(step_dir: str, state: dict) -> None:
    """Write the driver's state atomically (a crash leaves the previous checkpoint usable)."""
    tmp = os.path.join(step_dir, STATE_FILE + ".tmp")
    write_file(tmp, json.dumps(state).encode())
    os.replace(tmp, os.path.join(step_dir, STATE_FILE))


def read_trainer_state(step_dir: str) -> dict:
    with open(os.path.join(step_dir, STATE_FILE)) as f:
        return json.load(f)


def save_step(checkpoints_dir: str, step: int, write_parts: Callable[[str], None], state: dict) -> str:
    """Save checkpoint ``step`` whole or not at all; returns its ``global_step_<step>`` folder.

    ``write_parts(folder)`` writes the workers' and the driver's files into ``folder``
    (``global_step_<step>.partial``); then the manifest and ``state`` (``trainer_state.json``) are
    written and the folder is renamed into place (an older folder of the same step is replaced).
    On any failure the partial folder is removed; a full disk raises :class:`CheckpointDiskFull`."""
    final = step_path(checkpoints_dir, step)
    partial = final + PARTIAL_SUFFIX
    try:
        if os.path.exists(partial):  # a save of this step cut short earlier
            shutil.rmtree(partial)
        os.makedirs(partial)
        write_parts(partial)
        write_manifest(partial, lambda path, text: write_file(path, text.encode()))
        write_trainer_state(partial, state)
        _move_into_place(partial, final)
    except BaseException as exc:
        full = is_disk_full(exc)
        message = disk_full_message(step, final) if full else ""
        shutil.rmtree(partial, ignore_errors=True)
        if full:
            raise CheckpointDiskFull(message) from exc
        raise
    _remove_leftovers(checkpoints_dir)
    return final


def _move_into_place(partial: str, final: str) -> None:
    if os.path.exists(final):  # the same step saved before (a run resumed from an earlier one)
        old = final + _REPLACED_SUFFIX
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
        try:
            os.rename(partial, final)
        except OSError:
            os.rename(old, final)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(partial, final)
    fd = os.open(os.path.dirname(final) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself reaches the disk
    finally:
        os.close(fd)


def _remove_leftovers(checkpoints_dir: str) -> None:
    """Partial folders of saves cut short by a killed driver (only after a new checkpoint is whole)."""
    for name in os.listdir(checkpoints_dir):
        if name.startswith("global_step_") and name.endswith((PARTIAL_SUFFIX, _REPLACED_SUFFIX)):
            shutil.rmtree(os.path.join(checkpoints_dir, name), ignore_errors=True)


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it, or a worker's remote traceback in it) is ENOSPC / EDQUOT."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        for text in (getattr(exc, "remote_traceback", None), str(exc)):
            if isinstance(text, str) and any(mark in text for mark in _DISK_FULL_TEXT):
                return True
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "survivor_error", None)
    return False


def disk_full_line(exc: BaseException) -> str | None:
    """What to say when ``exc`` ends a run on a full disk: the :class:`CheckpointDiskFull` message it
    hides (an error raised while the run shut down after a failed save), else ``disk full: <exc>``;
    None when ``exc`` is not about a full disk."""
    if not is_disk_full(exc):
        return None
    seen, cur = set(), exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, CheckpointDiskFull):
            return str(cur)
        cur = cur.__context__ or cur.__cause__
    return "disk full: " + " ".join(str(exc).split())


def mount_of(path: str) -> str:
    """The mount point holding ``path`` (its nearest existing ancestor)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def disk_full_message(step: int, target: str) -> str:
    """``disk full while saving checkpoint global_step_<N> to <target> (<free> free on <mount>) ...``."""
    mount = mount_of(target)
    try:
        free = f"{_human(shutil.disk_usage(mount).free)} free"
    except OSError:
        free = "free space unknown"
    return (f"disk full while saving checkpoint global_step_{step} to {target} ({free} on {mount}); "
            "the partial checkpoint was removed, earlier checkpoints are untouched")


def _human(n: float) -> str:
    """``512 B``, ``3.0 KiB``, ``1.5 GiB``."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n, i = n / 1024, i + 1
    return f"{int(n)} B" if i == 0 else f"{n:.1f} {units[i]}"


def complete_steps(folder: str) -> list[tuple[int, str]]:
    """``(step, global_step_<N> folder)`` of every complete checkpoint under ``folder``, latest first."""
    steps = []
    for name in os.listdir(folder):
        match = _STEP_DIR.match(name)
        if match and os.path.isfile(os.path.join(folder, name, STATE_FILE)):
            steps.append((int(match.group(1)), os.path.join(folder, name)))
    return sorted(steps, reverse=True)


def resolve_resume_dir(path: str) -> str:
    """The ``global_step_<N>`` folder to resume from; raises :class:`ConfigError` on
    ``runner.resume_dir`` when there is none."""
    key = "runner.resume_dir"
    if not os.path.isdir(path):
        raise ConfigError(key, f"{path!r} is not a folder")
    if os.path.isfile(os.path.join(path, STATE_FILE)):
        return path
    steps = complete_steps(path)
    if not steps:
        raise ConfigError(key, f"{path!r} holds no complete checkpoint (a global_step_<N> folder "
                               f"with {STATE_FILE})")
    return steps[0][1]


def resume_point(path: str, resume_unverified: bool = False,
                 warn: Callable[[str], None] | None = None) -> tuple[str, int]:
    """``(global_step_<N> folder, its step)`` of ``runner.resume_dir``, checked from the file
    system alone (before any worker starts) by :func:`check_checkpoint`: a missing folder, no
    complete checkpoint, a ``trainer_state.json`` that is not valid JSON or has no integer
    ``step``, no ``actor/`` folder beside it, or a file its manifest lists missing, truncated or
    altered raise :class:`ConfigError` naming ``runner.resume_dir``; so does a checkpoint without
    a manifest or with a file it does not list, unless ``resume_unverified``
    (``runner.resume_unverified``); ``warn`` (default: print) then gets the start-up note."""
    step_dir = resolve_resume_dir(path)
    return step_dir, check_checkpoint(step_dir, resume_unverified, warn)


_WARNED: set[str] = set()
#: how a refusal of a damaged checkpoint ends
DAMAGED_HINT = "the checkpoint is damaged: resume from an earlier one"
#: the key that loads a checkpoint its manifest does not vouch for
UNVERIFIED_KEY = "runner.resume_unverified"


class UnverifiedCheckpointError(ConfigError):
    """A resume refused because no manifest vouches for a file of the checkpoint (see
    :func:`check_checkpoint`); unlike a damaged checkpoint, ``recover_mode`` does not skip it for
    an earlier one (an older run's checkpoints would all be skipped and the run start afresh)."""


def check_checkpoint(step_dir: str, resume_unverified: bool = False, warn: Callable[[str], None] | None = None,
                     key: str = "runner.resume_dir") -> int:
    """The step of complete checkpoint ``step_dir``: the one check every resume makes.

    ``trainer_state.json`` readable with an integer ``step``, an ``actor/`` folder, and
    :func:`~rlinf.runners.manifest.verify_checkpoint`: a file the manifest lists missing,
    truncated or altered raises :class:`ConfigError` on ``key``; no ``manifest.json``, or a file
    it does not list (its bookkeeping, ``manifest.json`` and ``trainer_state.json`` at the top,
    aside), raises :class:`UnverifiedCheckpointError` on ``key`` naming the file and
    ``runner.resume_unverified`` unless ``resume_unverified`` is true; then ``warn`` (default:
    print) gets one start-up note per folder and process.

    Example:
        >>> import tempfile
        >>> step_dir = os.path.join(tempfile.mkdtemp(), "global_step_2"); os.makedirs(f"{step_dir}/actor")
        >>> write_trainer_state(step_dir, {"step": 2})
        >>> check_checkpoint(step_dir)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rlinf.runners.checkpoint.UnverifiedCheckpointError: runner.resume_dir: .../global_step_2/manifest.json is missing: ...; set runner.resume_unverified: true to load it anyway
        >>> check_checkpoint(step_dir, resume_unverified=True, warn=lambda line: None)
        2
    """  # noqa: E501 - a doctest's expected output is one line
    state_file = os.path.join(step_dir, STATE_FILE)
    damaged = DAMAGED_HINT
    try:
        state = read_trainer_state(step_dir)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(key, f"{state_file} is not valid JSON ({exc}); {damaged}") from None
    step = state.get("step") if isinstance(state, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ConfigError(key, f"{state_file} has no step count (expected an integer 'step' >= 0, found {step!r})")
    if not os.path.isdir(os.path.join(step_dir, "actor")):
        raise ConfigError(key, f"{step_dir!r} has {STATE_FILE} but no actor/ folder: {damaged}")
    try:
        verify_checkpoint(step_dir)
    except DamagedCheckpoint as exc:
        raise ConfigError(key, f"{exc}; {damaged}") from None
    except UnverifiedCheckpoint as exc:
        if not resume_unverified:
            raise UnverifiedCheckpointError(key, f"{exc}; set {UNVERIFIED_KEY}: true to load it anyway") from None
        if step_dir not in _WARNED:
            _WARNED.add(step_dir)
            (warn or print)(f"[rlinf] note: {UNVERIFIED_KEY}: true: loading {step_dir} unverified ({exc})")
    return step
