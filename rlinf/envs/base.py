"""What one environment is, to the embodied runtime: the interface a simulator implements
(:class:`SingleEnv`, with plain-numpy results :class:`SingleObs` / :class:`SingleStep` that pickle
cheaply through a process pipe, and :class:`SimSpec`, what a simulator tells the episode layer).

The worlds this package ships implement it (:mod:`rlinf.envs.toy_reach`), and so do the engines'
adapters over outside libraries (:mod:`rlinf.engines.simulators`: ManiSkill3, LIBERO, Meta-World),
which also drive both: batching, worker processes, episode rules. The interface lives here, below
the engines, so that a world imports nothing of theirs and the engines import the worlds, one way.

Example:
    >>> import numpy as np
    >>> class Still(SingleEnv):
    ...     task_name = "still"
    ...     def spec(self): return SimSpec(np.full(1, -1, np.float32), np.ones(1, np.float32), 5)
    ...     def reset(self, state_id): return SingleObs(state=np.zeros(1, np.float32))
    ...     def step(self, action): return SingleStep(self.reset(0), reward=0.0, terminated=False, success=False)
    ...     def render(self): return np.zeros((2, 2, 3), np.uint8)
    >>> env = Still()
    >>> env.spec().default_max_episode_steps, env.step(np.zeros(1, np.float32)).obs.state.tolist()
    (5, [0.0])
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

__all__ = ["SimSpec", "SingleEnv", "SingleObs", "SingleStep"]


@dataclass
class SimSpec:
    """What a simulator batch tells the episode layer once built.

    Attributes:
        action_low, action_high: ``[A]`` float32 action bounds.
        default_max_episode_steps: the task's own episode limit.
        num_reset_states: how many distinct initial states exist (LIBERO: benchmark init states
            of the selected tasks); None = any int in ``[0, 2**31 - 1)`` (a seed).
    """

    action_low: np.ndarray
    action_high: np.ndarray
    default_max_episode_steps: int
    num_reset_states: int | None = None


@dataclass
class SingleObs:
    """One environment's observation.

    Attributes:
        state: ``[D]`` float32 or None.
        images: camera name -> ``[H, W, 3]`` uint8, upright.
        task_description: language instruction or None.
    """

    state: np.ndarray | None = None
    images: dict[str, np.ndarray] = field(default_factory=dict)
    task_description: str | None = None


@dataclass
class SingleStep:
    """One environment's step.

    Attributes:
        obs: observation after the step.
        reward: the simulator's reward (before ``reward_coef``).
        terminated: the task ended (success or failure).
        success: the success criterion holds.
        extras: more per-step numbers worth reporting (same keys every step).
    """

    obs: SingleObs
    reward: float
    terminated: bool
    success: bool
    extras: dict[str, float] = field(default_factory=dict)


class SingleEnv(ABC):
    """One simulator instance. ``task_name`` names it in error messages."""

    task_name: str = "?"

    @abstractmethod
    def spec(self) -> SimSpec:
        """Action bounds, default episode length, reset-state count."""

    @abstractmethod
    def reset(self, state_id: int) -> SingleObs:
        """Start an episode from initial state ``state_id`` (deterministic for a given id)."""

    @abstractmethod
    def step(self, action: np.ndarray) -> SingleStep:
        """Apply one ``[A]`` float32 action."""

    @abstractmethod
    def render(self) -> np.ndarray:
        """``[H, W, 3]`` uint8 frame of the current state."""

    def close(self) -> None:
        """Release the simulator."""
