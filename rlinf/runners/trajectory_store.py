"""Incremental trajectory saves and resume (seed 004's ``iteration{K}_rank_{r}.pt`` files,
``checkpoint_interval=0.25`` / ``save_every_percent: 25``).

A :class:`TrajectoryStore` holds one rank's trajectories of one iteration. ``add`` keeps a
trajectory and, each time another ``ceil(checkpoint_interval * total)`` trajectories have
arrived since the last write, rewrites ``<folder>/iteration{K}_rank_{r}.pt``; ``finish`` writes
it once more with ``metadata.complete`` True. The file is ``torch.save`` of
``{"trajectories": [...], "metadata": {...}}`` (plain JSON-able values, read back with
``weights_only=True``), written to a hidden temporary file in the same folder, flushed to disk and
renamed over the old one (``os.replace``), so a crash at any moment leaves the previous complete
file; temporary files are never read.

Screenshots go next to it as PNG files under ``iteration{K}_rank_{r}_screens/``
(:meth:`TrajectoryStore.save_screenshot`); steps name them by their path relative to the folder.

Resume: a new store for the same folder, iteration and rank loads what the file holds;
:meth:`TrajectoryStore.done_keys` gives their ``(task_id, repeat)`` keys so the caller runs only
the others, and ``add`` ignores (returns False for) a key it already holds.

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> store = TrajectoryStore(folder, iteration=3, rank=0, total=4, checkpoint_interval=0.5)
>>> [store.add({"task": {"task_id": f"t{i}"}, "repeat": 0, "steps": []}) for i in range(3)]
[True, True, True]
>>> len(TrajectoryStore.load(folder, 3, 0)["trajectories"])   # written after 2
2
>>> sorted(TrajectoryStore(folder, 3, 0, total=4).done_keys())
[('t0', 0), ('t1', 0)]
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlinf.utils.atomic_file import atomic_write

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def trajectory_file(folder: str | os.PathLike, iteration: int, rank: int) -> Path:
    """``<folder>/iteration{K}_rank_{r}.pt``.

    >>> trajectory_file("out", 5, 1).name
    'iteration5_rank_1.pt'
    """
    return Path(folder) / f"iteration{int(iteration)}_rank_{int(rank)}.pt"


def trajectory_key(traj: Any) -> tuple[str, int]:
    """``(task_id, repeat)`` of a trajectory.

    >>> trajectory_key({"task": {"task_id": "shop-1"}, "repeat": 2})
    ('shop-1', 2)
    """
    task = traj.get("task") if isinstance(traj, Mapping) else None
    task_id = task.get("task_id") if isinstance(task, Mapping) else None
    repeat = traj.get("repeat") if isinstance(traj, Mapping) else None
    if not isinstance(task_id, str) or not isinstance(repeat, int) or isinstance(repeat, bool):
        raise ValueError(f"trajectory: expected a dict with task.task_id (a string) and repeat (an integer), "
                         f"got task_id={task_id!r}, repeat={repeat!r}")
    return task_id, repeat


def _read(path: Path) -> dict:
    import torch  # lazy: torch (~2 s) only when called; the driver's checks before Ray import this module without it

    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever torch.load raises, the file is unreadable
        raise ValueError(f"{path}: not a readable trajectory file ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("trajectories"), list) \
            or not isinstance(data.get("metadata"), dict):
        raise ValueError(f"{path}: expected a dict with 'trajectories' (a list) and 'metadata' (a dict)")
    return data


class TrajectoryStore:
    """One rank's trajectories of one iteration, saved as they arrive (module docstring).

    Args:
        folder: output folder (created when missing).
        iteration, rank: name the file.
        total: trajectories this rank expects in this iteration (sets the checkpoint step).
        checkpoint_interval: fraction of ``total`` between writes, in (0, 1]; None = write only
            on ``finish`` (seed's ``save_traj_progress: false``).
        metadata: extra metadata saved with the file (model, split, ...).
        resume: load the trajectories an existing file holds.
    """

    def __init__(self, folder: str | os.PathLike, iteration: int, rank: int = 0, total: int = 0,
                 checkpoint_interval: float | None = 0.25, metadata: Mapping | None = None, resume: bool = True):
        if checkpoint_interval is not None and not 0 < checkpoint_interval <= 1:
            raise ValueError(f"checkpoint_interval: expected a fraction in (0, 1] (save_every_percent / 100), "
                             f"got {checkpoint_interval!r}")
        if not isinstance(total, int) or total < 0:
            raise ValueError(f"total: expected an integer >= 0, got {total!r}")
        if iteration < 0 or rank < 0:
            raise ValueError(f"iteration and rank: expected >= 0, got {iteration!r}, {rank!r}")
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f"{self.folder}: the trajectory folder is a file")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.iteration, self.rank, self.total = int(iteration), int(rank), total
        self.checkpoint_interval = checkpoint_interval
        self.step = None if checkpoint_interval is None else max(1, math.ceil(checkpoint_interval * total - 1e-9))
        self.metadata = dict(metadata or {})
        self.path = trajectory_file(self.folder, self.iteration, self.rank)
        self.screens_dir = self.folder / f"{self.path.stem}_screens"
        self.trajectories: list[dict] = []
        self._keys: set[tuple[str, int]] = set()
        self._unsaved = 0
        self.writes = 0
        self.complete = False
        if resume:
            data = self.load(self.folder, self.iteration, self.rank)
            for traj in (data or {}).get("trajectories", []):
                key = trajectory_key(traj)
                if key not in self._keys:
                    self._keys.add(key)
                    self.trajectories.append(traj)
        self.resumed = len(self.trajectories)

    @staticmethod
    def load(folder: str | os.PathLike, iteration: int, rank: int) -> dict | None:
        """The saved ``{"trajectories", "metadata"}`` of a rank, or None when it has no file yet;
        a damaged file raises ``ValueError`` naming it."""
        path = trajectory_file(folder, iteration, rank)
        return _read(path) if path.is_file() else None

    def done_keys(self) -> set[tuple[str, int]]:
        """``(task_id, repeat)`` of every trajectory held (loaded or added)."""
        return set(self._keys)

    def add(self, traj: dict) -> bool:
        """Keep ``traj`` (False, ignored, when its key is already held); writes a checkpoint
        every ``step`` new trajectories."""
        key = trajectory_key(traj)
        if key in self._keys:
            return False
        self._keys.add(key)
        self.trajectories.append(traj)
        self.complete = False
        self._unsaved += 1
        if self.step is not None and self._unsaved >= self.step:
            self.save()
        return True

    def save(self) -> Path:
        """Write the file now (atomically); returns its path."""
        import torch  # lazy: torch (~2 s) only when saving; the checks before Ray import this module

        meta = {**self.metadata, "iteration": self.iteration, "rank": self.rank, "total": self.total,
                "count": len(self.trajectories), "complete": self.complete,
                "checkpoint_interval": self.checkpoint_interval, "saved_at": time.time()}
        payload = {"trajectories": list(self.trajectories), "metadata": meta}
        atomic_write(self.path, lambda f: torch.save(payload, f))
        self._unsaved = 0
        self.writes += 1
        return self.path

    def finish(self) -> Path:
        """Write the final file (``metadata.complete`` True)."""
        self.complete = True
        return self.save()

    def save_screenshot(self, task_key: tuple[str, int] | str, step: int, png_bytes: bytes) -> str:
        """Save one step's screenshot; returns its name relative to the folder (what a step stores)."""
        if not isinstance(png_bytes, (bytes, bytearray)) or bytes(png_bytes[:8]) != PNG_MAGIC:
            head = bytes(png_bytes[:8]) if isinstance(png_bytes, (bytes, bytearray)) else type(png_bytes).__name__
            raise ValueError(f"screenshot of {task_key!r} step {step}: expected PNG bytes (\\x89PNG header), "
                             f"got {head!r}")
        task_id, repeat = (task_key, 0) if isinstance(task_key, str) else task_key
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", str(task_id))
        name = f"{safe}_r{int(repeat)}_s{int(step):03d}.png"
        self.screens_dir.mkdir(exist_ok=True)
        atomic_write(self.screens_dir / name, lambda f: f.write(png_bytes))
        return f"{self.screens_dir.name}/{name}"


def load_iteration(folder: str | os.PathLike, iteration: int) -> list[dict]:
    """Every rank's trajectories of ``iteration``, rank by rank, in saved order.

    >>> import tempfile
    >>> load_iteration(tempfile.mkdtemp(), 0)
    []
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such trajectory folder")
    pattern = re.compile(rf"iteration{int(iteration)}_rank_(\d+)\.pt")
    ranks = sorted(int(m.group(1)) for p in folder.iterdir() if (m := pattern.fullmatch(p.name)) and p.is_file())
    return [traj for rank in ranks for traj in _read(trajectory_file(folder, iteration, rank))["trajectories"]]
