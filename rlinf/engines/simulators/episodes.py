"""Episode rules on top of a raw batched simulator: one implementation for every library.

A :class:`BatchSim` only resets chosen environments into chosen initial states and steps all of
them. :class:`EpisodeVectorEnv` adds everything an RL loop relies on: truncation at
``max_episode_steps``, ``ignore_terminations``, ``auto_reset`` (with the finished episode's last
observation kept in :attr:`StepResult.final_obs`), reward scaling (``reward_coef``,
``use_rel_reward``), episode statistics, and reproducible initial states shared by GRPO groups
(``use_fixed_reset_state_ids``, ``group_size``, ``seed``).

Example (toy simulator: the agent sits still, so no episode succeeds and all truncate at 2):
    >>> import torch
    >>> from rlinf.engines.simulators.single import SerialBatchSim
    >>> from rlinf.envs.toy_reach import ToyReachEnv
    >>> env = EpisodeVectorEnv(SerialBatchSim([ToyReachEnv() for _ in range(4)]), max_episode_steps=2,
    ...                        auto_reset=True, use_fixed_reset_state_ids=True, group_size=2, seed=0)
    >>> obs = env.reset()
    >>> ids = env.reset_state_ids; bool(ids[0] == ids[1]), bool(ids[2] == ids[3])   # one state per group
    (True, True)
    >>> _ = env.step(torch.zeros(4, 2)); res = env.step(torch.zeros(4, 2))
    >>> res.truncations.tolist(), res.infos["episode_length"].tolist(), res.final_obs is not None
    ([True, True, True, True], [2.0, 2.0, 2.0, 2.0], True)
    >>> bool((env.reset_state_ids == ids).all())   # auto-resets reuse the group's state
    True
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from rlinf.engines.simulators.base import EnvObs, StepResult, VectorEnv
from rlinf.envs.base import SimSpec

__all__ = ["BatchSim", "EpisodeVectorEnv", "SimStep"]

#: Initial states are drawn from [0, SEED_SPACE) when a simulator accepts any seed.
SEED_SPACE = 2**31 - 1


@dataclass
class SimStep:
    """A raw batched step (no episode rules applied).

    Attributes:
        obs: observations after the step.
        rewards: ``[N]`` float32 simulator rewards.
        terminations: ``[N]`` bool.
        successes: ``[N]`` bool.
        extras: name -> ``[N]`` more per-step numbers.
    """

    obs: EnvObs
    rewards: torch.Tensor
    terminations: torch.Tensor
    successes: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)


class BatchSim(ABC):
    """``N`` simulator instances without episode logic (see the module docstring)."""

    device: torch.device = torch.device("cpu")

    @property
    @abstractmethod
    def num_envs(self) -> int:
        """``N``."""

    @property
    @abstractmethod
    def spec(self) -> SimSpec:
        """Action bounds, default episode length, reset-state count."""

    @abstractmethod
    def reset(self, env_ids: np.ndarray, state_ids: np.ndarray) -> EnvObs:
        """Reset environments ``env_ids`` into ``state_ids[env_ids]`` (``state_ids`` is ``[N]``);
        return the observations of all ``N`` environments."""

    @abstractmethod
    def step(self, actions: torch.Tensor) -> SimStep:
        """Step all environments with ``[N, A]`` float32 actions."""

    #: :meth:`step_send` returns while the step runs elsewhere (processes); False: the step runs
    #: in :meth:`step_recv`.
    steps_in_background: bool = False

    def set_idle(self, idle: np.ndarray | None) -> None:
        """``[N]`` bool: environments whose further steps nobody reads (their episode ended in a
        rollout without auto-reset). A simulator that can skip them does: their step repeats
        the last observation with reward 0, no termination and no success. None = step all;
        a reset of an environment clears its flag. Default: every environment keeps stepping
        (a batched GPU simulator steps all of them anyway)."""

    def step_send(self, actions: torch.Tensor) -> None:
        """Start :meth:`step` and return before it finishes, where the simulators run elsewhere
        (processes); :meth:`step_recv` waits for the result. Default: nothing starts early."""
        self._pending_actions = actions

    def step_recv(self) -> SimStep:
        """The result of the step :meth:`step_send` started."""
        actions, self._pending_actions = self._pending_actions, None
        return self.step(actions)

    @abstractmethod
    def render(self) -> np.ndarray:
        """``[N, H, W, 3]`` uint8."""

    @abstractmethod
    def close(self) -> None:
        """Release the simulators."""


class EpisodeVectorEnv(VectorEnv):
    """A :class:`VectorEnv` over any :class:`BatchSim`; arguments mirror ``env.train`` keys.

    Args:
        sim: the simulators.
        max_episode_steps: truncation limit; None = the simulator's default.
        auto_reset: reset finished environments inside :meth:`step`.
        ignore_terminations: report no terminations; episodes end at ``max_episode_steps``.
        use_fixed_reset_state_ids: groups share a state, reused by auto-resets.
        group_size: environments per group (must divide ``N`` when states are fixed).
        seed: seed of the initial-state draws.
        reward_coef: reward scale.
        use_rel_reward: reward is the change of the scaled reward since the previous step.
    """

    def __init__(self, sim: BatchSim, *, max_episode_steps: int | None = None, auto_reset: bool = False,
                 ignore_terminations: bool = False, use_fixed_reset_state_ids: bool = False,
                 group_size: int = 1, seed: int = 0, reward_coef: float = 1.0, use_rel_reward: bool = False):
        n = sim.num_envs
        if use_fixed_reset_state_ids and n % group_size:
            raise ValueError(f"num_envs {n} is not a multiple of group_size {group_size}")
        self._sim = sim
        spec = sim.spec
        self._low = np.asarray(spec.action_low, dtype=np.float32)
        self._high = np.asarray(spec.action_high, dtype=np.float32)
        self._max_steps = int(max_episode_steps or spec.default_max_episode_steps)
        self._num_states = spec.num_reset_states
        self.auto_reset = auto_reset
        self.ignore_terminations = ignore_terminations
        self.use_fixed_reset_state_ids = use_fixed_reset_state_ids
        self.group_size = group_size
        self.reward_coef = reward_coef
        self.use_rel_reward = use_rel_reward
        self._rng = np.random.default_rng(seed)
        dev = sim.device
        self._bounds = (torch.as_tensor(self._low, device=dev), torch.as_tensor(self._high, device=dev))
        self._state_ids = np.zeros(n, dtype=np.int64)
        self._elapsed = torch.zeros(n, dtype=torch.int64, device=dev)
        self._prev_reward = torch.zeros(n, dtype=torch.float32, device=dev)
        self._return = torch.zeros(n, dtype=torch.float32, device=dev)
        self._success_once = torch.zeros(n, dtype=torch.bool, device=dev)
        self._closed = False

    # -- VectorEnv properties -------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        return self._sim.num_envs

    @property
    def action_dim(self) -> int:
        return int(self._low.shape[0])

    @property
    def action_low(self) -> np.ndarray:
        return self._low.copy()

    @property
    def action_high(self) -> np.ndarray:
        return self._high.copy()

    @property
    def max_episode_steps(self) -> int:
        return self._max_steps

    @property
    def num_reset_states(self) -> int | None:
        """Distinct initial states (LIBERO); None when any seed is a state (ManiSkill, toy)."""
        return self._num_states

    @property
    def reset_state_ids(self) -> np.ndarray:
        return self._state_ids.copy()

    @property
    def steps_in_background(self) -> bool:
        return self._sim.steps_in_background

    def set_idle(self, idle: np.ndarray | torch.Tensor | None) -> None:
        """Stop simulating environments whose results are no longer read (see
        :meth:`BatchSim.set_idle`); the next reset of an environment wakes it."""
        if idle is not None:
            idle = np.asarray(idle.cpu() if isinstance(idle, torch.Tensor) else idle, dtype=bool).reshape(-1)
            if idle.shape != (self.num_envs,):
                raise ValueError(f"idle must be [num_envs={self.num_envs}], got {list(idle.shape)}")
        self._sim.set_idle(idle)

    @property
    def sim(self) -> BatchSim:
        """The underlying simulators."""
        return self._sim

    # -- episodes -------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, reset_state_ids: Sequence[int] | None = None) -> EnvObs:
        n = self.num_envs
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if reset_state_ids is not None:
            ids = np.asarray(reset_state_ids, dtype=np.int64).reshape(-1)
            if ids.shape != (n,):
                raise ValueError(f"reset_state_ids has {ids.size} entries for {n} envs")
            high = self._num_states if self._num_states is not None else SEED_SPACE
            if ids.min() < 0 or ids.max() >= high:
                raise ValueError(f"reset_state_ids must lie in [0, {high}), got {ids.tolist()}")
        elif self.use_fixed_reset_state_ids:
            ids = np.repeat(self._draw(n // self.group_size), self.group_size)
        else:
            ids = self._draw(n)
        self._state_ids = ids
        all_ids = np.arange(n)
        obs = self._sim.reset(all_ids, self._state_ids)
        self._clear(torch.ones(n, dtype=torch.bool, device=self._elapsed.device))
        return obs

    def step(self, actions: torch.Tensor | np.ndarray) -> StepResult:
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: torch.Tensor | np.ndarray) -> None:
        acts = torch.as_tensor(actions, dtype=torch.float32, device=self._sim.device)
        if acts.shape != (self.num_envs, self.action_dim):
            raise ValueError(f"actions must be [num_envs={self.num_envs}, action_dim={self.action_dim}], "
                             f"got {list(acts.shape)}")
        acts = torch.clamp(acts, self._bounds[0], self._bounds[1])
        self._sim.step_send(acts)

    def step_wait(self) -> StepResult:
        raw = self._sim.step_recv()
        self._elapsed += 1
        scaled = self.reward_coef * raw.rewards.to(torch.float32)
        rewards = scaled - self._prev_reward if self.use_rel_reward else scaled
        self._prev_reward = scaled
        self._return += rewards
        self._success_once |= raw.successes
        terminations = torch.zeros_like(raw.terminations) if self.ignore_terminations else raw.terminations.clone()
        truncations = self._elapsed >= self._max_steps
        infos = {
            "elapsed_steps": self._elapsed.clone(),
            "episode_length": self._elapsed.to(torch.float32),
            "episode_return": self._return.clone(),
            "success_once": self._success_once.clone(),
            **raw.extras,
        }
        obs, final_obs = raw.obs, None
        dones = terminations | truncations
        if self.auto_reset and bool(dones.any()):
            final_obs = obs.clone()
            done_ids = torch.nonzero(dones).flatten().cpu().numpy()
            if not self.use_fixed_reset_state_ids:
                self._state_ids[done_ids] = self._draw(len(done_ids))
            obs = self._sim.reset(done_ids, self._state_ids)
            self._clear(dones)
        return StepResult(obs=obs, rewards=rewards, terminations=terminations, truncations=truncations,
                          successes=raw.successes.clone(), infos=infos, final_obs=final_obs)

    def render(self) -> np.ndarray:
        return self._sim.render()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._sim.close()

    def _draw(self, k: int) -> np.ndarray:
        high = self._num_states if self._num_states is not None else SEED_SPACE
        return self._rng.integers(0, high, size=k, dtype=np.int64)

    def _clear(self, mask: torch.Tensor) -> None:
        self._elapsed[mask] = 0
        self._prev_reward[mask] = 0.0
        self._return[mask] = 0.0
        self._success_once[mask] = False
