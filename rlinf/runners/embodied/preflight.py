"""The embodied recipe's checks before Ray: the typed config, the policy folder, output and video
folders, the resume point, the cluster size, and each split's simulator asked in this process
(without workers) for one environment's observation and action shapes (ManiSkill: the task id,
modes and assets; LIBERO: the library and suite), which the policy must fit
(:func:`~rlinf.models.embodied.factory.check_policy_fits`). A π0 / π0.5 folder's metadata is
checked before the simulators are asked (:func:`~rlinf.models.embodied.factory.check_model_folder`);
no check reads a weight. A tiny folder a shipped tiny config reads (:data:`EMBODIED_ASSETS`) is
made when it is missing, said in one line."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rlinf.config.embodied import EmbodiedConfig
from rlinf.models.embodied.factory import MODEL_TYPES, check_model_folder, check_policy_fits
from rlinf.runners.embodied.sim_probe import probe_obs_spec
from rlinf.runners.preflight import Asset, check_assets, check_run_folders
from rlinf.runners.recipe import RunStart
from rlinf.scheduler.cluster import check_cluster_before_start
from rlinf.utils.typed_config import ConfigError

_MAKE_VLA = "python -m toolkits.embodied.make_tiny_vla --out {path}"
_LIBERO_ID = "physical-intelligence/libero"


def _openvla_command(cfg, path: str) -> str:
    """The tiny OpenVLA-OFT folder, with the LoRA adapter when the config reads one there too."""
    lora = cfg.actor.model.lora_path
    extra = f" --lora-out {lora}" if lora and os.path.normpath(lora).endswith(os.path.join("tiny_vla", "lora")) \
        and not os.path.exists(lora) else ""
    return f"{_MAKE_VLA.format(path=path)} --identity-stats{extra}"


#: what the tiny embodied configs read and the command that makes it: tiny random-weight folders in
#: a real format, made on the spot (about 15 s each here)
EMBODIED_ASSETS = (
    Asset("actor.model.model_path", "results/tiny_vla/base", _openvla_command, "about 15 s", make=True),
    Asset("actor.model.lora_path", "results/tiny_vla/lora",
          "python -m toolkits.embodied.make_tiny_vla --out {parent}/base --identity-stats --lora-out {path}",
          "about 15 s", make=True),
    Asset("actor.model.model_path", "results/tiny_pi0/pi0_libero", _MAKE_VLA + " --model-type pi0 --layout rlinf "
          f"--action-horizon 50 --asset-id {_LIBERO_ID}", "about 15 s", make=True),
    Asset("actor.model.model_path", "results/tiny_pi0/pi05_libero", _MAKE_VLA + " --model-type pi05 --layout rlinf "
          f"--action-horizon 10 --asset-id {_LIBERO_ID} --value-after-vlm", "about 15 s", make=True),
    Asset("actor.model.model_path", "results/tiny_pi0/pi0_maniskill", _MAKE_VLA + " --model-type pi0 --layout rlinf "
          "--action-horizon 8 --state-dim 29", "about 15 s", make=True),
)


@dataclass
class EmbodiedStart(RunStart):
    """What :func:`prepare_embodied` hands the embodied run: the typed config, the step to resume
    from (None: a fresh run) and each split's observation spec as the simulator reported it."""

    obs_specs: dict[str, Any] | None = None


def prepare_embodied(raw: Any, config_cls: type[EmbodiedConfig] = EmbodiedConfig,
                     assets: tuple[Asset, ...] = EMBODIED_ASSETS) -> EmbodiedStart:
    """All checks of an embodied run before Ray (see the module docstring); ``config_cls`` is
    the root config to parse (the off-policy recipe passes its own); a missing tiny folder of
    ``assets`` is made first (:func:`~rlinf.runners.preflight.check_assets`).

    Raises:
        ConfigError: the first problem found, naming its key.
    """
    cfg = config_cls.load(raw)
    model = cfg.actor.model
    if (model.model_type or "").lower() not in MODEL_TYPES:  # before any simulator import
        raise ConfigError("actor.model.model_type", f"embodied policies are {', '.join(MODEL_TYPES)}; "
                                                    f"got {model.model_type!r}")
    check_assets(cfg, assets)
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
