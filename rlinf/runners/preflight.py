"""Everything a run checks before Ray starts: the typed config, then what the file system and
the simulator libraries can tell.

A failure is a :class:`~rlinf.utils.typed_config.ConfigError` naming one key; the entries turn it
into one ``config error: <key>: ...`` line and exit code 2. Nothing is written: no output or log
folder is created, no checkpoint touched, and Ray is not started.

* both entries: output and log folders (``runner.output_dir``, ``runner.logger.log_path``, video
  folders) must be folders or creatable; ``runner.resume_dir`` must hold a complete checkpoint;
  ``cluster.num_nodes`` must fit the cluster the run will use
  (:func:`~rlinf.scheduler.cluster.check_cluster_before_start`).
* math (:func:`prepare_math`): model folders hold a config, weights and a tokenizer; the tokenizer
  loads; data files exist and hold usable prompts.
* embodied (:func:`prepare_embodied`): each split's simulator is asked, in this process and
  without workers, for one environment's observation and action shapes (ManiSkill: the task id,
  modes and assets; LIBERO: the library and suite); the policy must fit them
  (:func:`~rlinf.models.embodied.factory.check_policy_fits`).

Example:
    >>> import tempfile
    >>> out = tempfile.NamedTemporaryFile()
    >>> check_output_folder(out.name, "runner.output_dir")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: runner.output_dir: ... is a file; expected a folder (existing or to be created)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rlinf.utils.typed_config import ConfigError

#: weight files an HF model folder may hold (one of them)
HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                   "pytorch_model.bin.index.json")
#: files that make a folder an HF tokenizer folder (one of them)
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")


def check_output_folder(path: str, key: str) -> None:
    """``path`` is a folder, or can be created: its nearest existing ancestor is a writable folder."""
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ConfigError(key, f"{path!r} is a file; expected a folder (existing or to be created)")
        if not os.access(path, os.W_OK):
            raise ConfigError(key, f"{path!r} is not writable")
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(key, f"{path!r} cannot be created: {parent!r} is a file")
    if not os.access(parent, os.W_OK):
        raise ConfigError(key, f"{path!r} cannot be created: {parent!r} is not writable")


#: architecture tags the reference writes -> HF ``config.json`` ``model_type``
MODEL_TYPE_ALIASES = {"qwen2.5": "qwen2", "qwen2_5": "qwen2", "qwen2.5-math": "qwen2", "deepseek-r1-distill-qwen": "qwen2",
                      "llama2": "llama", "llama3": "llama", "llama3.1": "llama", "llama3.2": "llama",
                      "qwen3-moe": "qwen3_moe"}


def check_model_type(tag: str | None, folder: str | None, key: str) -> None:
    """``<section>.model.model_type`` (when set) names the architecture in ``folder/config.json``
    (qwen2.5 and qwen2 are the same architecture; see :data:`MODEL_TYPE_ALIASES`).

    >>> import json, tempfile
    >>> d = tempfile.mkdtemp(); _ = open(f"{d}/config.json", "w").write(json.dumps({"model_type": "qwen2"}))
    >>> check_model_type("qwen2.5", d, "rollout.model.model_type")
    >>> check_model_type("llama", d, "rollout.model.model_type")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: rollout.model.model_type: 'llama', but the model folder's config.json says model_type 'qwen2'
    """
    if tag is None or folder is None:
        return
    import json

    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            actual = json.load(f).get("model_type")
    except (OSError, ValueError):
        return  # the folder check names that problem
    wanted = MODEL_TYPE_ALIASES.get(tag.lower(), tag.lower())
    if actual is not None and wanted != actual:
        raise ConfigError(key, f"{tag!r}, but the model folder's config.json says model_type {actual!r}")


def check_hf_folder(path: str, key: str, tokenizer: bool = True) -> None:
    """``path`` is an HF model folder: ``config.json``, weights (every shard an index lists) and,
    with ``tokenizer``, tokenizer files."""
    import json

    if not os.path.isdir(path):
        what = "is a file" if os.path.exists(path) else "does not exist"
        raise ConfigError(key, f"{path!r} {what}; expected an HF model folder")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError(key, f"{path!r} is not an HF model folder (no config.json)")
    present = [f for f in HF_WEIGHT_FILES if os.path.isfile(os.path.join(path, f))]
    if not present:
        raise ConfigError(key, f"{path!r} has no weights (expected one of {', '.join(HF_WEIGHT_FILES)})")
    for index in (f for f in present if f.endswith(".index.json")):
        try:
            with open(os.path.join(path, index), encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(key, f"{os.path.join(path, index)} is not a weight index ({exc})") from None
        missing = [s for s in shards if not os.path.isfile(os.path.join(path, s))]
        if missing:
            raise ConfigError(key, f"{path!r} lacks weight shard(s) {', '.join(missing[:3])} listed in {index}")
    if tokenizer and not any(os.path.isfile(os.path.join(path, f)) for f in HF_TOKENIZER_FILES):
        raise ConfigError(key, f"{path!r} has no tokenizer files ({', '.join(HF_TOKENIZER_FILES)}); "
                               "add them or set actor.tokenizer.tokenizer_model")


def check_run_folders(runner, extra: dict[str, str] | None = None) -> int | None:
    """Output / log folders (plus ``extra``: key -> folder) and the resume folder; returns the
    step of the checkpoint to resume from (None: a fresh run)."""
    from rlinf.runners import checkpoint as ckpt

    folders = {"runner.output_dir": runner.output_dir, "runner.logger.log_path": runner.logger.log_path}
    folders.update(extra or {})
    for key, folder in folders.items():
        check_output_folder(folder, key)
    return ckpt.resume_point(runner.resume_dir)[1] if runner.resume_dir else None


@dataclass
class MathStart:
    """What :func:`prepare_math` hands the math run: the typed config, the tokenizer, the prompt
    loaders and the step to resume from (None: a fresh run)."""

    cfg: Any
    tokenizer: Any
    train: Any
    val: Any
    resume_step: int | None


def prepare_math(raw: Any) -> MathStart:
    """All checks of a math run before Ray (see the module docstring).

    Raises:
        ConfigError: the first problem found, naming its key.
    """
    from rlinf.config.math import MathConfig
    from rlinf.data.tokenizer import load_tokenizer
    from rlinf.runners.math.main import build_loaders
    from rlinf.scheduler.cluster import check_cluster_before_start

    cfg = MathConfig.from_dict(raw, check_paths=False) if isinstance(raw, dict) else MathConfig.from_hydra(raw, check_paths=False)
    tok_dir = cfg.actor.tokenizer.tokenizer_model
    if tok_dir is not None and not (os.path.isdir(tok_dir) and any(
            os.path.isfile(os.path.join(tok_dir, f)) for f in HF_TOKENIZER_FILES + ("tokenizer_config.json",))):
        raise ConfigError("actor.tokenizer.tokenizer_model", f"{tok_dir!r} is not a tokenizer folder "
                                                             f"(expected one of {', '.join(HF_TOKENIZER_FILES)})")
    for key, path in (("actor.model.model_path", cfg.actor.model.model_path),
                      ("rollout.model.model_path", cfg.rollout.model.model_path),
                      ("inference.model.model_path", cfg.inference.model.model_path)):
        if path is not None:
            check_hf_folder(path, key, tokenizer=tok_dir is None and key != "inference.model.model_path")
    cfg.check_paths()
    check_model_type(cfg.actor.model.model_type, cfg.model_path, "actor.model.model_type")
    check_model_type(cfg.rollout.model.model_type, cfg.rollout.model.model_path or cfg.model_path,
                     "rollout.model.model_type")
    check_model_type(cfg.inference.model.model_type, cfg.inference.model.model_path or cfg.model_path,
                     "inference.model.model_type")
    lora_path = cfg.actor.model.lora_path
    if lora_path is not None:
        if not cfg.actor.model.is_lora:
            raise ConfigError("actor.model.lora_path", "set actor.model.is_lora: true to start from a LoRA adapter")
        if not os.path.isfile(os.path.join(lora_path, "adapter_config.json")):
            raise ConfigError("actor.model.lora_path", f"{lora_path!r} has no adapter_config.json (a PEFT LoRA folder)")
    if cfg.reward.use_reward_model:
        check_hf_folder(cfg.reward.model.model_path, "reward.model.model_path", tokenizer=True)
    if cfg.critic.use_critic_model:
        if cfg.critic.model.model_path is not None:
            check_hf_folder(cfg.critic.model.model_path, "critic.model.model_path", tokenizer=False)
        check_model_type(cfg.critic.model.model_type, cfg.critic.model.model_path or cfg.model_path,
                         "critic.model.model_type")
    try:
        tokenizer = load_tokenizer(cfg.tokenizer_path, cfg.actor.tokenizer)
    except Exception as exc:  # noqa: BLE001 - any loader failure is a bad folder
        key = ("actor.tokenizer.use_fast" if not cfg.actor.tokenizer.use_fast else
               "actor.tokenizer.tokenizer_model" if tok_dir else "actor.model.model_path")
        raise ConfigError(key, f"the tokenizer in {cfg.tokenizer_path!r} does not load "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    train, val = build_loaders(cfg, tokenizer)
    resume_step = check_run_folders(cfg.runner)
    if resume_step is not None and cfg.critic.use_critic_model:
        from rlinf.runners.checkpoint import resolve_resume_dir

        step_dir = resolve_resume_dir(cfg.runner.resume_dir)
        if not os.path.isdir(os.path.join(step_dir, "critic")):
            raise ConfigError("runner.resume_dir", f"{step_dir!r} has no critic/ folder, and this run trains a "
                                                   "critic (critic.use_critic_model)")
    check_cluster_before_start(cfg.cluster)
    return MathStart(cfg, tokenizer, train, val, resume_step)


@dataclass
class EmbodiedStart:
    """What :func:`prepare_embodied` hands the embodied run: the typed config, the step to resume
    from (None: a fresh run) and each split's observation spec as the simulator reported it."""

    cfg: Any
    resume_step: int | None
    obs_specs: dict[str, Any]


def prepare_embodied(raw: Any) -> EmbodiedStart:
    """All checks of an embodied run before Ray (see the module docstring).

    Raises:
        ConfigError: the first problem found, naming its key.
    """
    from rlinf.config.embodied import EmbodiedConfig
    from rlinf.models.embodied.factory import MODEL_TYPES, check_policy_fits
    from rlinf.runners.sim_probe import probe_obs_spec
    from rlinf.scheduler.cluster import check_cluster_before_start

    cfg = EmbodiedConfig.from_dict(raw) if isinstance(raw, dict) else EmbodiedConfig.from_hydra(raw)
    model = cfg.actor.model
    if (model.model_type or "").lower() not in MODEL_TYPES:  # before any simulator import
        raise ConfigError("actor.model.model_type", f"embodied policies are {', '.join(MODEL_TYPES)}; "
                                                    f"got {model.model_type!r}")
    if model.model_path is not None and not os.path.isdir(model.model_path):
        raise ConfigError("actor.model.model_path", f"{model.model_path!r} is not a folder")
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
