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

import io
import os
from dataclasses import dataclass
from typing import Any

from rlinf.config.math import MathConfig
from rlinf.data.image_rows import read_image_rows
from rlinf.data.prompt_dataset import PromptDataset, PromptLoader
from rlinf.data.readers import read_rows
from rlinf.data.tokenizer import load_tokenizer, prompt_encoder
from rlinf.models.vlm.load import is_vlm_folder, load_processor, vlm_prompt_encoder
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
_TINY_VLM = "python -m toolkits.vlm.prepare --out {parent}"
MATH_ASSETS = tuple(Asset(key, "results/tiny_math/warm", _TINY_MATH, "a few seconds: it copies the shipped "
                          "warm start", make=True)
                    for key in ("actor.model.model_path", "rollout.model.model_path")) + tuple(
    Asset(key, "results/tiny_vlm/base", _TINY_VLM, "a few seconds: a random tiny Qwen2.5-VL and the image task",
          make=True) for key in ("actor.model.model_path", "rollout.model.model_path"))


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
    encode_images = vlm_encoder(cfg, system_prompt, tools)
    if encode_images is not None:  # a vision-language model: its processor renders every prompt
        encode = lambda text: encode_images(text, ())  # noqa: E731
    else:
        try:
            encode = prompt_encoder(tokenizer, d.apply_chat_template, system_prompt, tools)
        except ValueError as exc:
            raise ConfigError("data.apply_chat_template",
                              str(exc).replace("data.apply_chat_template is ", "")) from None
    loaders = []
    for paths, key in ((d.train_data_paths, "data.train_data_paths"), (d.val_data_paths, "data.val_data_paths")):
        if not paths:
            loaders.append(None)
            continue
        try:
            rows = (image_prompt_rows(paths, d) if d.image_key is not None
                    else read_rows(paths, d.prompt_key, d.answer_key, d.messages_key))
            dataset = PromptDataset(rows, encode, d.max_prompt_length, num_workers=d.num_workers,
                                    encode_images=encode_images)
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


def vlm_encoder(cfg: MathConfig, system_prompt: str | None = None, tools: list[dict] | None = None):
    """``(text, images) -> prompt ids`` of a vision-language actor model (its processor: chat
    template, image placeholders expanded), None for a text model. The keys that need a
    vision-language model, or that it cannot take yet, are refused here (one line each).

    Raises:
        ConfigError: ``data.image_key`` or ``actor.model.vision_tower: trained`` with a text model;
            a vision-language model with another rollout backend than huggingface, with
            ``runner.rollout_mode: fully_async``, with tools, with ``data.apply_chat_template:
            false`` or ``data.messages_key``.
    """
    d = cfg.data
    if not is_vlm_folder(cfg.model_path):
        if d.image_key is not None:
            raise ConfigError("data.image_key", f"{cfg.model_path} is a text-only model (config.json "
                                                f"model_type); images need a Qwen2.5-VL or Qwen3-VL model")
        if cfg.actor.model.llm.vision_tower == "trained":
            raise ConfigError("actor.model.vision_tower", f"{cfg.model_path} is a text-only model: it has no "
                                                          "vision tower to train")
        return None
    rollout_path = cfg.rollout.model.model_path or cfg.model_path
    if not is_vlm_folder(rollout_path):
        raise ConfigError("rollout.model.model_path", f"{rollout_path} is a text-only model but the actor's "
                                                      f"{cfg.model_path} is a vision-language model")
    if cfg.rollout.backend != "huggingface":
        raise ConfigError("rollout.backend", f"a vision-language model rolls out on huggingface only for now, "
                                             f"not {cfg.rollout.backend}")
    if cfg.rollout_mode == "fully_async":
        raise ConfigError("runner.rollout_mode", "a vision-language rollout cannot be interrupted yet, which "
                                                 "fully_async needs; use sync or async")
    if tools:
        raise ConfigError("tools", "a vision-language model cannot call tools yet (the tool agent renders "
                                   "text-only chats)")
    if not d.apply_chat_template or d.messages_key is not None:
        key = "data.messages_key" if d.messages_key is not None else "data.apply_chat_template"
        raise ConfigError(key, "a vision-language prompt is one user turn rendered by the model's chat "
                               "template (its images, then the text)")
    try:
        processor = load_processor(cfg.model_path)
    except (OSError, ValueError) as exc:
        raise ConfigError("actor.model.model_path", str(exc).splitlines()[0]) from None
    return vlm_prompt_encoder(processor, system_prompt)


def image_prompt_rows(paths, d) -> list[dict]:
    """Rows of ``paths`` with their images (``data.image_key``) as PNG bytes (lossless: the pixels
    the data holds); a missing or unreadable image raises one line naming file, row and image."""
    out = []
    for row in read_image_rows(paths, d.image_key, d.prompt_key, d.answer_key, d.messages_key).rows:
        encoded = []
        for image in row["images"]:
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            encoded.append(buffer.getvalue())
        out.append({**row, "images": tuple(encoded)})
    return out


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
