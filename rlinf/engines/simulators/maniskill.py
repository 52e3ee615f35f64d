"""``env_type: maniskill`` — ManiSkill3 tasks (SAPIEN physics, Vulkan rendering).

On CPU, a ManiSkill env object holds one environment ("Cannot set the sim backend to 'cpu' and
have multiple environments"), so ``N`` environments are ``N`` :class:`ManiSkillSingleEnv` in
worker processes (a :class:`~rlinf.engines.simulators.subproc.SubprocBatchSim`), one per
process or ``env.<split>.envs_per_process`` per process, or stepped by the env worker itself
(``env.<split>.sim_in_worker``, a :class:`~rlinf.engines.simulators.single.SerialBatchSim`).
With CUDA, :class:`ManiSkillGPUSim` runs all ``N`` in one process (``sim_backend="gpu"``); that
path is not exercised by the CPU test suite.

Observations: ``obs_mode: state`` gives the task's flat state vector as ``states``; image modes
give each camera's ``rgb`` in ``images`` and the agent + extra entries, flattened and
concatenated, as ``states``. The reset state id is the episode seed.

Tasks that need downloaded assets (``PutCarrotOnPlateInScene-v1``, YCB, PartNet, ...) are
checked before ManiSkill starts: a missing asset raises :class:`MissingAssetsError` naming it and
where it must go (under ``MS_ASSET_DIR``), instead of ManiSkill's download prompt.

Example:
    >>> from rlinf.config.env import EnvConfig, EnvInitParams
    >>> from rlinf.engines.simulators import make_vector_env
    >>> cfg = EnvConfig(env_type="maniskill", init_params=EnvInitParams(id="PickCube-v1"))
    >>> env = make_vector_env(cfg, num_envs=2)  # doctest: +SKIP
    >>> env.reset(seed=0).states.shape  # doctest: +SKIP
    torch.Size([2, 42])
    >>> env.close()  # doctest: +SKIP
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf.config.env import EnvConfig
from rlinf.engines.simulators.base import EnvObs, SimulatorError
from rlinf.engines.simulators.episodes import BatchSim, SimStep
from rlinf.engines.simulators.subproc import build_cpu_sim
from rlinf.envs.base import SimSpec, SingleEnv, SingleObs, SingleStep
from rlinf.utils.global_random import GLOBAL_RANDOM_LOCK

__all__ = ["ManiSkillGPUSim", "ManiSkillSingleEnv", "MissingAssetsError", "build_maniskill_sim",
           "check_maniskill_assets", "missing_maniskill_assets", "vulkan_unavailable_reason"]

VULKAN_HINT = ("ManiSkill renders through Vulkan even for state observations; without a GPU it needs "
               "Mesa >= 23 lavapipe (Debian 12: mesa-vulkan-drivers from bookworm-backports, which "
               "scripts/setup_system_sim.sh installs when run as root)")


class MissingAssetsError(SimulatorError):
    """A simulator task needs asset files that are not installed (nothing is downloaded)."""


def _import_maniskill() -> None:
    # A missing asset must never turn into an interactive prompt; assets are checked beforehand.
    os.environ.setdefault("MS_SKIP_ASSET_DOWNLOAD_PROMPT", "1")
    try:
        # lazy: optional extra (embodied: mani-skill, sapien, gymnasium)
        import mani_skill.envs  # noqa: F401  (registers the tasks)
    except ImportError as exc:
        raise ImportError("ManiSkill3 is not installed: run `bash scripts/setup_env.sh --extras embodied`") from exc


def vulkan_unavailable_reason(timeout_s: float = 60.0) -> str | None:
    """Why SAPIEN cannot create a Vulkan render device here, or None if it can.

    Probed in a fresh interpreter (a failed Vulkan init can leave the process unusable).
    """
    probe = "import sapien; sapien.render.RenderSystem()"
    try:
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"creating a SAPIEN render device took over {timeout_s:g} s"
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    return f"{lines[-1] if lines else f'exit code {proc.returncode}'}. {VULKAN_HINT}"


def missing_maniskill_assets(env_id: str) -> list[tuple[str, Path]]:
    """(asset id, expected path) of every asset task ``env_id`` needs that is not installed.

    An empty folder counts as missing (a failed download leaves one behind).
    """
    _import_maniskill()
    # lazy: optional extra (embodied: mani-skill, sapien, gymnasium)
    from mani_skill.utils import assets
    from mani_skill.utils.registration import REGISTERED_ENVS

    if env_id not in REGISTERED_ENVS:
        known = ", ".join(sorted(REGISTERED_ENVS)[:8])
        raise SimulatorError(f"unknown ManiSkill task {env_id!r} (registered: {known}, ...)")
    missing = []
    for group in REGISTERED_ENVS[env_id].asset_download_ids or []:
        ids = (assets.expand_data_group_into_individual_data_source_ids(group)
               if group in assets.DATA_GROUPS else [group])
        for asset_id in ids:
            source = assets.DATA_SOURCES[asset_id]
            path = Path(source.output_dir) / source.target_path
            if not (path.is_file() or (path.is_dir() and any(path.iterdir()))):
                missing.append((asset_id, path))
    return missing


def check_maniskill_assets(env_id: str) -> None:
    """Raise :class:`MissingAssetsError` if ``env_id`` needs assets that are not installed."""
    missing = missing_maniskill_assets(env_id)
    if not missing:
        return
    # lazy: optional extra (embodied: mani-skill, sapien, gymnasium)
    from mani_skill import ASSET_DIR

    shown = "; ".join(f"{a} -> {p}" for a, p in missing[:5])
    more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
    raise MissingAssetsError(
        f"ManiSkill task {env_id} needs assets that are not installed: {shown}{more}. They are "
        f"looked up under ASSET_DIR = $MS_ASSET_DIR/data (now {ASSET_DIR}). Fetch them where there "
        f"is network access (`python -m mani_skill.utils.download_asset {env_id}`), copy them to "
        f"those paths and set MS_ASSET_DIR; nothing is downloaded at run time.")


def _make_kwargs(obs_mode: str, control_mode: str | None, reward_mode: str | None,
                 camera_size: tuple[int, int] | None, sim_config: dict[str, Any] | None,
                 sensor_configs: dict[str, Any] | None,
                 human_render_camera_configs: dict[str, Any] | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"obs_mode": obs_mode, "render_mode": "rgb_array"}
    if control_mode is not None:
        kwargs["control_mode"] = control_mode
    if reward_mode is not None:
        kwargs["reward_mode"] = reward_mode
    sensors = dict(sensor_configs or {})
    if camera_size is not None:
        sensors.update(height=camera_size[0], width=camera_size[1])
    if sensors:
        kwargs["sensor_configs"] = sensors
    if sim_config:
        kwargs["sim_config"] = dict(sim_config)
    if human_render_camera_configs:
        kwargs["human_render_camera_configs"] = dict(human_render_camera_configs)
    return kwargs


def _split_obs(raw: Any) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """ManiSkill batched obs -> (states [N, D] float32 or None, camera -> [N, H, W, 3] uint8)."""
    if isinstance(raw, torch.Tensor):
        return raw.to(torch.float32), {}
    parts = []
    for key in ("agent", "extra"):
        for value in (raw.get(key) or {}).values():
            parts.append(value.reshape(value.shape[0], -1).to(torch.float32))
    images = {cam: data["rgb"][..., :3].to(torch.uint8)
              for cam, data in (raw.get("sensor_data") or {}).items() if "rgb" in data}
    return (torch.cat(parts, dim=1) if parts else None), images


def _instructions(env: Any, n: int, default: str | None = None) -> list[str] | None:
    get = getattr(env, "get_language_instruction", None)
    if get is None:
        return None if default is None else [default] * n
    texts = get()
    return [str(t) for t in texts] if isinstance(texts, (list, tuple)) else [str(texts)] * n


@cache
def cpu_sim_render_backend() -> str:
    """The render device of a CPU-simulated environment: ``"gpu"`` where SAPIEN finds a CUDA device,
    else ``"cpu"`` (asked once per process). ManiSkill's default ``"gpu"`` falls back to the CPU by
    itself on a machine without CUDA, but logs "Requested to use render device ..., but CUDA
    device was not found" for every environment it builds."""
    # lazy: optional extra (embodied: mani-skill, sapien, gymnasium)
    import sapien

    try:
        sapien.Device("cuda")
    except RuntimeError:
        return "cpu"
    return "gpu"


def _is_vulkan_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(k in text for k in ("vk::", "vulkan", "physical device", "rendering device"))


def _default_steps(env_id: str) -> int:
    # lazy: optional extra (embodied: mani-skill, sapien, gymnasium)
    from mani_skill.utils.registration import REGISTERED_ENVS

    return int(REGISTERED_ENVS[env_id].max_episode_steps or 100)


class ManiSkillSingleEnv(SingleEnv):
    """One CPU-simulated ManiSkill environment (lives in a worker process).

    Args:
        env_id: task id, e.g. ``PickCube-v1``.
        obs_mode, control_mode, reward_mode, sim_config, sensor_configs,
            human_render_camera_configs: as in ``env.<split>.init_params``.
        camera_size: ``(height, width)`` of the task's cameras; None = the task's default.
        instruction: sent with every observation when the task has no instruction of its own.
    """

    def __init__(self, env_id: str, obs_mode: str = "state", control_mode: str | None = None,
                 reward_mode: str | None = None, camera_size: tuple[int, int] | None = None,
                 sim_config: dict[str, Any] | None = None, sensor_configs: dict[str, Any] | None = None,
                 human_render_camera_configs: dict[str, Any] | None = None, instruction: str | None = None):
        check_maniskill_assets(env_id)
        # lazy: optional extra (embodied: mani-skill, sapien, gymnasium)
        import gymnasium as gym

        kwargs = _make_kwargs(obs_mode, control_mode, reward_mode, camera_size, sim_config,
                              sensor_configs, human_render_camera_configs)
        try:
            # The raw task: no gymnasium wrappers (the episode layer does time limits and resets).
            self._env = gym.make(env_id, num_envs=1, sim_backend="cpu", render_backend=cpu_sim_render_backend(),
                                 **kwargs).unwrapped
        except RuntimeError as exc:
            if _is_vulkan_error(exc):
                raise SimulatorError(f"{exc}. {VULKAN_HINT}") from exc
            raise
        self.task_name = env_id
        self._instruction = instruction
        self._steps = _default_steps(env_id)

    def spec(self) -> SimSpec:
        space = self._env.single_action_space
        return SimSpec(action_low=np.asarray(space.low, np.float32), action_high=np.asarray(space.high, np.float32),
                       default_max_episode_steps=self._steps)

    def reset(self, state_id: int) -> SingleObs:
        raw, _ = self._env.reset(seed=int(state_id))
        return self._obs(raw)

    def step(self, action: np.ndarray) -> SingleStep:
        raw, reward, terminated, _, info = self._env.step(action)
        success = info.get("success")
        return SingleStep(obs=self._obs(raw), reward=float(reward.reshape(-1)[0]),
                          terminated=bool(terminated.reshape(-1)[0]),
                          success=bool(success.reshape(-1)[0]) if success is not None else False)

    def render(self) -> np.ndarray:
        return self._env.render()[0, ..., :3].cpu().numpy().astype(np.uint8, copy=False)

    def close(self) -> None:
        self._env.close()

    def _obs(self, raw: Any) -> SingleObs:
        states, images = _split_obs(raw)
        texts = _instructions(self._env, 1, self._instruction)
        return SingleObs(state=None if states is None else states[0].cpu().numpy(),
                         images={k: v[0].cpu().numpy() for k, v in images.items()},
                         task_description=texts[0] if texts else None)


class ManiSkillGPUSim(BatchSim):
    """``N`` ManiSkill environments simulated together on CUDA (``sim_backend="gpu"``).

    Untested here (no GPU in CI). Per-environment seeds are honoured as ManiSkill honours them on
    GPU: exactly for whole-batch resets, best effort for partial ones.
    """

    def __init__(self, num_envs: int, env_id: str, **kwargs: Any):
        check_maniskill_assets(env_id)
        # lazy: optional extra (embodied: mani-skill, sapien, gymnasium)
        import gymnasium as gym

        camera_size = kwargs.pop("camera_size", None)
        self._instruction = kwargs.pop("instruction", None)
        make_kwargs = _make_kwargs(camera_size=camera_size, **kwargs)
        self._env = gym.make(env_id, num_envs=num_envs, sim_backend="gpu", **make_kwargs).unwrapped
        self.device = torch.device(self._env.device)
        space = self._env.single_action_space
        self._spec = SimSpec(action_low=np.asarray(space.low, np.float32),
                             action_high=np.asarray(space.high, np.float32),
                             default_max_episode_steps=_default_steps(env_id))
        self._n = num_envs

    @property
    def num_envs(self) -> int:
        return self._n

    @property
    def spec(self) -> SimSpec:
        return self._spec

    def reset(self, env_ids: np.ndarray, state_ids: np.ndarray) -> EnvObs:
        options = {} if len(env_ids) == self._n else {"env_idx": torch.as_tensor(env_ids, device=self.device)}
        with GLOBAL_RANDOM_LOCK:  # ManiSkill seeds torch's process-wide generator and draws from it
            raw, _ = self._env.reset(seed=[int(s) for s in state_ids], options=options)
        return self._obs(raw)

    def step(self, actions: torch.Tensor) -> SimStep:
        raw, reward, terminated, _, info = self._env.step(actions)
        success = info.get("success", torch.zeros_like(terminated))
        return SimStep(obs=self._obs(raw), rewards=reward.to(torch.float32),
                       terminations=terminated.to(torch.bool), successes=success.to(torch.bool))

    def render(self) -> np.ndarray:
        return self._env.render()[..., :3].cpu().numpy().astype(np.uint8, copy=False)

    def close(self) -> None:
        self._env.close()

    def _obs(self, raw: Any) -> EnvObs:
        states, images = _split_obs(raw)
        return EnvObs(states=states, images=images,
                      task_descriptions=_instructions(self._env, self._n, self._instruction))


def single_env_kwargs(p: Any) -> dict[str, Any]:
    """:class:`ManiSkillSingleEnv` keyword arguments (all but the task id) from
    ``env.<split>.init_params``."""
    camera_size = None
    if p.camera_heights is not None or p.camera_widths is not None:
        camera_size = (p.camera_heights or p.camera_widths, p.camera_widths or p.camera_heights)
    return dict(obs_mode=p.obs_mode, control_mode=p.control_mode, reward_mode=p.reward_mode,
                camera_size=camera_size, sim_config=p.sim_config, sensor_configs=p.sensor_configs,
                human_render_camera_configs=p.human_render_camera_configs, instruction=p.instruction)


def build_maniskill_sim(cfg: EnvConfig, num_envs: int) -> BatchSim:
    """The :class:`BatchSim` for ``cfg`` (``env_type: maniskill``): processes on CPU (or this
    process with ``sim_in_worker``), one GPU batch with CUDA (``init_params.sim_backend``)."""
    p = cfg.init_params
    assert p.id is not None, "validated by EnvConfig"
    check_maniskill_assets(p.id)  # fail before any process starts
    kwargs = single_env_kwargs(p)
    backend = p.sim_backend
    if backend == "auto":
        backend = "gpu" if torch.cuda.is_available() else "cpu"
    if backend == "gpu":
        return ManiSkillGPUSim(num_envs, p.id, **kwargs)
    return build_cpu_sim(partial(ManiSkillSingleEnv, p.id, **kwargs), num_envs, cfg, p.id)
