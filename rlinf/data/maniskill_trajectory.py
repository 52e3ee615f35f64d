"""Demonstrations in ManiSkill's trajectory format: write them (:class:`TrajectoryWriter`) and load
them as transitions for an off-policy buffer (:func:`load_demos`), ours and ManiSkill's alike.

The format (ManiSkill's ``RecordEpisode`` wrapper): an HDF5 file with one group ``traj_{i}`` per
episode holding ``obs`` ``[T+1, D]`` (flat state observations; a group for dict observations),
``actions`` ``[T, A]`` float32, ``terminated`` / ``truncated`` / ``success`` ``[T]`` bool, optional
``fail`` and ``rewards`` ``[T]``, and ``env_states`` (a group of nested groups, each leaf
``[T+1, ...]``, as ``env.get_state_dict()`` returns); and a JSON sidecar (same name, ``.json``)
with ``env_info`` (``env_id``, ``env_kwargs``, ``max_episode_steps``), optional ``source_type`` /
``source_desc``, and ``episodes``: one entry per group (``episode_id``, ``episode_seed``,
``reset_kwargs``, ``control_mode``, ``elapsed_steps``, ``success``).

Transitions: step ``t`` of an episode gives ``obs[t]``, ``actions[t]``, the reward (``rewards[t]``;
files without rewards, such as ManiSkill's raw demos, get ``success[t]`` as a sparse 0/1 reward),
``obs[t+1]``, ``terminated[t]`` and ``truncated[t]``; ``done`` is either.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "demo.h5")
    >>> with TrajectoryWriter(path, env_id="Toy-v0", env_kwargs={"obs_mode": "state"}, max_episode_steps=3) as w:
    ...     _ = w.add_episode(obs=np.zeros((3, 2)), actions=np.ones((2, 1)), terminated=[False, True],
    ...                       truncated=[False, False], success=[False, True], rewards=[0.0, 1.0], seed=5)
    >>> demos = load_demos(path, obs_dim=2)
    >>> len(demos), demos.num_episodes, demos.reward.tolist(), demos.done.tolist()
    (2, 1, [0.0, 1.0], [False, True])
    >>> load_demos(path, obs_dim=42)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rlinf.data.maniskill_trajectory.DemoFileError: demo file .../demo.h5: observations have 2 numbers, the env gives 42 (another observation space or task)
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf.utils.atomic_file import atomic_write

__all__ = ["DemoFileError", "DemoTransitions", "TrajectoryWriter", "json_path_for", "load_demos"]


class DemoFileError(ValueError):
    """A demonstration file is missing, damaged or does not fit the env; the message is one line
    naming the file."""


def json_path_for(h5_path: str | os.PathLike) -> Path:
    """The JSON sidecar beside an HDF5 trajectory file (``x.h5`` -> ``x.json``)."""
    return Path(h5_path).with_suffix(".json")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _write_group(group: Any, name: str, data: Any) -> None:
    """Nested dict of ``[T, ...]`` arrays -> nested HDF5 groups (ManiSkill's layout)."""
    if isinstance(data, Mapping):
        sub = group.create_group(name, track_order=True)
        for key, value in data.items():
            _write_group(sub, key, value)
    else:
        group.create_dataset(name, data=np.asarray(data))


class TrajectoryWriter:
    """Writes episodes into a ManiSkill trajectory file pair; both files appear whole when the
    writer closes (written under hidden temporary names, then renamed).

    Args:
        h5_path: the ``.h5`` file; the JSON goes beside it (:func:`json_path_for`).
        env_id, env_kwargs, max_episode_steps: ``env_info`` (what ``gym.make`` needs to rebuild
            the env).
        source_type, source_desc: how the actions were made (ManiSkill uses ``motionplanning``,
            ``human``, ``rl``).
    """

    def __init__(self, h5_path: str | os.PathLike, *, env_id: str, env_kwargs: Mapping[str, Any] | None = None,
                 max_episode_steps: int | None = None, source_type: str | None = None,
                 source_desc: str | None = None):
        # lazy: h5py (embodied extra, via mani-skill) only for demo files
        import h5py

        self.h5_path = Path(h5_path)
        self.json_path = json_path_for(self.h5_path)
        self.h5_path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp_h5 = self.h5_path.with_name(f".{self.h5_path.name}.tmp{os.getpid()}")
        self._file = h5py.File(self._tmp_h5, "w", track_order=True)
        self._json: dict[str, Any] = {
            "env_info": {"env_id": env_id, "env_kwargs": _jsonable(dict(env_kwargs or {})),
                         "max_episode_steps": max_episode_steps},
            "episodes": []}
        if source_type is not None:
            self._json["source_type"] = source_type
        if source_desc is not None:
            self._json["source_desc"] = source_desc
        self._closed = False

    @property
    def num_episodes(self) -> int:
        return len(self._json["episodes"])

    def add_episode(self, *, obs: Any, actions: Any, terminated: Sequence[bool], truncated: Sequence[bool],
                    success: Sequence[bool], rewards: Sequence[float] | None = None,
                    env_states: Mapping[str, Any] | None = None, seed: int | None = None,
                    control_mode: str | None = None, fail: Sequence[bool] | None = None) -> int:
        """Append one episode of ``T`` steps; returns its id.

        Args:
            obs: ``[T+1, D]`` (first observation included), or a nested dict of such arrays.
            actions: ``[T, A]``.
            terminated, truncated, success: ``[T]``.
            rewards, fail: ``[T]`` or None (not written).
            env_states: nested dict of ``[T+1, ...]`` arrays or None.
            seed: the reset seed (``episode_seed`` and ``reset_kwargs``).
            control_mode: recorded per episode.
        """
        actions = np.asarray(actions, dtype=np.float32)
        steps = int(actions.shape[0])
        first = obs
        while isinstance(first, Mapping):
            first = next(iter(first.values()))
        if int(np.asarray(first).shape[0]) != steps + 1:
            rows = np.asarray(first).shape[0]
            raise ValueError(f"obs needs {steps + 1} rows (T + 1) for {steps} actions, got {rows}")
        for name, values in (("terminated", terminated), ("truncated", truncated), ("success", success)):
            if len(values) != steps:
                raise ValueError(f"{name} needs {steps} entries, got {len(values)}")
        episode_id = self.num_episodes
        group = self._file.create_group(f"traj_{episode_id}", track_order=True)
        if isinstance(obs, Mapping):
            _write_group(group, "obs", obs)
        else:
            group.create_dataset("obs", data=np.asarray(obs, dtype=np.float32))
        group.create_dataset("actions", data=actions, dtype=np.float32)
        group.create_dataset("terminated", data=np.asarray(terminated, dtype=bool))
        group.create_dataset("truncated", data=np.asarray(truncated, dtype=bool))
        group.create_dataset("success", data=np.asarray(success, dtype=bool))
        if fail is not None:
            group.create_dataset("fail", data=np.asarray(fail, dtype=bool))
        if env_states is not None:
            _write_group(group, "env_states", env_states)
        if rewards is not None:
            group.create_dataset("rewards", data=np.asarray(rewards, dtype=np.float32))
        entry: dict[str, Any] = {"episode_id": episode_id, "episode_seed": seed,
                                 "reset_kwargs": {"seed": seed, "options": {}} if seed is not None else {},
                                 "control_mode": control_mode, "elapsed_steps": steps,
                                 "success": bool(np.asarray(success, dtype=bool)[-1]) if steps else False}
        if fail is not None:
            entry["fail"] = bool(np.asarray(fail, dtype=bool)[-1]) if steps else False
        self._json["episodes"].append(entry)
        return episode_id

    def close(self) -> None:
        """Finish both files (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._file.close()
        os.replace(self._tmp_h5, self.h5_path)
        text = json.dumps(self._json, indent=2).encode()
        atomic_write(self.json_path, lambda f: f.write(text))

    def abort(self) -> None:
        """Drop what was written (no files appear)."""
        if not self._closed:
            self._closed = True
            self._file.close()
            self._tmp_h5.unlink(missing_ok=True)

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


@dataclass
class DemoTransitions:
    """Transitions of all loaded episodes, in episode order (``N`` rows).

    Attributes:
        obs, next_obs: ``[N, D]`` float32.
        action: ``[N, A]`` float32.
        reward: ``[N]`` float32.
        terminated, truncated, done: ``[N]`` bool (``done = terminated | truncated``; a truncation
            still bootstraps).
        num_episodes: episodes the rows came from.
        env_info: the JSON sidecar's ``env_info`` (empty without a sidecar).
    """

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    num_episodes: int
    env_info: dict

    @property
    def done(self) -> torch.Tensor:
        return self.terminated | self.truncated

    def __len__(self) -> int:
        return int(self.obs.shape[0])

    def as_dict(self) -> dict[str, torch.Tensor]:
        """The per-row fields by name (a replay buffer's ``add`` takes such a dict)."""
        return {"obs": self.obs, "action": self.action, "reward": self.reward, "next_obs": self.next_obs,
                "terminated": self.terminated, "truncated": self.truncated, "done": self.done}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _read_json(json_path: Path, where: str) -> dict:
    try:
        data = json.loads(json_path.read_text())
    except json.JSONDecodeError as exc:
        raise DemoFileError(f"demo file {json_path}: not valid JSON ({_first_line(exc)}); truncated?") from None
    if not isinstance(data, dict) or not isinstance(data.get("episodes"), list):
        raise DemoFileError(f"demo file {json_path}: no `episodes` list (not a ManiSkill trajectory sidecar "
                            f"of {where})")
    return data


def _episode_arrays(name: str, group: Any, path: Path) -> dict[str, np.ndarray]:
    # lazy: h5py (embodied extra, via mani-skill) only for demo files
    import h5py

    if "obs" not in group:
        raise DemoFileError(f"demo file {path}: {name} has no `obs` (a raw demo recorded without observations; "
                            "replay it with `python -m mani_skill.trajectory.replay_trajectory --obs-mode state` "
                            "first)")
    if not isinstance(group["obs"], h5py.Dataset):
        raise DemoFileError(f"demo file {path}: {name}/obs is a group (dict observations); only flat state "
                            "observations (obs_mode state) load as transitions")
    for key in ("actions", "terminated", "truncated"):
        if key not in group:
            raise DemoFileError(f"demo file {path}: {name} has no `{key}`")
    try:
        out = {"obs": np.asarray(group["obs"][()], dtype=np.float32),
               "actions": np.asarray(group["actions"][()], dtype=np.float32),
               "terminated": np.asarray(group["terminated"][()], dtype=bool),
               "truncated": np.asarray(group["truncated"][()], dtype=bool)}
        if "rewards" in group:
            out["rewards"] = np.asarray(group["rewards"][()], dtype=np.float32)
        elif "success" in group:
            out["rewards"] = np.asarray(group["success"][()], dtype=np.float32)
        else:
            raise DemoFileError(f"demo file {path}: {name} has neither `rewards` nor `success`")
    except (OSError, KeyError) as exc:
        raise DemoFileError(f"demo file {path}: {name} cannot be read ({_first_line(exc)}); truncated?") from None
    steps = out["actions"].shape[0]
    if out["obs"].ndim != 2 or out["obs"].shape[0] != steps + 1:
        raise DemoFileError(f"demo file {path}: {name}/obs has shape {list(out['obs'].shape)}, expected "
                            f"[{steps + 1}, D] for {steps} actions")
    for key in ("terminated", "truncated", "rewards"):
        if out[key].shape != (steps,):
            raise DemoFileError(f"demo file {path}: {name}/{key} has shape {list(out[key].shape)}, expected [{steps}]")
    return out


def load_demos(h5_path: str | os.PathLike, json_path: str | os.PathLike | None = None, *,
               obs_dim: int | None = None, action_dim: int | None = None, env_id: str | None = None,
               control_mode: str | None = None, only_success: bool = False,
               max_episodes: int | None = None) -> DemoTransitions:
    """Read a ManiSkill trajectory file (ours or ManiSkill's) as transitions.

    Args:
        h5_path: the ``.h5`` file.
        json_path: its JSON sidecar; None = beside it (``x.json``), read when present.
        obs_dim, action_dim: what the env gives / takes; a file of another size is refused.
        env_id, control_mode: refuse a sidecar naming another task or controller.
        only_success: keep only episodes whose last step succeeded.
        max_episodes: keep at most this many episodes (file order).

    Raises:
        DemoFileError: one line naming the file: missing, damaged or truncated, no episodes, or not
            fitting the env.
    """
    # lazy: h5py (embodied extra, via mani-skill) only for demo files
    import h5py

    path = Path(h5_path)
    if not path.is_file():
        raise DemoFileError(f"demo file {path} does not exist")
    side = Path(json_path) if json_path is not None else json_path_for(path)
    if json_path is not None and not side.is_file():
        raise DemoFileError(f"demo file {side} (the JSON sidecar of {path.name}) does not exist")
    meta = _read_json(side, path.name) if side.is_file() else {}
    env_info = dict(meta.get("env_info") or {})
    if env_id is not None and env_info.get("env_id") not in (None, env_id):
        raise DemoFileError(f"demo file {side}: recorded on {env_info['env_id']}, the env is {env_id}")
    episodes_meta = {int(e["episode_id"]): e for e in meta.get("episodes", []) if "episode_id" in e}
    if control_mode is not None:
        modes = {e.get("control_mode") for e in episodes_meta.values()} - {None}
        if modes and modes != {control_mode}:
            raise DemoFileError(f"demo file {side}: recorded with control mode {', '.join(sorted(modes))}, "
                                f"the env uses {control_mode} (actions would mean something else)")
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise DemoFileError(f"demo file {path} is damaged or truncated ({_first_line(exc)})") from None
    parts: list[dict[str, np.ndarray]] = []
    with handle:
        names = sorted((k for k in handle.keys() if k.startswith("traj_")), key=lambda k: int(k.split("_")[1]))
        if episodes_meta:
            missing = [i for i in episodes_meta if f"traj_{i}" not in handle]
            if missing:
                raise DemoFileError(f"demo file {path}: the sidecar lists {len(episodes_meta)} episodes, "
                                    f"traj_{missing[0]} is not in the file; truncated?")
        if not names:
            raise DemoFileError(f"demo file {path} has no traj_* episodes")
        for name in names:
            if max_episodes is not None and len(parts) >= max_episodes:
                break
            arrays = _episode_arrays(name, handle[name], path)
            if only_success:
                meta_ok = episodes_meta.get(int(name.split("_")[1]), {}).get("success")
                ok = bool(handle[name]["success"][-1]) if "success" in handle[name] and len(arrays["actions"]) \
                    else bool(meta_ok)
                if not ok:
                    continue
            parts.append(arrays)
    if not parts:
        raise DemoFileError(f"demo file {path}: no episode is left to load (only_success: {only_success})")
    dims = {p["obs"].shape[1] for p in parts}
    if len(dims) > 1:
        raise DemoFileError(f"demo file {path}: episodes have observations of different sizes {sorted(dims)}")
    dim = dims.pop()
    if obs_dim is not None and dim != obs_dim:
        raise DemoFileError(f"demo file {path}: observations have {dim} numbers, the env gives {obs_dim} "
                            "(another observation space or task)")
    adim = parts[0]["actions"].shape[1]
    if action_dim is not None and adim != action_dim:
        raise DemoFileError(f"demo file {path}: actions have {adim} numbers, the env takes {action_dim} "
                            "(another control mode?)")

    def cat(key: str, rows: slice) -> torch.Tensor:
        return torch.from_numpy(np.concatenate([p[key][rows] for p in parts]))

    return DemoTransitions(obs=cat("obs", slice(None, -1)), action=cat("actions", slice(None)),
                           reward=cat("rewards", slice(None)), next_obs=cat("obs", slice(1, None)),
                           terminated=cat("terminated", slice(None)), truncated=cat("truncated", slice(None)),
                           num_episodes=len(parts), env_info=env_info)
