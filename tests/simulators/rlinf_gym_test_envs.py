"""Two small pure-numpy gymnasium envs a test registers as a user would (on import of this module):

* ``RlinfTestBoxReach-v0`` (:class:`BoxReach`): Box observations and an asymmetric Box action
  space ``[-2, 2] x [0, 10]``; the observation ends with the action the env received, so a test
  sees the adapter's scaling even through a simulator process. Reports no success.
* ``RlinfTestDictGoal-v0`` (:class:`DictGoal`): a Dict observation (``pos``, ``goal``, ``a_vel``
  and an 8x8 ``cam`` image) and ``info["is_success"]`` when the point is within 0.3 of the goal.

``rlinf_gym_test_envs:RlinfTestBoxReach-v0`` as ``init_params.id`` imports this module (and so
registers both) in every env process.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class BoxReach(gym.Env):
    """A point at ``x`` moves by ``0.1 * a[0]``; ``a[1]`` does nothing but is echoed."""

    def __init__(self):
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32))
        self._x = 0.0
        self._last = np.zeros(2, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._x = float(self.np_random.uniform(-1, 1))
        self._last = np.zeros(2, np.float32)
        return self._obs(), {}

    def step(self, action):
        self._last = np.asarray(action, np.float32)
        self._x += 0.1 * float(self._last[0])
        return self._obs(), -abs(self._x), False, False, {}

    def _obs(self):
        return np.array([self._x, -self._x, *self._last], np.float32)


class DictGoal(gym.Env):
    """Move a 2-D point towards a goal; success within 0.3 (terminates). Renders a 16x16 frame
    with ``render_mode="rgb_array"``."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.observation_space = spaces.Dict({
            "pos": spaces.Box(-5, 5, (2,), np.float32), "goal": spaces.Box(-5, 5, (2,), np.float32),
            "a_vel": spaces.Box(-5, 5, (1,), np.float32), "cam": spaces.Box(0, 255, (8, 8, 3), np.uint8)})
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self._goal = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self._speed = 0.0
        return self._obs(), {}

    def step(self, action):
        move = 0.5 * np.asarray(action, np.float32)
        self._pos = self._pos + move
        self._speed = float(np.linalg.norm(move))
        dist = float(np.linalg.norm(self._pos - self._goal))
        success = dist < 0.3
        return self._obs(), -dist, success, False, {"is_success": success}

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((16, 16, 3), np.uint8)
        frame[..., 1] = 100
        return frame

    def _obs(self):
        cam = np.zeros((8, 8, 3), np.uint8)
        cam[..., 0] = 200
        return {"pos": self._pos.copy(), "goal": self._goal.copy(), "a_vel": np.array([self._speed], np.float32),
                "cam": cam}


gym.register("RlinfTestBoxReach-v0", entry_point=BoxReach, max_episode_steps=10)
gym.register("RlinfTestDictGoal-v0", entry_point=DictGoal, max_episode_steps=8)
