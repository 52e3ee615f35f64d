"""The math recipe's checks before Ray: the typed config, model and tokenizer folders, the prompt
files (encoded into loaders here, so a bad file stops the run before any worker starts), the
resume point and the cluster size.

Example:
    >>> prepare_math({"cluster": {"component_placement": {"actor,rollout": "all"}}})
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: data.train_data_paths: missing (required)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rlinf.config.math import MathConfig
from rlinf.data.prompt_dataset import PromptDataset, PromptLoader
from rlinf.data.readers import read_rows
from rlinf.data.tokenizer import load_tokenizer, prompt_encoder
from rlinf.runners.checkpoint import resolve_resume_dir
from rlinf.runners.preflight import (
    HF_TOKENIZER_FILES,
    Asset,
    check_assets,
    check_hf_folder,
    check_model_type,
    check_run_folders,
)
from rlinf.runners.recipe import RunStart
from rlinf.scheduler.cluster import check_cluster_before_start
from rlinf.utils.typed_config import ConfigError

_TINY_MATH = "python -m toolkits.tiny_math.prepare --out {parent}"
#: what the tiny math configs read and the command that makes it (quick: it copies the shipped warm start)
MATH_ASSETS = tuple(Asset(key, "results/tiny_math/warm", _TINY_MATH, "a few seconds: it copies the shipped "
                          "warm start", make=True)
                    for key in ("actor.model.model_path", "rollout.model.model_path"))


def build_loaders(cfg: MathConfig, tokenizer, system_prompt: str | None = None,
                  tools: list[dict] | None = None) -> tuple[PromptLoader, PromptLoader | None]:
    """Train and validation prompt loaders from ``data:`` (prompts longer than
    ``data.max_prompt_length`` tokens are dropped; a validation batch is at most the whole set).
    ``system_prompt`` / ``tools`` go to the chat template (a tool agent's).

    Raises:
        ConfigError: a data file lacks the prompt / answer key, no prompt fits, or the train set
            has fewer usable prompts than ``data.rollout_batch_size``.
    """
    d = cfg.data
    try:
        encode = prompt_encoder(tokenizer, d.apply_chat_template, system_prompt, tools)
    except ValueError as exc:
        raise ConfigError("data.apply_chat_template", str(exc).replace("data.apply_chat_template is ", "")) from None
    loaders = []
    for paths, key in ((d.train_data_paths, "data.train_data_paths"), (d.val_data_paths, "data.val_data_paths")):
        if not paths:
            loaders.append(None)
            continue
        try:
            dataset = PromptDataset(read_rows(paths, d.prompt_key, d.answer_key, d.messages_key), encode,
                                    d.max_prompt_length, num_workers=d.num_workers)
        except ValueError as exc:
            raise ConfigError(key, str(exc)) from None
        loaders.append(dataset)
    train_set, val_set = loaders
    if d.rollout_batch_size > len(train_set):
        raise ConfigError("data.rollout_batch_size", f"{d.rollout_batch_size} exceeds the "
                          f"{len(train_set)} usable prompts of data.train_data_paths")
    train = PromptLoader(train_set, d.rollout_batch_size, shuffle=d.shuffle, seed=d.seed)
    val = None
    if val_set is not None:
        size = min(d.val_rollout_batch_size or d.rollout_batch_size, len(val_set))
        val = PromptLoader(val_set, size, shuffle=d.validation_shuffle, seed=d.seed, drop_last=False)
    return train, val


@dataclass
class MathStart(RunStart):
    """What :func:`prepare_math` hands the math run: the typed config, the tokenizer, the prompt
    loaders and the step to resume from (None: a fresh run)."""

    tokenizer: Any = None
    train: Any = None
    val: Any = None


def prepare_math(raw: Any, config_cls: type[MathConfig] = MathConfig, prompt_extras=None,
                 assets: tuple[Asset, ...] = MATH_ASSETS, print_fn=print) -> MathStart:
    """All checks of a math run before Ray (see the module docstring).

    Raises:
        ConfigError: the first problem found, naming its key.

    ``config_cls`` is the root config (a subclass for recipes built on this one);
    ``prompt_extras(cfg)`` gives ``(system_prompt, tools)`` for the chat template; ``assets``:
    what the recipe's tiny configs read (:func:`~rlinf.runners.preflight.check_assets`).
    """
    cfg = config_cls.load(raw, check_paths=False)
    check_assets(cfg, assets, print_fn)  # a missing tiny model: made, or one line naming its command
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
    train, val = build_loaders(cfg, tokenizer, *(prompt_extras(cfg) if prompt_extras else ()))
    resume_step = check_run_folders(cfg.runner)
    if resume_step is not None and cfg.critic.use_critic_model:
        step_dir = resolve_resume_dir(cfg.runner.resume_dir)
        if not os.path.isdir(os.path.join(step_dir, "critic")):
            raise ConfigError("runner.resume_dir", f"{step_dir!r} has no critic/ folder, and this run trains a "
                                                   "critic (critic.use_critic_model)")
    check_cluster_before_start(cfg.cluster)
    return MathStart(cfg, resume_step, tokenizer, train, val)
