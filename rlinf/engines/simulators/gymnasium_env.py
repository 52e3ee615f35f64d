"""``env_type: gymnasium`` — any environment registered with ``gymnasium`` whose action space is a
``Box``, one environment per simulator process (or in the env worker with ``sim_in_worker``).

The task is ``init_params.id``: a registered id (``Pendulum-v1``), or ``my_module:MyEnv-v0``, whose
module is imported first in every process that builds the env (the driver's check, the env
worker, each simulator process), as ``gymnasium.make`` does, so a user's own env registered at
import time of ``my_module`` runs without touching the runtime.

* **Actions**: the policy acts in ``[-1, 1]`` per dimension; the adapter scales each number
  linearly to the ``Box`` bounds (``low + (a + 1) / 2 * (high - low)``), reshapes to the space's
  shape and casts to its dtype. A space with an infinite bound, or any other space
  (``Discrete``, ``MultiDiscrete``, ``Dict``), is refused.
* **Observations**: a ``Box`` observation is flattened into ``states`` (float32). A ``Dict``
  observation is flattened in sorted key order (nested dicts likewise, depth first); entries that
  are images (uint8 arrays ``[H, W, 3]``) are kept apart as cameras named by their key (path
  ``a/b`` for nested keys) and not put into ``states``. An image observation alone has no states.
* **Success**: ``info["success"]``, else ``info["is_success"]``. An environment that reports
  neither has no success: its steps carry ``success_reported`` 0 in the step extras, and the
  success metrics of its episodes say "not reported" (:mod:`rlinf.utils.eval_episodes`,
  :class:`~rlinf.workers.env.messages.EpisodeStats`) instead of a rate of 0.
* **Episodes**: ``reset(state_id)`` calls ``env.reset(seed=state_id)`` (same seed, same first
  observation); ``terminated`` ends the episode, ``truncated`` is left to the episode layer, which
  truncates at ``max_episode_steps`` (null = the id's registered limit; the env is built with
  that limit, so its own time limit agrees). Reward: the env's.
* **Videos**: ``video_cfg.save_video`` builds the env with ``render_mode="rgb_array"``.

Example:
    >>> env = GymnasiumSingleEnv("Pendulum-v1")
    >>> obs = env.reset(7); obs.state.shape, env.spec().action_low.tolist()
    ((3,), [-1.0])
    >>> bool((env.reset(7).state == obs.state).all())   # same seed, same first observation
    True
    >>> step = env.step(np.ones(1, np.float32))          # torque +2, the Box's upper bound
    >>> env.last_env_action.tolist(), step.extras["success_reported"]
    ([2.0], 0.0)
    >>> env.close()
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from functools import partial
from typing import Any

import numpy as np

from rlinf.engines.simulators.base import SimulatorError
from rlinf.engines.simulators.episodes import BatchSim
from rlinf.engines.simulators.subproc import build_cpu_sim
from rlinf.envs.base import SimSpec, SingleEnv, SingleObs, SingleStep

__all__ = ["GymnasiumSingleEnv", "build_gymnasium_sim", "check_gymnasium_id", "flatten_observation",
           "import_env_module", "read_success"]

_NOT_INSTALLED = "gymnasium is not installed: run `bash scripts/setup_env.sh --extras embodied`"
#: the info keys read as success, first found wins
SUCCESS_KEYS = ("success", "is_success")


def _gymnasium() -> Any:
    try:
        # lazy: optional extra (embodied: gymnasium); only env_type gymnasium needs it
        import gymnasium
    except ImportError as exc:
        raise ImportError(_NOT_INSTALLED) from exc
    return gymnasium


def import_env_module(env_id: str) -> str:
    """Import the module of a ``module:Id`` id (as ``gymnasium.make`` does) and return the bare
    id; a plain id is returned as it is. SimulatorError (one line) when the module does not
    import.

    >>> import_env_module("Pendulum-v1")
    'Pendulum-v1'
    >>> import_env_module("no_such_module_xyz:Env-v0")
    Traceback (most recent call last):
    ...
    rlinf.engines.simulators.base.SimulatorError: gymnasium env 'no_such_module_xyz:Env-v0': its module no_such_module_xyz does not import: ModuleNotFoundError: No module named 'no_such_module_xyz'
    """  # noqa: E501 - a doctest's expected output is one line
    if ":" not in env_id:
        return env_id
    module, name = env_id.split(":", 1)
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is one line here
        text = str(exc).strip().splitlines()
        raise SimulatorError(f"gymnasium env {env_id!r}: its module {module} does not import: "
                             f"{type(exc).__name__}: {text[0] if text else ''}") from None
    return name


def check_gymnasium_id(env_id: str) -> str:
    """Import ``module`` of ``module:Id`` and check that the id is registered; returns the bare
    id. SimulatorError naming close registered ids otherwise; ImportError when gymnasium is
    missing.

    >>> check_gymnasium_id("Pendulm-v1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rlinf.engines.simulators.base.SimulatorError: 'Pendulm-v1' is not a registered gymnasium env; did you mean Pendulum-v1...?
    """  # noqa: E501 - a doctest's expected output is one line
    gym = _gymnasium()
    name = import_env_module(env_id)
    if name not in gym.registry:
        close = difflib.get_close_matches(name, list(gym.registry), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f" ({len(gym.registry)} ids are registered)"
        raise SimulatorError(f"{name!r} is not a registered gymnasium env{hint}")
    return name


def read_success(info: dict) -> bool | None:
    """``info["success"]``, else ``info["is_success"]``, as a bool; None when neither is there.

    >>> read_success({"is_success": 1.0}), read_success({"success": False, "is_success": True}), read_success({})
    (True, False, None)
    """
    for key in SUCCESS_KEYS:
        if key in info:
            return bool(np.asarray(info[key]).any())
    return None


def _is_image(value: np.ndarray) -> bool:
    return value.dtype == np.uint8 and value.ndim == 3 and value.shape[2] == 3


def flatten_observation(obs: Any, prefix: str = "") -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """(state parts in order, images by name) of one observation: dict keys in sorted order,
    depth first; uint8 ``[H, W, 3]`` arrays are images, everything else is flattened to float32.

    >>> parts, images = flatten_observation({"b": np.zeros(2), "a": {"y": 1.0, "x": np.ones(1)},
    ...                                      "cam": np.zeros((4, 4, 3), np.uint8)})
    >>> np.concatenate(parts).tolist(), list(images)
    ([1.0, 1.0, 0.0, 0.0], ['cam'])
    """
    if isinstance(obs, dict):
        parts: list[np.ndarray] = []
        images: dict[str, np.ndarray] = {}
        for key in sorted(obs):
            sub_parts, sub_images = flatten_observation(obs[key], f"{prefix}{key}/")
            parts += sub_parts
            images.update(sub_images)
        return parts, images
    value = np.asarray(obs)
    if _is_image(value):
        return [], {prefix.rstrip("/") or "image": np.ascontiguousarray(value)}
    return [value.astype(np.float32).reshape(-1)], {}


class GymnasiumSingleEnv(SingleEnv):
    """One gymnasium environment (lives in a simulator process or the env worker).

    Args:
        env_id: a registered id, or ``module:Id`` (the module is imported first).
        max_episode_steps: the episode limit the env is built with; None = the registered one.
        render: build with ``render_mode="rgb_array"`` (videos).
    """

    def __init__(self, env_id: str, max_episode_steps: int | None = None, render: bool = False):
        gym = _gymnasium()
        name = check_gymnasium_id(env_id)
        self.task_name = env_id
        kwargs: dict[str, Any] = {"disable_env_checker": True}
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = int(max_episode_steps)
        if render:
            kwargs["render_mode"] = "rgb_array"
        self._env = gym.make(name, **kwargs)
        space = self._env.action_space
        if not isinstance(space, gym.spaces.Box):
            self._env.close()
            raise SimulatorError(f"gymnasium env {env_id!r} has a {type(space).__name__} action space; "
                                 "env_type gymnasium takes Box action spaces only (the policy acts in [-1, 1])")
        low, high = np.asarray(space.low, np.float64).reshape(-1), np.asarray(space.high, np.float64).reshape(-1)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            self._env.close()
            raise SimulatorError(f"gymnasium env {env_id!r} has an action space with infinite bounds ({space}); "
                                 "the policy's [-1, 1] is scaled to the bounds, so they must be finite")
        self._low, self._high = low, high
        self._shape, self._dtype = space.shape, space.dtype
        limit = max_episode_steps or (self._env.spec.max_episode_steps if self._env.spec else None)
        self._max_steps = int(limit) if limit else None
        self._reported = False
        #: the action last sent to the env (after scaling), for tests and debugging
        self.last_env_action: np.ndarray | None = None

    def spec(self) -> SimSpec:
        if self._max_steps is None:
            raise SimulatorError(f"gymnasium env {self.task_name!r} registers no max_episode_steps; "
                                 "set env.<split>.max_episode_steps")
        dim = self._low.shape[0]
        return SimSpec(action_low=-np.ones(dim, np.float32), action_high=np.ones(dim, np.float32),
                       default_max_episode_steps=self._max_steps)

    def scale_action(self, action: np.ndarray) -> np.ndarray:
        """``[-1, 1]`` numbers -> the Box's bounds, shape and dtype."""
        a = np.clip(np.asarray(action, np.float64).reshape(-1), -1.0, 1.0)
        out = (self._low + (a + 1.0) * 0.5 * (self._high - self._low)).reshape(self._shape)
        return out.astype(self._dtype)

    def reset(self, state_id: int) -> SingleObs:
        raw, info = self._env.reset(seed=int(state_id))
        self._reported = False
        return self._obs(raw)

    def step(self, action: np.ndarray) -> SingleStep:
        self.last_env_action = self.scale_action(action)
        raw, reward, terminated, _truncated, info = self._env.step(self.last_env_action)
        success = read_success(info)
        self._reported = self._reported or success is not None
        return SingleStep(obs=self._obs(raw), reward=float(reward), terminated=bool(terminated),
                          success=bool(success), extras={"success_reported": float(self._reported)})

    def render(self) -> np.ndarray:
        frame = self._env.render()
        if frame is None:
            raise SimulatorError(f"gymnasium env {self.task_name!r} renders no frame (built without "
                                 "render_mode rgb_array; set env.<split>.video_cfg.save_video)")
        return np.ascontiguousarray(np.asarray(frame, dtype=np.uint8))

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def _obs(self, raw: Any) -> SingleObs:
        parts, images = flatten_observation(raw)
        state = np.concatenate(parts).astype(np.float32, copy=False) if parts else None
        return SingleObs(state=state, images=images)


def check_gymnasium_installed() -> None:
    """ImportError with the install line when ``gymnasium`` is missing (nothing imported)."""
    if importlib.util.find_spec("gymnasium") is None:
        raise ImportError(_NOT_INSTALLED)


def single_env_kwargs(cfg: Any) -> dict[str, Any]:
    """:class:`GymnasiumSingleEnv` keyword arguments from an ``env_type: gymnasium`` group."""
    return dict(env_id=cfg.init_params.id, max_episode_steps=cfg.max_episode_steps,
                render=bool(cfg.video_cfg.save_video))


def build_gymnasium_sim(cfg: Any, num_envs: int) -> BatchSim:
    """The :class:`BatchSim` for ``cfg`` (``env_type: gymnasium``): simulator processes (each
    imports the id's module itself), or the env worker's own process with ``sim_in_worker``."""
    check_gymnasium_installed()
    return build_cpu_sim(partial(GymnasiumSingleEnv, **single_env_kwargs(cfg)), num_envs, cfg,
                         str(cfg.init_params.id))
