"""A scripted expert for ManiSkill ``PickCube-v1`` with ``pd_ee_delta_pos`` control: demonstrations
without downloads.

The expert reads the tool-centre point, cube and goal positions from the unwrapped env
(``agent.tcp.pose.p``, ``cube.pose.p``, ``goal_site.pose.p``) and moves through four phases: above
the cube with the gripper open, down to the cube, close the gripper, carry the cube to the goal and
hold still there (PickCube's success needs the robot static). An action is
``[dx, dy, dz, gripper]`` in ``[-1, 1]``: the position delta is the remaining offset divided by the
controller's 0.1 m per step, the gripper is 1 open, -1 closed.

Example (needs ManiSkill and a Vulkan device):
    >>> import gymnasium as gym, mani_skill.envs  # doctest: +SKIP
    >>> env = gym.make("PickCube-v1", obs_mode="state", control_mode="pd_ee_delta_pos")  # doctest: +SKIP
    >>> obs, _ = env.reset(seed=0); expert = PickCubeExpert(env)  # doctest: +SKIP
    >>> expert.act().shape  # doctest: +SKIP
    (4,)
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CONTROL_MODE", "ENV_ID", "PickCubeExpert"]

ENV_ID = "PickCube-v1"
CONTROL_MODE = "pd_ee_delta_pos"

#: metres the controller moves per unit of a position action (pd_ee_delta_pos: +-0.1 m)
STEP_SCALE = 0.1
OPEN, CLOSED = 1.0, -1.0


def _vec(x: Any) -> np.ndarray:
    """A pose tensor of one environment (``[1, 3]`` torch) -> ``[3]`` float64."""
    arr = x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)
    return np.asarray(arr, dtype=np.float64).reshape(-1, 3)[0]


class PickCubeExpert:
    """The four-phase scripted policy (see the module docstring); one per environment.

    Args:
        env: a ``PickCube-v1`` env (any wrappers; ``env.unwrapped`` is read) with one environment.
        hover: height above the cube's centre the gripper first goes to (m).
        gain: multiplies the remaining offset before clipping (1 = reach in one step if it can).
        close_steps: steps spent closing the gripper before lifting.
    """

    def __init__(self, env: Any, hover: float = 0.06, gain: float = 1.0, close_steps: int = 4):
        self.env = env
        self.hover, self.gain, self.close_steps = hover, gain, close_steps
        self.reset()

    def reset(self) -> None:
        """Start a new episode (call after ``env.reset``)."""
        self.phase = "above"
        self._closing = 0

    def _positions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        base = self.env.unwrapped
        return _vec(base.agent.tcp.pose.p), _vec(base.cube.pose.p), _vec(base.goal_site.pose.p)

    def _move(self, tcp: np.ndarray, target: np.ndarray, gripper: float) -> np.ndarray:
        delta = np.clip(self.gain * (target - tcp) / STEP_SCALE, -1.0, 1.0)
        return np.concatenate([delta, [gripper]]).astype(np.float32)

    def act(self) -> np.ndarray:
        """The ``[4]`` float32 action for the env's current state (advances the phase)."""
        tcp, cube, goal = self._positions()
        if self.phase == "above":
            target = cube + np.array([0.0, 0.0, self.hover])
            if np.linalg.norm(target - tcp) < 0.01:
                self.phase = "descend"
            else:
                return self._move(tcp, target, OPEN)
        if self.phase == "descend":
            if np.linalg.norm(cube - tcp) < 0.006 or (np.linalg.norm((cube - tcp)[:2]) < 0.006
                                                      and tcp[2] - cube[2] < 0.004):
                self.phase = "close"
            else:
                return self._move(tcp, cube, OPEN)
        if self.phase == "close":
            self._closing += 1
            if self._closing > self.close_steps:
                self.phase = "carry"
            else:
                return self._move(tcp, cube, CLOSED)
        # carry: the cube hangs at the tcp, so steer the tcp by the cube's offset to the goal
        return self._move(tcp, tcp + (goal - cube), CLOSED)
