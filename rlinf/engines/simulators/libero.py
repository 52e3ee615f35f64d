"""``env_type: libero`` — LIBERO suites (robosuite on MuJoCo), one environment per worker process.

Reset states are the suites' benchmark init states: with the selected tasks ``t_0, t_1, ...``
(``task_ids``, default all), state id ``k`` is init state ``k % S`` of task ``t_(k // S)``, where
``S`` is the number of init states per task (50), so ``num_reset_states = len(task_ids) * S``.
Resetting into another task rebuilds that process's environment (~3-10 s); other resets take
~0.3 s.

Observations: one image per camera (default ``agentview`` and ``robot0_eye_in_hand``, rotated
180 degrees to be upright, as OpenVLA's LIBERO evaluation does), ``states`` = end-effector
position (3), its orientation as axis-angle (3) and the two gripper finger positions (2), and the
task's language instruction. Actions: 7 numbers in ``[-1, 1]`` (OSC pose delta, gripper: -1 open,
+1 close). Reward: 1 when the task's goal predicate holds, else 0; success terminates.

Rendering is offscreen through ``MUJOCO_GL`` (``egl`` by default; ``osmesa`` without EGL). Shadows
and multisampling are off unless ``init_params.shadows`` (about 1.6x faster on CPU).

Example:
    >>> from rlinf.config.env import EnvConfig
    >>> from rlinf.engines.simulators import make_vector_env
    >>> cfg = EnvConfig(env_type="libero", task_suite_name="libero_spatial", task_ids=(0,))
    >>> env = make_vector_env(cfg, num_envs=2)  # doctest: +SKIP
    >>> obs = env.reset(reset_state_ids=[0, 1])  # doctest: +SKIP
    >>> obs.images["agentview"].shape, obs.states.shape  # doctest: +SKIP
    (torch.Size([2, 128, 128, 3]), torch.Size([2, 8]))
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from rlinf.config.env import LIBERO_SUITES, EnvConfig
from rlinf.engines.simulators.episodes import BatchSim
from rlinf.engines.simulators.libero_setup import check_libero_assets, ensure_libero_config, libero_assets_dir
from rlinf.engines.simulators.subproc import SubprocBatchSim
from rlinf.envs.base import SimSpec, SingleEnv, SingleObs, SingleStep

__all__ = ["LiberoSingleEnv", "build_libero_sim", "prepare_libero"]


def prepare_libero() -> str:
    """Config file, assets and GL backend, before ``import libero``; returns the asset folder."""
    assets = check_libero_assets(libero_assets_dir(ensure_libero_config()))
    gl = os.environ.setdefault("MUJOCO_GL", "egl")
    if gl in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", gl)
    # lazy: optional extra (libero)
    import libero.libero as libero_pkg

    # hf-libero resolves assets through this cache first; the config's folder wins over its
    # package-relative default and over a download.
    libero_pkg._assets_path_cache = str(assets)
    return str(assets)


def _no_shadows(xml: str) -> str:
    root = ET.fromstring(xml)
    visual = root.find("visual")
    if visual is None:
        visual = ET.SubElement(root, "visual")
    quality = visual.find("quality")
    if quality is None:
        quality = ET.SubElement(visual, "quality")
    quality.set("shadowsize", "0")
    quality.set("offsamples", "0")
    return ET.tostring(root, encoding="unicode")


def _axis_angle(quat: np.ndarray) -> np.ndarray:
    """(x, y, z, w) quaternion -> axis * angle."""
    w = float(np.clip(quat[3], -1.0, 1.0))
    den = np.sqrt(1.0 - w * w)
    if den < 1e-8:
        return np.zeros(3, dtype=np.float32)
    return (quat[:3] * 2.0 * np.arccos(w) / den).astype(np.float32)


class LiberoSingleEnv(SingleEnv):
    """One LIBERO environment over the selected tasks of a suite (lives in a worker process).

    Args:
        suite: suite name (``libero_spatial`` ...).
        task_ids: tasks of the suite this env may be reset into; None = all.
        camera_size: ``(height, width)`` of every camera.
        camera_names: cameras returned as images.
        shadows: keep MuJoCo shadows and multisampling.
    """

    ACTION_DIM = 7
    #: end-effector position (3) + axis-angle orientation (3) + gripper joint positions (2)
    STATE_DIM = 8

    def __init__(self, suite: str, task_ids: Sequence[int] | None = None, camera_size: tuple[int, int] = (128, 128),
                 camera_names: Sequence[str] = ("agentview", "robot0_eye_in_hand"), shadows: bool = False):
        prepare_libero()
        # lazy: optional extra (libero)
        from libero.libero import benchmark

        self._suite_name = suite
        self._suite = benchmark.get_benchmark_dict()[suite]()
        self._task_ids = list(task_ids) if task_ids else list(range(self._suite.n_tasks))
        self._init_states = {t: self._suite.get_task_init_states(t) for t in self._task_ids}
        self._per_task = min(len(s) for s in self._init_states.values())
        self._camera_size = camera_size
        self._camera_names = list(camera_names)
        self._shadows = shadows
        self._env: Any = None
        self._task_id: int | None = None
        self._last: dict[str, Any] = {}
        self.task_name = f"{suite} tasks {self._task_ids}"

    def spec(self) -> SimSpec:
        return SimSpec(action_low=-np.ones(self.ACTION_DIM, np.float32),
                       action_high=np.ones(self.ACTION_DIM, np.float32),
                       default_max_episode_steps=LIBERO_SUITES[self._suite_name][1],
                       num_reset_states=len(self._task_ids) * self._per_task)

    def reset(self, state_id: int) -> SingleObs:
        task_id = self._task_ids[state_id // self._per_task]
        if task_id != self._task_id:
            self._build(task_id)
        self._env.seed(state_id)  # robosuite places fixtures (not part of the MuJoCo state) at random
        self._env.reset()
        self._last = self._env.set_init_state(self._init_states[task_id][state_id % self._per_task])
        return self._obs()

    def step(self, action: np.ndarray) -> SingleStep:
        self._last, _, _, _ = self._env.step(np.asarray(action, dtype=np.float64))
        success = bool(self._env.check_success())
        return SingleStep(obs=self._obs(), reward=float(success), terminated=success, success=success)

    def render(self) -> np.ndarray:
        name = "agentview" if "agentview" in self._camera_names else self._camera_names[0]
        return self._image(name)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def _build(self, task_id: int) -> None:
        # lazy: optional extra (libero)
        from libero.libero import get_libero_path
        from libero.libero.envs import OffScreenRenderEnv

        self.close()
        task = self._suite.get_task(task_id)
        bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
        self.task_name = f"{self._suite_name} task {task_id} ({task.language})"
        self._env = OffScreenRenderEnv(bddl_file_name=bddl, camera_names=self._camera_names,
                                       camera_heights=self._camera_size[0], camera_widths=self._camera_size[1],
                                       ignore_done=True, horizon=10**9)
        if not self._shadows:
            self._env.env.set_xml_processor(_no_shadows)
        self._env.reset()  # a hard reset: reloads the model (through the processor) once
        # Later resets only reset the simulation (0.3 s instead of 1.7 s); set_init_state then
        # restores the full MuJoCo state, so episodes are the same.
        self._env.env.hard_reset = False
        self._task_id = task_id
        self._description = task.language

    def _image(self, name: str) -> np.ndarray:
        return np.ascontiguousarray(self._last[f"{name}_image"][::-1, ::-1])

    def _obs(self) -> SingleObs:
        o = self._last
        state = np.concatenate([o["robot0_eef_pos"], _axis_angle(o["robot0_eef_quat"]),
                                o["robot0_gripper_qpos"]]).astype(np.float32)
        return SingleObs(state=state, images={n: self._image(n) for n in self._camera_names},
                         task_description=self._description)


def build_libero_sim(cfg: EnvConfig, num_envs: int) -> BatchSim:
    """The process-vectorised :class:`BatchSim` for ``cfg`` (``env_type: libero``)."""
    check_libero_assets(libero_assets_dir(ensure_libero_config()))  # fail before processes start
    p = cfg.init_params
    size = (p.camera_heights or p.camera_widths or 128, p.camera_widths or p.camera_heights or 128)
    assert cfg.task_suite_name is not None, "validated by EnvConfig"
    factory = partial(LiberoSingleEnv, cfg.task_suite_name, task_ids=cfg.task_ids, camera_size=size,
                      camera_names=p.cameras_for("libero"), shadows=p.shadows)
    label = f"{cfg.task_suite_name} tasks {list(cfg.task_ids) if cfg.task_ids else 'all'}"
    return SubprocBatchSim([factory] * num_envs, labels=[label] * num_envs,
                           step_timeout_s=cfg.step_timeout_s, start_timeout_s=cfg.start_timeout_s)
