"""The embodied recipe's checks before Ray: the typed config, the policy folder, output and video
folders, the resume point, the cluster size, and each split's simulator asked in this process
(without workers) for one environment's observation and action shapes (ManiSkill: the task id,
modes and assets; LIBERO: the library and suite), which the policy must fit
(:func:`~rlinf.models.embodied.factory.check_policy_fits`). A π0 / π0.5 folder's metadata is
checked before the simulators are asked (:func:`~rlinf.models.embodied.factory.check_model_folder`);
no check reads a weight."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rlinf.config.embodied import EmbodiedConfig
from rlinf.runners.preflight import check_run_folders
from rlinf.runners.recipe import RunStart
from rlinf.utils.typed_config import ConfigError


@dataclass
class EmbodiedStart(RunStart):
    """What :func:`prepare_embodied` hands the embodied run: the typed config, the step to resume
    from (None: a fresh run) and each split's observation spec as the simulator reported it."""

    obs_specs: dict[str, Any] | None = None


def prepare_embodied(raw: Any, config_cls: type[EmbodiedConfig] = EmbodiedConfig) -> EmbodiedStart:
    """All checks of an embodied run before Ray (see the module docstring); ``config_cls`` is
    the root config to parse (the off-policy recipe passes its own).

    Raises:
        ConfigError: the first problem found, naming its key.
    """
    from rlinf.models.embodied.factory import MODEL_TYPES, check_model_folder, check_policy_fits
    from rlinf.runners.embodied.sim_probe import probe_obs_spec
    from rlinf.scheduler.cluster import check_cluster_before_start

    cfg = config_cls.load(raw)
    model = cfg.actor.model
    if (model.model_type or "").lower() not in MODEL_TYPES:  # before any simulator import
        raise ConfigError("actor.model.model_type", f"embodied policies are {', '.join(MODEL_TYPES)}; "
                                                    f"got {model.model_type!r}")
    if model.model_path is not None and not os.path.isdir(model.model_path):
        raise ConfigError("actor.model.model_path", f"{model.model_path!r} is not a folder")
    check_model_folder(model)  # π0 / π0.5: the folder's metadata, before the simulators start
    videos = {f"env.{s}.video_cfg.video_base_dir": getattr(cfg.env, s).video_cfg.video_base_dir
              for s in ("train", "eval") if getattr(cfg.env, s).video_cfg.save_video}
    resume_step = check_run_folders(cfg.runner, videos)
    check_cluster_before_start(cfg.cluster)
    specs = {}
    for split in ("train", "eval"):
        specs[split] = probe_obs_spec(getattr(cfg.env, split), f"env.{split}")
        check_policy_fits(model, specs[split], env_label=f"env.{split} ({describe_env(getattr(cfg.env, split))})")
    return EmbodiedStart(cfg, resume_step, specs)


def describe_env(env_cfg) -> str:
    """``maniskill PushCube-v1`` / ``libero libero_10`` / ``toy``."""
    name = env_cfg.init_params.id or env_cfg.task_suite_name or ""
    return f"{env_cfg.env_type} {name}".strip()
