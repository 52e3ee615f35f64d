"""The interface every simulator adapter implements: a batch of ``N`` environments stepped together.

Everything crossing it is typed: :class:`EnvObs` (an observation batch), :class:`StepResult`
(one step of all ``N`` environments) and :class:`VectorEnv` (reset / step / render / close).
Tensors are CPU tensors, except that a GPU-simulated ManiSkill batch returns tensors on its CUDA
device.

Example (the toy simulator, no library needed):
    >>> import torch
    >>> from rlinf.config.env import EnvConfig
    >>> from rlinf.engines.simulators import make_vector_env
    >>> env = make_vector_env(EnvConfig(env_type="toy", max_episode_steps=3), num_envs=2)
    >>> obs = env.reset(seed=0)
    >>> obs.states.shape, obs.task_descriptions
    (torch.Size([2, 4]), ['reach the target', 'reach the target'])
    >>> res = env.step(torch.zeros(2, env.action_dim))
    >>> res.rewards.shape, res.terminations.dtype, bool(res.dones.any())
    (torch.Size([2]), torch.bool, False)
    >>> env.close()
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["EnvObs", "SimulatorError", "StepResult", "VectorEnv"]


class SimulatorError(RuntimeError):
    """A simulator could not be built or stopped answering; the message names the env and task."""


@dataclass
class EnvObs:
    """An observation batch of ``N`` environments.

    Attributes:
        states: proprioceptive / privileged state ``[N, D]`` float32, or None when the simulator
            gives none (ManiSkill ``obs_mode: state`` puts the whole flat observation here).
        images: camera name -> ``[N, H, W, 3]`` uint8 RGB, upright; empty for state-only modes.
        task_descriptions: one language instruction per environment, or None when the task has
            none.
    """

    states: torch.Tensor | None = None
    images: dict[str, torch.Tensor] = field(default_factory=dict)
    task_descriptions: list[str] | None = None

    @property
    def num_envs(self) -> int:
        """``N``, the batch size."""
        if self.states is not None:
            return int(self.states.shape[0])
        if self.images:
            return int(next(iter(self.images.values())).shape[0])
        return len(self.task_descriptions or ())

    def select(self, env_ids: Sequence[int] | torch.Tensor) -> EnvObs:
        """The rows of ``env_ids`` (a new batch).

        >>> obs = EnvObs(states=torch.arange(6.).reshape(3, 2), task_descriptions=["a", "b", "c"])
        >>> sub = obs.select([2, 0])
        >>> sub.states.tolist(), sub.task_descriptions
        ([[4.0, 5.0], [0.0, 1.0]], ['c', 'a'])
        """
        ids = torch.as_tensor(env_ids, dtype=torch.long)
        return EnvObs(
            states=None if self.states is None else self.states[ids.to(self.states.device)],
            images={k: v[ids.to(v.device)] for k, v in self.images.items()},
            task_descriptions=None if self.task_descriptions is None
            else [self.task_descriptions[i] for i in ids.tolist()],
        )

    def clone(self) -> EnvObs:
        """A deep copy (tensors cloned)."""
        return EnvObs(
            states=None if self.states is None else self.states.clone(),
            images={k: v.clone() for k, v in self.images.items()},
            task_descriptions=None if self.task_descriptions is None else list(self.task_descriptions),
        )


@dataclass
class StepResult:
    """One step of all ``N`` environments.

    ``infos`` always describe the step just taken. For an environment that finished and was
    auto-reset, that is its finished episode (``episode_return``, ``episode_length``,
    ``success_once`` of that episode), while ``obs`` is already the first observation of its next
    episode and ``final_obs`` holds the last observation of the finished one.

    Attributes:
        obs: observations after the step (after auto-resets).
        rewards: ``[N]`` float32, after ``reward_coef`` and ``use_rel_reward``.
        terminations: ``[N]`` bool, the task ended (success or failure); all False with
            ``ignore_terminations``.
        truncations: ``[N]`` bool, the episode hit ``max_episode_steps``.
        successes: ``[N]`` bool, the task's success criterion holds after this step (reported
            even with ``ignore_terminations``).
        infos: name -> ``[N]`` tensor: ``elapsed_steps``, ``episode_return``, ``episode_length``,
            ``success_once`` (success at any step of the episode so far), and simulator extras.
        final_obs: with ``auto_reset``, when any environment finished: the observation batch
            before the resets (rows of unfinished environments equal ``obs``); else None.
    """

    obs: EnvObs
    rewards: torch.Tensor
    terminations: torch.Tensor
    truncations: torch.Tensor
    successes: torch.Tensor
    infos: dict[str, torch.Tensor] = field(default_factory=dict)
    final_obs: EnvObs | None = None

    @property
    def dones(self) -> torch.Tensor:
        """``terminations | truncations``."""
        return self.terminations | self.truncations


class VectorEnv(ABC):
    """``N`` environments of one task family, stepped together.

    Episode rules (``max_episode_steps``, ``auto_reset``, ``ignore_terminations``, reward scaling,
    reset states) are the same for every simulator; adapters only supply physics and rendering.
    """

    @property
    @abstractmethod
    def num_envs(self) -> int:
        """``N``."""

    @property
    @abstractmethod
    def action_dim(self) -> int:
        """``A``, the length of one environment's action."""

    @property
    @abstractmethod
    def action_low(self) -> np.ndarray:
        """``[A]`` lower bounds of an action (float32)."""

    @property
    @abstractmethod
    def action_high(self) -> np.ndarray:
        """``[A]`` upper bounds of an action (float32)."""

    @property
    @abstractmethod
    def max_episode_steps(self) -> int:
        """Steps after which an episode is truncated."""

    @property
    @abstractmethod
    def reset_state_ids(self) -> np.ndarray:
        """``[N]`` int64: the initial state each environment's current episode started from."""

    @abstractmethod
    def reset(self, seed: int | None = None, reset_state_ids: Sequence[int] | None = None) -> EnvObs:
        """Start a new episode in every environment.

        Args:
            seed: re-seed the draw of initial states first (same seed, same initial
                observations); None continues the current sequence.
            reset_state_ids: ``[N]`` explicit initial states (ManiSkill: the episode seed;
                LIBERO: an index into the selected tasks' benchmark init states); overrides the
                draw.
        """

    @abstractmethod
    def step(self, actions: torch.Tensor | np.ndarray) -> StepResult:
        """Apply ``actions`` ``[N, A]`` (clipped to the action bounds) to every environment."""

    @property
    def steps_in_background(self) -> bool:
        """True when :meth:`step_async` returns while the simulators step elsewhere (other
        processes); False when the step runs in :meth:`step_wait`, in the caller's process."""
        return False

    def set_idle(self, idle: np.ndarray | torch.Tensor | None) -> None:
        """``[N]`` bool: environments whose further results nobody reads (their episode ended in a
        rollout without auto-reset); simulators that can skip them do, until their next reset.
        None = step all. Default: all keep stepping."""

    def step_async(self, actions: torch.Tensor | np.ndarray) -> None:
        """Start :meth:`step` and return early where the simulators run in other processes, so
        the caller can work meanwhile; :meth:`step_wait` returns the result. Exactly one
        ``step_wait`` follows each ``step_async``. Default: the step runs in ``step_wait``."""
        self._async_actions = actions

    def step_wait(self) -> StepResult:
        """The result of the step :meth:`step_async` started."""
        actions, self._async_actions = self._async_actions, None
        return self.step(actions)

    @abstractmethod
    def render(self) -> np.ndarray:
        """``[N, H, W, 3]`` uint8 frames of the current state, for videos."""

    @abstractmethod
    def close(self) -> None:
        """Stop the simulators (idempotent)."""

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
