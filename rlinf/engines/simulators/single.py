"""The in-process batch of single environments (the unit a simulator process holds).

A :class:`~rlinf.envs.base.SingleEnv` (the interface, in :mod:`rlinf.envs.base`) knows physics and
rendering only; episode rules live in :class:`~rlinf.engines.simulators.episodes.EpisodeVectorEnv`.
Its results are plain numpy (:class:`~rlinf.envs.base.SingleObs`, :class:`~rlinf.envs.base.SingleStep`)
so they pickle cheaply through a process pipe.
:class:`SerialBatchSim` steps a list of them in the calling process (tests, debugging with pdb);
:class:`~rlinf.engines.simulators.subproc.SubprocBatchSim` gives each its own process.

Example:
    >>> from rlinf.envs.toy_reach import ToyReachEnv
    >>> sim = SerialBatchSim([ToyReachEnv(), ToyReachEnv()])
    >>> obs = sim.reset(np.array([0, 1]), np.array([7, 7]))
    >>> bool((obs.states[0] == obs.states[1]).all())   # same state id, same initial state
    True
    >>> sim.step(np.zeros((2, 2), dtype=np.float32)).rewards.shape
    torch.Size([2])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from rlinf.engines.simulators.base import EnvObs
from rlinf.engines.simulators.episodes import BatchSim, SimStep
from rlinf.envs.base import SimSpec, SingleEnv, SingleObs, SingleStep
from rlinf.utils.global_random import GLOBAL_RANDOM_LOCK

__all__ = ["IdleEnvs", "SerialBatchSim", "stack_obs", "stack_steps"]


def stack_obs(items: Sequence[SingleObs]) -> EnvObs:
    """Batch per-environment observations into an :class:`EnvObs` (rows in order)."""
    states = None
    if items and items[0].state is not None:
        states = torch.from_numpy(np.stack([o.state for o in items]).astype(np.float32, copy=False))
    images = {name: torch.from_numpy(np.stack([o.images[name] for o in items]))
              for name in (items[0].images if items else {})}
    descriptions = [o.task_description for o in items]
    return EnvObs(states=states, images=images,
                  task_descriptions=None if all(d is None for d in descriptions) else
                  [d or "" for d in descriptions])


def stack_steps(steps: Sequence[SingleStep]) -> SimStep:
    """Batch per-environment steps into a :class:`SimStep`."""
    extras = {key: torch.tensor([s.extras[key] for s in steps], dtype=torch.float32)
              for key in (steps[0].extras if steps else {})}
    return SimStep(
        obs=stack_obs([s.obs for s in steps]),
        rewards=torch.tensor([s.reward for s in steps], dtype=torch.float32),
        terminations=torch.tensor([s.terminated for s in steps], dtype=torch.bool),
        successes=torch.tensor([s.success for s in steps], dtype=torch.bool),
        extras=extras,
    )


class IdleEnvs:
    """Which environments of a batch are idle (:meth:`BatchSim.set_idle`) and what their skipped
    steps return: the last real step's observation and extras, reward 0, not terminated, no
    success."""

    def __init__(self, n: int):
        self._flags = np.zeros(n, dtype=bool)
        self._last: list[SingleStep | None] = [None] * n

    def set(self, idle: np.ndarray | None) -> None:
        self._flags = np.zeros_like(self._flags) if idle is None else np.asarray(idle, dtype=bool).copy()

    def wake(self, env_ids) -> None:
        """A reset: these environments step again (and replay nothing of an old episode)."""
        for i in np.asarray(env_ids, dtype=np.int64).reshape(-1).tolist():
            self._flags[i] = False
            self._last[i] = None

    def is_idle(self, i: int) -> bool:
        """True once env ``i`` was flagged idle and has stepped at least once."""
        return bool(self._flags[i]) and self._last[i] is not None

    def remember(self, i: int, step: SingleStep) -> None:
        self._last[i] = step

    def replay(self, i: int) -> SingleStep:
        last = self._last[i]
        assert last is not None
        return SingleStep(obs=last.obs, reward=0.0, terminated=False, success=False,
                          extras={k: 0.0 for k in last.extras})


class SerialBatchSim(BatchSim):
    """A batch of :class:`SingleEnv` run one after another in this process."""

    def __init__(self, envs: Sequence[SingleEnv]):
        if not envs:
            raise ValueError("SerialBatchSim needs at least one environment")
        self._envs = list(envs)
        spec = self._envs[0].spec()
        self._spec = spec
        self._last: list[SingleObs | None] = [None] * len(self._envs)
        self._idle = IdleEnvs(len(self._envs))

    @property
    def num_envs(self) -> int:
        return len(self._envs)

    def set_idle(self, idle: np.ndarray | None) -> None:
        self._idle.set(idle)

    @property
    def spec(self) -> SimSpec:
        return self._spec

    def reset(self, env_ids: np.ndarray, state_ids: np.ndarray) -> EnvObs:
        with GLOBAL_RANDOM_LOCK:  # a seeded reset may seed and draw from the process-wide generators
            for i in env_ids.tolist():
                self._last[i] = self._envs[i].reset(int(state_ids[i]))
        self._idle.wake(env_ids)
        return stack_obs(self._require_all())

    def step(self, actions: np.ndarray | torch.Tensor) -> SimStep:
        acts = actions.detach().cpu().numpy() if isinstance(actions, torch.Tensor) else actions
        with GLOBAL_RANDOM_LOCK:
            steps = [self._idle.replay(i) if self._idle.is_idle(i) else env.step(np.asarray(a, dtype=np.float32))
                     for i, (env, a) in enumerate(zip(self._envs, acts))]
        for i, s in enumerate(steps):
            self._last[i] = s.obs
            self._idle.remember(i, s)
        return stack_steps(steps)

    def render(self) -> np.ndarray:
        return np.stack([env.render() for env in self._envs])

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs = []

    def _require_all(self) -> list[SingleObs]:
        missing = [i for i, o in enumerate(self._last) if o is None]
        if missing:
            raise RuntimeError(f"envs {missing} were never reset")
        return self._last  # type: ignore[return-value]
