"""``env_type: toy`` — a pure-numpy reaching task: the debug flavour of a simulator.

A point in the plane moves by ``0.2 * action`` (action in ``[-1, 1]^2``) towards a target; the
episode succeeds (and terminates) within 0.1 of it. State: ``[x, y, target_x, target_y]``.
Reward: ``1`` on success, else ``-0.01 * distance``. With ``image_size`` it also returns a
``top`` camera (agent red, target green). Initial state ``k`` is fully determined by ``k``.
Runs in-process or in worker processes like a real simulator; used by tests and doctests.

Example:
    >>> env = ToyReachEnv(image_size=16)
    >>> obs = env.reset(state_id=3)
    >>> obs.state.shape, obs.images["top"].shape, obs.images["top"].dtype
    ((4,), (16, 16, 3), dtype('uint8'))
    >>> goal = obs.state[2:] - obs.state[:2]
    >>> step = env.step(np.clip(goal / 0.2, -1, 1).astype(np.float32))
    >>> step.success or bool(np.abs(goal).max() > 0.2)
    True
"""

from __future__ import annotations

import numpy as np

from rlinf.envs.base import SimSpec, SingleEnv, SingleObs, SingleStep

__all__ = ["ToyReachEnv"]


class ToyReachEnv(SingleEnv):
    """Reach a target point. ``image_size`` adds a ``top`` camera of that many pixels a side."""

    task_name = "toy-reach"
    STEP = 0.2
    SUCCESS_RADIUS = 0.1

    def __init__(self, image_size: int | None = None):
        self.image_size = image_size
        self._pos = np.zeros(2, dtype=np.float32)
        self._target = np.zeros(2, dtype=np.float32)

    def spec(self) -> SimSpec:
        return SimSpec(action_low=-np.ones(2, np.float32), action_high=np.ones(2, np.float32),
                       default_max_episode_steps=20)

    def reset(self, state_id: int) -> SingleObs:
        rng = np.random.default_rng(state_id)
        self._pos, self._target = rng.uniform(-1, 1, size=(2, 2)).astype(np.float32)
        return self._obs()

    def step(self, action: np.ndarray) -> SingleStep:
        self._pos = np.clip(self._pos + self.STEP * np.asarray(action, np.float32), -1, 1)
        dist = float(np.linalg.norm(self._pos - self._target))
        success = dist < self.SUCCESS_RADIUS
        return SingleStep(obs=self._obs(), reward=1.0 if success else -0.01 * dist,
                          terminated=success, success=success, extras={"distance": dist})

    def render(self) -> np.ndarray:
        return self._draw(self.image_size or 64)

    def _obs(self) -> SingleObs:
        images = {"top": self._draw(self.image_size)} if self.image_size else {}
        return SingleObs(state=np.concatenate([self._pos, self._target]), images=images,
                         task_description="reach the target")

    def _draw(self, size: int) -> np.ndarray:
        img = np.full((size, size, 3), 255, dtype=np.uint8)
        for point, colour in ((self._target, (0, 160, 0)), (self._pos, (220, 0, 0))):
            r = int(round((1 - float(point[1])) / 2 * (size - 1)))  # y up, rows down
            c = int(round((float(point[0]) + 1) / 2 * (size - 1)))
            img[max(r - 1, 0):r + 2, max(c - 1, 0):c + 2] = colour
        return img
