"""A replay buffer of transitions for off-policy RL (SAC, CrossQ, RLPD), n-step returns, mixed
online / demonstration batches, and an atomic, bounded save for resume.

:class:`ReplayBuffer` preallocates one tensor per field (``[capacity, *shape]``) and writes
incoming rows in a ring: once full, the oldest rows are overwritten first. :meth:`sample` draws
rows uniformly (with replacement) from all it holds, or from the ``sample_window`` most recent.
:class:`NStepAccumulator` turns per-env steps into ``n``-step transitions before they go in:
``reward = sum_{i<k} gamma^i r_{t+i}``, ``discount = gamma^k``, ``next_obs = s_{t+k}``, where
``k = n`` or fewer when the episode ends first (``terminated`` is kept: a truncation still
bootstraps).

Example:
    >>> import torch
    >>> buf = ReplayBuffer(3, {"obs": ((2,), torch.float32), "reward": ((), torch.float32)})
    >>> buf.add({"obs": torch.zeros(2, 2), "reward": torch.tensor([1.0, 2.0])})
    >>> buf.add({"obs": torch.ones(2, 2), "reward": torch.tensor([3.0, 4.0])})
    >>> len(buf), sorted(buf.data["reward"].tolist())   # 1.0 was overwritten
    (3, [2.0, 3.0, 4.0])
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from rlinf.utils.atomic_file import atomic_write

FieldSpec = Mapping[str, tuple[tuple[int, ...], torch.dtype]]

#: the fields an off-policy update reads (shapes: obs / action per env's spaces)
TRANSITION_FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "discount")


def transition_spec(obs_dim: int, action_dim: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The :data:`TRANSITION_FIELDS` of state observations of ``obs_dim`` and actions of ``action_dim``."""
    return {"obs": ((obs_dim,), torch.float32), "action": ((action_dim,), torch.float32),
            "reward": ((), torch.float32), "next_obs": ((obs_dim,), torch.float32),
            "terminated": ((), torch.bool), "discount": ((), torch.float32)}


def transition_bytes(obs_dim: int, action_dim: int) -> int:
    """Bytes of one row of :func:`transition_spec` (what a buffer preallocates per transition).

    Example:
        >>> transition_bytes(42, 4)       # PickCube from state: 300 000 rows are 103 MiB
        361
    """
    return sum(math.prod(shape) * dtype.itemsize
               for shape, dtype in transition_spec(obs_dim, action_dim).values())


class ReplayBuffer:
    """A ring of ``capacity`` transitions (see the module docstring).

    Args:
        capacity: rows kept (``replay_buffer.capacity``).
        spec: field -> (shape of one row, dtype).
        device: where the tensors live (``cpu``; a GPU run may keep them on its device).
        sample_window: sample only the most recent rows (None: all); RLinf's ``sample_window_size``.
    """

    def __init__(self, capacity: int, spec: FieldSpec, device: str | torch.device = "cpu",
                 sample_window: int | None = None):
        if capacity < 1:
            raise ValueError(f"replay_buffer.capacity must be >= 1, got {capacity}")
        if sample_window is not None and sample_window < 1:
            raise ValueError(f"replay_buffer.sample_window_size must be >= 1, got {sample_window}")
        self.capacity, self.spec, self.sample_window = int(capacity), dict(spec), sample_window
        self.device = torch.device(device)
        self.data = {k: torch.zeros((self.capacity, *shape), dtype=dtype, device=self.device)
                     for k, (shape, dtype) in self.spec.items()}
        self.size = 0   # rows held
        self.next = 0   # where the next row goes
        self.added = 0  # rows ever added

    def __len__(self) -> int:
        return self.size

    @property
    def memory_bytes(self) -> int:
        """Bytes of the preallocated tensors (the figure the run logs)."""
        return sum(t.numel() * t.element_size() for t in self.data.values())

    def add(self, rows: Mapping[str, torch.Tensor]) -> None:
        """Append ``rows`` (every field, the same leading length ``N``), overwriting the oldest."""
        missing = set(self.spec) - set(rows)
        if missing:
            raise KeyError(f"replay buffer rows miss {sorted(missing)}")
        n = int(next(iter(rows.values())).shape[0])
        for k, (shape, _) in self.spec.items():
            if tuple(rows[k].shape) != (n, *shape):
                raise ValueError(f"replay buffer field {k}: expected {[n, *shape]}, got {list(rows[k].shape)}")
        self.added += n
        if n > self.capacity:  # only the last `capacity` rows would survive
            rows = {k: v[n - self.capacity:] for k, v in rows.items()}
            n = self.capacity
        idx = (self.next + torch.arange(n)) % self.capacity
        for k in self.spec:
            self.data[k][idx.to(self.device)] = rows[k].to(self.device, self.data[k].dtype)
        self.next = (self.next + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """``batch_size`` rows drawn uniformly with replacement (from the window when set)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        window = self.size if self.sample_window is None else min(self.sample_window, self.size)
        back = torch.randint(1, window + 1, (batch_size,), generator=generator)  # 1 = the newest row
        idx = ((self.next - back) % self.capacity).to(self.device)
        return {k: v[idx] for k, v in self.data.items()}

    # ---- save / resume -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The rows held, oldest first (bounded by ``capacity``), and the counters."""
        order = (self.next - self.size + torch.arange(self.size)) % self.capacity
        return {"rows": {k: v[order.to(self.device)].cpu() for k, v in self.data.items()},
                "added": self.added, "capacity": self.capacity,
                "spec": {k: (list(shape), str(dtype)) for k, (shape, dtype) in self.spec.items()}}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore :meth:`state_dict` (rows beyond ``capacity`` keep the newest)."""
        saved = {k: (tuple(shape), dtype) for k, (shape, dtype) in state["spec"].items()}
        mine = {k: (tuple(shape), str(dtype)) for k, (shape, dtype) in self.spec.items()}
        if saved != mine:
            raise ValueError(f"the saved buffer's fields {saved} differ from this run's {mine}")
        self.size = self.next = 0
        rows = state["rows"]
        if next(iter(rows.values())).shape[0]:
            self.add(rows)
        self.added = int(state["added"])

    def save(self, path: str | os.PathLike) -> Path:
        """Write :meth:`state_dict` atomically (temporary file, fsync, rename); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = self.state_dict()
        atomic_write(path, lambda f: torch.save(state, f))
        return path

    def load(self, path: str | os.PathLike) -> None:
        """Restore a :meth:`save` file; a damaged or foreign file raises ``ValueError`` naming it."""
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            self.load_state_dict(state)
        except (ValueError, KeyError, TypeError, RuntimeError, EOFError, StopIteration) as exc:
            raise ValueError(f"{path}: not a readable replay buffer ({type(exc).__name__}: {str(exc)[:200]})") from None


def sample_mixed(online: ReplayBuffer, demos: ReplayBuffer | None, batch_size: int, demo_fraction: float = 0.5,
                 generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """RLPD's symmetric sampling: ``round(demo_fraction * batch_size)`` rows from ``demos``, the
    rest from ``online`` (all from ``online`` without demos), concatenated demos first."""
    if demos is None or demo_fraction <= 0:
        return online.sample(batch_size, generator)
    n_demo = int(round(demo_fraction * batch_size))
    a, b = demos.sample(n_demo, generator), online.sample(batch_size - n_demo, generator)
    return {k: torch.cat([a[k], b[k].to(a[k].device)]) for k in online.spec}


class NStepAccumulator:
    """Per-env ``n``-step folding of steps into transitions (see the module docstring).

    :meth:`push` takes one vectorised step (``[E, ...]`` per field: obs, action, reward,
    next_obs, terminated, truncated) and returns the transitions completed by it, with the
    :data:`TRANSITION_FIELDS`. ``n = 1`` passes each step through with ``discount = gamma``.

    >>> import torch
    >>> acc = NStepAccumulator(n=2, gamma=0.5)
    >>> step = lambda r, term: {"obs": torch.zeros(1, 1), "action": torch.zeros(1, 1), "reward": torch.tensor([r]),
    ...     "next_obs": torch.zeros(1, 1), "terminated": torch.tensor([term]), "truncated": torch.tensor([False])}
    >>> acc.push(step(1.0, False)) is None
    True
    >>> out = acc.push(step(2.0, False))          # 1 + 0.5 * 2, discount 0.25
    >>> out["reward"].tolist(), out["discount"].tolist()
    ([2.0], [0.25])
    """

    def __init__(self, n: int, gamma: float):
        if n < 1:
            raise ValueError(f"n_step must be >= 1, got {n}")
        self.n, self.gamma = int(n), float(gamma)
        self.pending: dict[int, list[dict]] = {}

    def push(self, step: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        envs = int(step["reward"].shape[0])
        out: list[dict] = []
        for e in range(envs):
            queue = self.pending.setdefault(e, [])
            queue.append({k: v[e] for k, v in step.items()})
            ended = bool(step["terminated"][e]) or bool(step["truncated"][e])
            if len(queue) == self.n:
                out.append(self._fold(queue))
                queue.pop(0)
            if ended:  # the rest of the episode's steps end here, with shorter spans
                while queue:
                    out.append(self._fold(queue))
                    queue.pop(0)
        if not out:
            return None
        return {k: torch.stack([t[k] for t in out]) for k in TRANSITION_FIELDS}

    def _fold(self, steps: list[dict]) -> dict[str, torch.Tensor]:
        reward = sum(self.gamma ** i * float(s["reward"]) for i, s in enumerate(steps))
        last = steps[-1]
        return {"obs": steps[0]["obs"], "action": steps[0]["action"],
                "reward": torch.tensor(reward, dtype=torch.float32), "next_obs": last["next_obs"],
                "terminated": last["terminated"].bool(),
                "discount": torch.tensor(self.gamma ** len(steps), dtype=torch.float32)}
