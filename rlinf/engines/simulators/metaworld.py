"""``env_type: metaworld`` — Meta-World v3 manipulation tasks (Sawyer arm on MuJoCo), one
environment per worker process (or ``envs_per_process`` per process, or in the env worker with
``sim_in_worker``).

Tasks: one MT1 task by name (``init_params.id: reach-v3``) or a multi-task set as one env split
(``task_suite_name: MT10`` / ``MT50``, optionally ``task_ids`` to pick some of its tasks). The goal
is observable (the multi-task setting). With ``T`` selected tasks, reset state id ``k`` is task
``k % T`` started from the task's own random initial state drawn with seed ``k // T`` (object and
goal positions; same id, same state), so uniformly drawn ids spread the tasks evenly over the
environments of a split, each episode anew. A process keeps one MuJoCo model per task it has met.

Observations: ``states`` is Meta-World's 39-number vector (hand position, gripper opening, object
poses, the previous step's copy of them, goal position) as float32; a task set appends the one-hot
of the task's index in the set (10 or 50 numbers) as the benchmark does. ``obs_mode: rgb`` adds one
image per camera of ``init_params.camera_names`` (default ``corner2``), upright. The task
description is the task name. Actions: 4 numbers in ``[-1, 1]`` (end-effector position delta and
gripper). Reward: the task's dense v2 reward (0..10 a step); ``success`` is the env's
``info["success"]``. Meta-World never terminates an episode (success does not end it); episodes
are truncated at ``max_episode_steps`` (default: the task's ``max_path_length``, 500).

Rendering (images, videos) goes through ``mujoco.Renderer`` offscreen (``MUJOCO_GL``, ``egl`` by
default); a state-only run without videos opens no GL context. Shadows and multisampling are off
unless ``init_params.shadows``.

Example:
    >>> close_task_names("reach-v2")
    ['reach-v3', 'reach-wall-v3']
    >>> env = MetaWorldSingleEnv(["reach-v3"])  # one environment; make_vector_env batches them  # doctest: +SKIP
    >>> obs = env.reset(7); obs.state.shape, obs.task_description  # doctest: +SKIP
    ((39,), 'reach-v3')
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from rlinf.config.env import METAWORLD_MAX_PATH_LENGTH, METAWORLD_SUITES, EnvConfig
from rlinf.engines.simulators.base import SimulatorError
from rlinf.engines.simulators.episodes import BatchSim
from rlinf.engines.simulators.subproc import build_cpu_sim
from rlinf.envs.base import SimSpec, SingleEnv, SingleObs, SingleStep

__all__ = ["DEFAULT_CAMERA", "STATE_DIM", "MetaWorldSingleEnv", "build_metaworld_sim", "check_metaworld_installed",
           "close_task_names", "import_metaworld", "metaworld_tasks", "suite_task_names"]

#: Meta-World's observation length (goal observable).
STATE_DIM = 39
#: The camera images and videos come from unless ``init_params.camera_names`` names others.
DEFAULT_CAMERA = "corner2"

#: The 50 v3 task names (``metaworld.env_dict.ALL_V3_ENVIRONMENTS``), kept here so that a bad name
#: is refused without importing the library.
TASK_NAMES = (
    "assembly-v3", "basketball-v3", "bin-picking-v3", "box-close-v3", "button-press-topdown-v3",
    "button-press-topdown-wall-v3", "button-press-v3", "button-press-wall-v3", "coffee-button-v3",
    "coffee-pull-v3", "coffee-push-v3", "dial-turn-v3", "disassemble-v3", "door-close-v3",
    "door-lock-v3", "door-open-v3", "door-unlock-v3", "hand-insert-v3", "drawer-close-v3",
    "drawer-open-v3", "faucet-open-v3", "faucet-close-v3", "hammer-v3", "handle-press-side-v3",
    "handle-press-v3", "handle-pull-side-v3", "handle-pull-v3", "lever-pull-v3",
    "pick-place-wall-v3", "pick-out-of-hole-v3", "pick-place-v3", "plate-slide-v3",
    "plate-slide-side-v3", "plate-slide-back-v3", "plate-slide-back-side-v3", "peg-insert-side-v3",
    "peg-unplug-side-v3", "soccer-v3", "stick-push-v3", "stick-pull-v3", "push-v3", "push-wall-v3",
    "push-back-v3", "reach-v3", "reach-wall-v3", "shelf-place-v3", "sweep-into-v3", "sweep-v3",
    "window-open-v3", "window-close-v3",
)
#: MT10's tasks in the benchmark's order (their index is the one-hot position).
MT10_TASKS = ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3", "drawer-close-v3",
              "button-press-topdown-v3", "peg-insert-side-v3", "window-open-v3", "window-close-v3")


_NOT_INSTALLED = "Meta-World is not installed: run `bash scripts/setup_env.sh --extras metaworld`"


def close_task_names(name: str, n: int = 3) -> list[str]:
    """Up to ``n`` v3 task names close to ``name`` (for error messages)."""
    return difflib.get_close_matches(name, TASK_NAMES, n=n)


def unknown_task_message(name: str) -> str:
    """One line saying ``name`` is no Meta-World v3 task, with close matches."""
    close = close_task_names(name)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"{name!r} is not a Meta-World v3 task{hint} ({len(TASK_NAMES)} tasks, e.g. reach-v3, push-v3)"


def suite_task_names(suite: str) -> tuple[str, ...]:
    """The tasks of a multi-task set in the benchmark's order.

    >>> suite_task_names("MT10")[:3]
    ('reach-v3', 'push-v3', 'pick-place-v3')
    >>> len(suite_task_names("MT50"))
    50
    """
    if suite == "MT10":
        return MT10_TASKS
    if suite == "MT50":
        return TASK_NAMES
    raise SimulatorError(f"unknown Meta-World task set {suite!r}; expected one of {', '.join(METAWORLD_SUITES)}")


def metaworld_tasks(cfg: EnvConfig) -> tuple[list[str], int]:
    """(selected task names, one-hot size; 0 for a single MT1 task) of an ``env_type: metaworld``
    group.

    >>> from rlinf.config.env import EnvConfig, EnvInitParams
    >>> metaworld_tasks(EnvConfig(env_type="metaworld", task_suite_name="MT10", task_ids=(0, 2)))
    (['reach-v3', 'pick-place-v3'], 10)
    >>> metaworld_tasks(EnvConfig(env_type="metaworld", init_params=EnvInitParams(id="push-v3")))
    (['push-v3'], 0)
    """
    if cfg.task_suite_name is not None:
        names = suite_task_names(cfg.task_suite_name)
        ids = list(cfg.task_ids) if cfg.task_ids else list(range(len(names)))
        return [names[i] for i in ids], len(names)
    name = cfg.init_params.id
    if name not in TASK_NAMES:
        raise SimulatorError(unknown_task_message(str(name)))
    return [name], 0


def import_metaworld() -> Any:
    """``import metaworld``, with ``MUJOCO_GL`` defaulting to ``egl`` first (MuJoCo picks its GL
    backend when it is first imported; nothing is opened until something renders); ImportError
    with the install line when it is missing."""
    gl = os.environ.setdefault("MUJOCO_GL", "egl")
    if gl in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", gl)
    try:
        # lazy: optional extra (metaworld, with mujoco)
        import metaworld
    except ImportError as exc:
        raise ImportError(_NOT_INSTALLED) from exc
    return metaworld


def _offscreen_gl_context() -> None:
    """MuJoCo reads ``MUJOCO_GL`` once, when it is first imported; another library (ManiSkill)
    may have imported it before without the variable, leaving the windowed GLFW backend, which
    fails without a display. Switch the renderer's context class to the offscreen backend that
    ``MUJOCO_GL`` names (egl / osmesa) in that case."""
    # lazy: optional extra (metaworld, with mujoco)
    from mujoco import gl_context

    wanted = os.environ.get("MUJOCO_GL", "").lower()
    if wanted in ("egl", "osmesa") and gl_context.GLContext.__module__ == "mujoco.glfw":
        os.environ.setdefault("PYOPENGL_PLATFORM", wanted)
        if wanted == "egl":
            # lazy: optional extra (metaworld, with mujoco)
            from mujoco.egl import GLContext
        else:
            # lazy: optional extra (metaworld, with mujoco)
            from mujoco.osmesa import GLContext
        gl_context.GLContext = GLContext


def check_metaworld_installed() -> None:
    """ImportError with the install line when the ``metaworld`` package is missing (without
    importing it: that takes seconds)."""
    if importlib.util.find_spec("metaworld") is None:
        raise ImportError(_NOT_INSTALLED)


def _new_task_env(name: str) -> Any:
    """A Meta-World env of task ``name`` with the goal observable, drawing its initial state from
    its own seeded generator on every reset (as ``ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE`` builds
    them, without their fixed state)."""
    # lazy: optional extra (metaworld, with mujoco)
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS

    env = ALL_V3_ENVIRONMENTS[name]()
    env._partially_observable = False
    del env.sawyer_observation_space  # a cached property that depends on the flag above
    env._set_task_called = True
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True
    # the episode layer truncates; the env itself refuses to step past its own limit
    env.max_path_length = 10**9
    return env


class MetaWorldSingleEnv(SingleEnv):
    """One Meta-World environment over the selected tasks (lives in a worker process).

    Args:
        task_names: tasks this environment may be reset into (state id ``k``: task ``k % T``).
        one_hot_size: length of the task one-hot appended to the state (the task set's size);
            0 = none (MT1).
        task_indices: each task's position in the one-hot; default ``0..T-1``.
        obs_mode: ``state`` or ``rgb`` (adds camera images).
        camera_size: ``(height, width)`` of images and video frames.
        camera_names: cameras returned as images; the first one renders videos.
        shadows: keep MuJoCo shadows and multisampling in rendering.
    """

    ACTION_DIM = 4
    DEFAULT_MAX_STEPS = METAWORLD_MAX_PATH_LENGTH

    def __init__(self, task_names: Sequence[str], one_hot_size: int = 0, task_indices: Sequence[int] | None = None,
                 obs_mode: str = "state", camera_size: tuple[int, int] = (128, 128),
                 camera_names: Sequence[str] = (DEFAULT_CAMERA,), shadows: bool = False):
        unknown = [t for t in task_names if t not in TASK_NAMES]
        if unknown:
            raise SimulatorError(unknown_task_message(unknown[0]))
        import_metaworld()
        self._tasks = list(task_names)
        self._indices = list(task_indices) if task_indices is not None else list(range(len(self._tasks)))
        self._one_hot = one_hot_size
        self._obs_mode = obs_mode
        self._camera_size = camera_size
        self._camera_names = list(camera_names)
        self._shadows = shadows
        self._envs: dict[str, Any] = {}
        self._renderers: dict[str, Any] = {}
        self._upside_down: dict[tuple[str, str], bool] = {}
        self._env: Any = None
        self._task_pos = 0
        self.task_name = self._tasks[0] if len(self._tasks) == 1 else f"Meta-World tasks {self._tasks}"

    def spec(self) -> SimSpec:
        return SimSpec(action_low=-np.ones(self.ACTION_DIM, np.float32),
                       action_high=np.ones(self.ACTION_DIM, np.float32),
                       default_max_episode_steps=self.DEFAULT_MAX_STEPS)

    def reset(self, state_id: int) -> SingleObs:
        self._task_pos = int(state_id) % len(self._tasks)
        name = self._tasks[self._task_pos]
        if name not in self._envs:
            self._envs[name] = _new_task_env(name)
        self._env = self._envs[name]
        self.task_name = name
        self._env.seed(int(state_id) // len(self._tasks))
        raw, _ = self._env.reset()
        return self._obs(raw)

    def step(self, action: np.ndarray) -> SingleStep:
        raw, reward, _, _, info = self._env.step(np.asarray(action, dtype=np.float32))
        success = bool(info.get("success", 0.0))
        return SingleStep(obs=self._obs(raw), reward=float(reward), terminated=False, success=success)

    def render(self) -> np.ndarray:
        return self._image(self._camera_names[0])

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers = {}
        for env in self._envs.values():
            env.close()
        self._envs = {}
        self._env = None

    def _renderer(self) -> Any:
        # lazy: optional extra (metaworld, with mujoco)
        import mujoco

        _offscreen_gl_context()

        name = self.task_name
        if name not in self._renderers:
            model = self._env.model
            if not self._shadows:
                model.vis.quality.shadowsize = 0
                model.vis.quality.offsamples = 0
            height, width = self._camera_size
            model.vis.global_.offheight = max(int(model.vis.global_.offheight), height)
            model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), width)
            self._renderers[name] = mujoco.Renderer(model, height, width)
        return self._renderers[name]

    def _image(self, camera: str) -> np.ndarray:
        renderer = self._renderer()
        try:
            renderer.update_scene(self._env.data, camera=camera)
        except (ValueError, KeyError) as exc:
            raise SimulatorError(f"Meta-World task {self.task_name} has no camera {camera!r} "
                                 f"(env.<split>.init_params.camera_names): {exc}") from None
        frame = renderer.render()
        key = (self.task_name, camera)
        if key not in self._upside_down:
            # Meta-World's corner cameras are defined upside down (the image "up" axis points
            # down in the world); rotating by 180 degrees makes them upright without mirroring.
            # lazy: optional extra (metaworld, with mujoco)
            import mujoco

            cam_id = mujoco.mj_name2id(self._env.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
            up_z = float(self._env.data.cam_xmat[cam_id].reshape(3, 3)[2, 1])
            self._upside_down[key] = up_z < 0
        if self._upside_down[key]:
            frame = frame[::-1, ::-1]
        return np.ascontiguousarray(frame)

    def _obs(self, raw: np.ndarray) -> SingleObs:
        state = np.asarray(raw, dtype=np.float32)
        if self._one_hot:
            hot = np.zeros(self._one_hot, dtype=np.float32)
            hot[self._indices[self._task_pos]] = 1.0
            state = np.concatenate([state, hot])
        images = {c: self._image(c) for c in self._camera_names} if self._obs_mode != "state" else {}
        return SingleObs(state=state, images=images, task_description=self.task_name)


def single_env_kwargs(cfg: EnvConfig) -> dict[str, Any]:
    """:class:`MetaWorldSingleEnv` keyword arguments from an ``env_type: metaworld`` group."""
    names, one_hot = metaworld_tasks(cfg)
    indices = None
    if cfg.task_suite_name is not None:
        suite = suite_task_names(cfg.task_suite_name)
        indices = [suite.index(n) for n in names]
    p = cfg.init_params
    size = (p.camera_heights or p.camera_widths or 128, p.camera_widths or p.camera_heights or 128)
    return dict(task_names=names, one_hot_size=one_hot, task_indices=indices, obs_mode=p.obs_mode,
                camera_size=size, camera_names=p.cameras_for("metaworld"), shadows=p.shadows)


def build_metaworld_sim(cfg: EnvConfig, num_envs: int) -> BatchSim:
    """The :class:`BatchSim` for ``cfg`` (``env_type: metaworld``): simulator processes, or the
    env worker's own process with ``sim_in_worker``."""
    kwargs = single_env_kwargs(cfg)  # a bad task name fails here, before any process starts
    check_metaworld_installed()
    label = cfg.init_params.id or f"{cfg.task_suite_name} tasks {list(cfg.task_ids) if cfg.task_ids else 'all'}"
    return build_cpu_sim(partial(MetaWorldSingleEnv, **kwargs), num_envs, cfg, label)
