"""Ask a simulator library what one environment of ``env.<split>`` looks like, in this process and
before any worker starts (:func:`probe_obs_spec`).

* ``toy``: one :class:`~rlinf.envs.toy_reach.ToyReachEnv`, reset once.
* ``maniskill``: the task id must be registered and its assets installed; one CPU environment is
  built with the split's modes (whatever ``sim_backend`` the run uses: shapes do not depend on
  it), reset once and closed (about 3 s with the import).
* ``metaworld``: the task name must be a v3 task (close matches named otherwise) and the library
  installed; one environment of the first selected task is built, reset once and closed (about
  5 s with the import; with ``obs_mode: rgb`` its cameras render once).
* ``gymnasium``: the id's module (``module:Id``) must import, the id be registered (close ids
  named otherwise) and its action space a bounded Box; one env is built, reset once and closed
  (and, with ``video_cfg.save_video``, rendered once).
* ``libero``: the library, its config file and assets must be present; shapes come from the
  adapter (7-D actions, an 8-D state, one image per camera), no MuJoCo scene is loaded.

A failure is a :class:`~rlinf.utils.typed_config.ConfigError` naming the split's key.

Example:
    >>> from rlinf.config.env import EnvConfig
    >>> spec = probe_obs_spec(EnvConfig(env_type="toy", total_num_envs=2), "env.train")
    >>> spec.state_dim, len(spec.action_low), spec.image_shape
    (4, 2, None)
"""

from __future__ import annotations

import difflib
import logging
from typing import Any

from rlinf.engines.simulators.base import SimulatorError
from rlinf.models.embodied.base import ObsSpec
from rlinf.utils.typed_config import ConfigError

_cache: dict[tuple, ObsSpec] = {}


def probe_obs_spec(cfg: Any, key: str) -> ObsSpec:
    """The :class:`ObsSpec` the env workers of split ``cfg`` (an ``EnvConfig`` at ``key``) will
    report. Results are cached per distinct simulator settings for the life of the process."""
    p = cfg.init_params
    ident = (cfg.env_type, p.id, cfg.video_cfg.save_video, p.obs_mode, p.control_mode, p.camera_heights,
             p.camera_widths, p.camera_names, cfg.task_suite_name, cfg.task_ids, repr(p.sensor_configs),
             repr(p.sim_config))
    if ident not in _cache:
        probe = {"toy": _toy, "maniskill": _maniskill, "libero": _libero, "metaworld": _metaworld,
                 "gymnasium": _gymnasium}[cfg.env_type]
        _cache[ident] = probe(cfg, key)
    return _cache[ident]


def _spec_of(obs, sim_spec) -> ObsSpec:
    cams = list(obs.images)
    image = obs.images[cams[0]] if cams else None
    return ObsSpec(state_dim=0 if obs.state is None else int(obs.state.shape[0]),
                   image_shape=None if image is None else tuple(int(x) for x in image.shape),
                   has_wrist=len(cams) > 1,
                   action_low=tuple(float(x) for x in sim_spec.action_low),
                   action_high=tuple(float(x) for x in sim_spec.action_high))


def _toy(cfg: Any, key: str) -> ObsSpec:
    # lazy: only the env_type being probed loads its simulator module
    from rlinf.envs.toy_reach import ToyReachEnv

    env = ToyReachEnv(image_size=cfg.init_params.camera_heights)
    return _spec_of(env.reset(0), env.spec())


def _maniskill(cfg: Any, key: str) -> ObsSpec:
    # lazy: only the env_type being probed loads its simulator module
    from rlinf.engines.simulators.maniskill import check_maniskill_assets

    p = cfg.init_params
    try:
        from mani_skill.utils.registration import REGISTERED_ENVS  # lazy: optional extra (maniskill) may be absent

        # lazy: the ManiSkill wrapper imports mani_skill (~7 s), an optional extra, only for env_type maniskill
        from rlinf.engines.simulators.maniskill import _import_maniskill

        _import_maniskill()
    except ImportError as exc:
        raise ConfigError(f"{key}.env_type", f"maniskill: {exc}") from None
    if p.id not in REGISTERED_ENVS:
        close = difflib.get_close_matches(p.id, list(REGISTERED_ENVS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"{key}.init_params.id", f"{p.id!r} is not a ManiSkill task{hint} "
                                                   f"({len(REGISTERED_ENVS)} tasks are registered)")
    try:
        check_maniskill_assets(p.id)
    except SimulatorError as exc:
        raise ConfigError(f"{key}.init_params.id", str(exc)) from None
    # its "no CUDA, rendering on CPU" warning is no news here (the logger's name ends in a space)
    quiet = logging.getLogger("mani_skill ")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return _build_and_reset(p, key)
    finally:
        quiet.setLevel(level)


def _build_and_reset(p: Any, key: str) -> ObsSpec:
    # lazy: the ManiSkill env class (mani_skill, ~7 s) only when a maniskill env is built
    from rlinf.engines.simulators.maniskill import ManiSkillSingleEnv, single_env_kwargs

    try:
        env = ManiSkillSingleEnv(p.id, **single_env_kwargs(p))
    except Exception as exc:  # noqa: BLE001 - ManiSkill raises plain exceptions for bad modes
        raise ConfigError(_maniskill_key(key, str(exc)), f"ManiSkill cannot build {p.id}: "
                                                         f"{_first_line(exc)}") from None
    try:
        return _spec_of(env.reset(0), env.spec())
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{key}.init_params", f"ManiSkill cannot reset {p.id}: {_first_line(exc)}") from None
    finally:
        env.close()


def _maniskill_key(key: str, message: str) -> str:
    text = message.lower()
    for name in ("obs_mode", "control_mode", "reward_mode", "sensor_configs", "sim_config"):
        if name.replace("_", " ") in text or name in text:
            return f"{key}.init_params.{name}"
    if "supported modes" in text or "control mode" in text or "controller" in text:
        return f"{key}.init_params.control_mode"
    return f"{key}.init_params"


def _libero(cfg: Any, key: str) -> ObsSpec:
    # lazy: libero, an optional extra, only for env_type libero
    from rlinf.engines.simulators.libero_setup import check_libero_assets, ensure_libero_config, libero_assets_dir

    try:
        check_libero_assets(libero_assets_dir(ensure_libero_config()))
    except ImportError as exc:
        raise ConfigError(f"{key}.env_type", f"libero: {exc}") from None
    except SimulatorError as exc:
        raise ConfigError(f"{key}.env_type", f"libero: {exc}") from None
    # lazy: libero, an optional extra, only for env_type libero
    from rlinf.engines.simulators.libero import LiberoSingleEnv

    p = cfg.init_params
    size = (p.camera_heights or p.camera_widths or 128, p.camera_widths or p.camera_heights or 128)
    dim = LiberoSingleEnv.ACTION_DIM
    return ObsSpec(state_dim=LiberoSingleEnv.STATE_DIM, image_shape=(size[0], size[1], 3),
                   has_wrist=len(p.cameras_for("libero")) > 1, action_low=(-1.0,) * dim, action_high=(1.0,) * dim)


def _metaworld(cfg: Any, key: str) -> ObsSpec:
    # lazy: metaworld, an optional extra, only for env_type metaworld
    from rlinf.engines.simulators.metaworld import (
        MetaWorldSingleEnv,
        check_metaworld_installed,
        single_env_kwargs,
        unknown_task_message,
    )

    if cfg.init_params.id is not None and cfg.task_suite_name is None:
        # lazy: metaworld, an optional extra, only for env_type metaworld
        from rlinf.engines.simulators.metaworld import TASK_NAMES

        if cfg.init_params.id not in TASK_NAMES:
            raise ConfigError(f"{key}.init_params.id", unknown_task_message(cfg.init_params.id))
    try:
        check_metaworld_installed()
    except ImportError as exc:
        raise ConfigError(f"{key}.env_type", f"metaworld: {exc}") from None
    kwargs = single_env_kwargs(cfg)
    # the first task's env, reset once: shapes (and, with images, the cameras) are checked here
    kwargs["task_names"] = kwargs["task_names"][:1]
    if kwargs["task_indices"] is not None:
        kwargs["task_indices"] = kwargs["task_indices"][:1]
    env = MetaWorldSingleEnv(**kwargs)
    try:
        return _spec_of(env.reset(0), env.spec())
    except SimulatorError as exc:
        raise ConfigError(f"{key}.init_params.camera_names", str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - MuJoCo / GL raise plain exceptions
        raise ConfigError(f"{key}.init_params",
                          f"Meta-World cannot reset {env.task_name}: {_first_line(exc)}") from None
    finally:
        env.close()


def _gymnasium(cfg: Any, key: str) -> ObsSpec:
    # lazy: only the env_type being probed loads its simulator module
    from rlinf.engines.simulators.gymnasium_env import GymnasiumSingleEnv, check_gymnasium_installed, single_env_kwargs

    try:
        check_gymnasium_installed()
    except ImportError as exc:
        raise ConfigError(f"{key}.env_type", f"gymnasium: {exc}") from None
    try:
        env = GymnasiumSingleEnv(**single_env_kwargs(cfg))
    except SimulatorError as exc:
        raise ConfigError(f"{key}.init_params.id", str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a user's env may raise anything while it is built
        raise ConfigError(f"{key}.init_params.id",
                          f"gymnasium cannot build {cfg.init_params.id}: {_first_line(exc)}") from None
    try:
        spec = _spec_of(env.reset(0), env.spec())
        if cfg.video_cfg.save_video:
            env.render()
        return spec
    except Exception as exc:  # noqa: BLE001 - a user's env may raise anything
        raise ConfigError(f"{key}.init_params.id",
                          f"gymnasium env {cfg.init_params.id} fails on reset / render: {_first_line(exc)}") from None
    finally:
        env.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
