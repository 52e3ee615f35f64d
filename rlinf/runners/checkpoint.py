"""Where a run's checkpoints live and what the driver saves next to the workers' state.

Layout under ``<runner.output_dir>/<runner.experiment_name>/checkpoints/``::

    global_step_<N>/
        actor/                 sharded model + optimizer (DCP), LR position, RNG per rank
        trainer_state.json     step, data-loader position, metric history

``runner.resume_dir`` may name a ``global_step_<N>`` folder or the ``checkpoints`` folder (then the
latest complete step is taken). A checkpoint counts as complete once ``trainer_state.json`` exists;
it is written last.

Example:
    >>> import tempfile, os
    >>> root = tempfile.mkdtemp()
    >>> step_dir = step_folder(root, 3)
    >>> write_trainer_state(step_dir, {"step": 3})
    >>> resolve_resume_dir(root) == step_dir, read_trainer_state(step_dir)["step"]
    (True, 3)
"""

from __future__ import annotations

import json
import os
import re

from rlinf.utils.typed_config import ConfigError

STATE_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def step_folder(checkpoints_dir: str, step: int) -> str:
    """``checkpoints_dir/global_step_<step>`` (created)."""
    path = os.path.join(checkpoints_dir, f"global_step_{step}")
    os.makedirs(path, exist_ok=True)
    return path


def write_trainer_state(step_dir: str, state: dict) -> None:
    """Write the driver's state atomically (a crash leaves the previous checkpoint usable)."""
    tmp = os.path.join(step_dir, STATE_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, os.path.join(step_dir, STATE_FILE))


def read_trainer_state(step_dir: str) -> dict:
    with open(os.path.join(step_dir, STATE_FILE)) as f:
        return json.load(f)


def resolve_resume_dir(path: str) -> str:
    """The ``global_step_<N>`` folder to resume from; raises :class:`ConfigError` on
    ``runner.resume_dir`` when there is none."""
    key = "runner.resume_dir"
    if not os.path.isdir(path):
        raise ConfigError(key, f"{path!r} is not a folder")
    if os.path.isfile(os.path.join(path, STATE_FILE)):
        return path
    steps = []
    for name in os.listdir(path):
        match = _STEP_DIR.match(name)
        if match and os.path.isfile(os.path.join(path, name, STATE_FILE)):
            steps.append((int(match.group(1)), name))
    if not steps:
        raise ConfigError(key, f"{path!r} holds no complete checkpoint (a global_step_<N> folder "
                               f"with {STATE_FILE})")
    return os.path.join(path, max(steps)[1])


def resume_point(path: str) -> tuple[str, int]:
    """``(global_step_<N> folder, its step)`` of ``runner.resume_dir``, checked from the file
    system alone (before any worker starts): a missing folder, no complete checkpoint, a
    ``trainer_state.json`` that is not valid JSON or has no integer ``step``, or no ``actor/``
    folder beside it raise
    :class:`ConfigError` naming ``runner.resume_dir``."""
    step_dir = resolve_resume_dir(path)
    state_file = os.path.join(step_dir, STATE_FILE)
    try:
        state = read_trainer_state(step_dir)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError("runner.resume_dir", f"{state_file} is not valid JSON ({exc}); the "
                                               "checkpoint is damaged: resume from an earlier one") from None
    step = state.get("step") if isinstance(state, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ConfigError("runner.resume_dir", f"{state_file} has no step count (expected an integer "
                                               f"'step' >= 0, found {step!r})")
    if not os.path.isdir(os.path.join(step_dir, "actor")):
        raise ConfigError("runner.resume_dir", f"{step_dir!r} has {STATE_FILE} but no actor/ folder: the "
                                               "checkpoint is damaged; resume from an earlier one")
    return step_dir, step
