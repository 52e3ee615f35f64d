"""``algorithm_config:`` of a web-agent run and the DeepSpeed files it names.

WebGym's update (seed 000) is filtered SFT: the policy is fine-tuned on the steps of successful
trajectories. This runtime also offers GRPO over the steps of each trajectory. The DeepSpeed file
is read (:func:`load_deepspeed_config`) before anything starts: it must be a JSON object whose
``zero_optimization.stage`` is 0-3; errors name the file.

Example:
    >>> from rlinf.utils.typed_config import parse_section
    >>> algo = parse_section(WebAlgorithmConfig, {"method": "grpo", "group_size": 4}, "algorithm_config")
    >>> algo.method, algo.group_size, algo.learning_rate
    ('grpo', 4, 1e-06)
    >>> parse_section(WebAlgorithmConfig, {"group_size": 4}, "algorithm_config")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: algorithm_config.group_size: 4 has no effect with method filtered_sft (one episode per task); set 1, or method: grpo
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlinf.utils.typed_config import ConfigError, check, field_default

#: where a bare ``deepspeed_config_filename`` is looked up
DEEPSPEED_DIR = Path(__file__).resolve().parents[2] / "examples" / "web_agent" / "config" / "deepspeed"

#: keys read by one method only: a value other than the default under the other is refused
FILTERED_SFT_KEYS = ("positive_samples_to_train", "recency_bias_power", "val_split_ratio")
GRPO_KEYS = ("clip_ratio",)


@dataclass(frozen=True)
class WebAlgorithmConfig:
    """``algorithm_config``: how the policy is trained on collected trajectories.

    Attributes:
        positive_samples_to_train: filtered_sft: successful step samples trained on per
            iteration (drawn from all saved iterations, favouring recent ones).
        recency_bias_power: filtered_sft: a sample of iteration i is drawn with weight
            (i + 1) ** recency_bias_power (0 = no preference).
        cutoff_len: longest training sequence (prompt + reply) in tokens; longer ones are
            truncated from the left of the prompt.
        per_device_train_batch_size: sequences per micro-batch per actor rank.
        gradient_accumulation_steps: micro-batches per optimizer step.
        learning_rate: peak learning rate.
        num_train_epochs: passes over an iteration's training samples.
        warmup_steps: optimizer steps of linear warm-up (not with ``constant``).
        lr_scheduler_type: ``constant_with_warmup``, ``constant``, ``linear`` or ``cosine``
            (decay over the iteration's optimizer steps).
        val_split_ratio: filtered_sft: fraction of the samples held out to report a validation
            loss, in [0, 1).
        deepspeed_config_filename: the DeepSpeed JSON (a file name in
            ``examples/web_agent/config/deepspeed/`` or a path): the deepspeed backend runs it as
            written; with ``training_backend: fsdp`` its ZeRO stage and offloads are mapped onto
            FSDP2 (stage 3 -> full_shard, 1 / 2 -> shard_grad_op, offload -> cpu_offload) and
            the mapping is printed at start; null = none (fsdp with its defaults).
        report_to: tracking backend: ``none``, ``tensorboard`` or ``wandb`` (log_config).
        method: ours: ``filtered_sft`` (WebGym's: supervised steps of successful trajectories)
            or ``grpo`` (group-relative policy gradient over each trajectory's steps, the page
            text masked out of the loss).
        group_size: ours: grpo: episodes per train task (>= 2), their rewards compared with
            each other; filtered_sft: 1.
        clip_ratio: ours: grpo: the PPO clip range of the policy ratio.
        training_backend: ours: ``deepspeed`` (DeepSpeed ZeRO, the file above) or ``fsdp``
            (FSDP2); null = deepspeed when a DeepSpeed file is given (WebGym's way), else fsdp.
    """

    positive_samples_to_train: int = 1800
    recency_bias_power: float = 2.0
    cutoff_len: int = 16384
    per_device_train_batch_size: int = 3
    gradient_accumulation_steps: int = 4
    learning_rate: float = 1e-6
    num_train_epochs: int = 2
    warmup_steps: int = 30
    lr_scheduler_type: Literal["constant_with_warmup", "constant", "linear", "cosine"] = "constant_with_warmup"
    val_split_ratio: float = 0.05
    deepspeed_config_filename: str | None = "ds_config_b200_zero1.json"
    report_to: Literal["none", "tensorboard", "wandb"] = "wandb"
    method: Literal["filtered_sft", "grpo"] = "filtered_sft"
    group_size: int = 1
    clip_ratio: float = 0.2
    training_backend: Literal["fsdp", "deepspeed"] | None = None

    @property
    def backend(self) -> str:
        """The training backend in effect (``training_backend``, or its null default resolved).

        >>> WebAlgorithmConfig().backend, WebAlgorithmConfig(deepspeed_config_filename=None).backend
        ('deepspeed', 'fsdp')
        """
        if self.training_backend is not None:
            return self.training_backend
        return "deepspeed" if self.deepspeed_config_filename is not None else "fsdp"

    def validate(self, path: str) -> None:
        for key in ("positive_samples_to_train", "per_device_train_batch_size", "gradient_accumulation_steps",
                    "num_train_epochs"):
            check(getattr(self, key) >= 1, f"{path}.{key}", f"must be >= 1, got {getattr(self, key)}")
        check(self.cutoff_len >= 2, f"{path}.cutoff_len", f"must be >= 2 tokens, got {self.cutoff_len}")
        check(math.isfinite(self.learning_rate) and self.learning_rate > 0, f"{path}.learning_rate",
              f"must be > 0, got {self.learning_rate}")
        check(self.warmup_steps >= 0, f"{path}.warmup_steps", f"must be >= 0, got {self.warmup_steps}")
        check(self.lr_scheduler_type != "constant" or self.warmup_steps == 0, f"{path}.warmup_steps",
              f"{self.warmup_steps} has no effect with lr_scheduler_type constant; set 0, or use "
              "constant_with_warmup")
        check(self.recency_bias_power >= 0, f"{path}.recency_bias_power",
              f"must be >= 0, got {self.recency_bias_power}")
        check(0 <= self.val_split_ratio < 1, f"{path}.val_split_ratio",
              f"must be in [0, 1), got {self.val_split_ratio}")
        check(self.clip_ratio > 0, f"{path}.clip_ratio", f"must be > 0, got {self.clip_ratio}")
        if self.method == "grpo":
            check(self.group_size >= 2, f"{path}.group_size",
                  f"grpo compares episodes of the same task: needs >= 2, got {self.group_size}")
        else:
            check(self.group_size == 1, f"{path}.group_size",
                  f"{self.group_size} has no effect with method filtered_sft (one episode per task); "
                  "set 1, or method: grpo")
        idle = GRPO_KEYS if self.method == "filtered_sft" else FILTERED_SFT_KEYS
        for key in idle:
            default = field_default(next(f for f in dataclasses.fields(self) if f.name == key))
            check(getattr(self, key) == default, f"{path}.{key}",
                  f"{getattr(self, key)} has no effect with method {self.method}; remove it "
                  f"(or leave the default {default})")
        name = self.deepspeed_config_filename
        check(name is None or bool(name.strip()), f"{path}.deepspeed_config_filename",
              "expected a file name or null, got ''")
        if self.training_backend == "deepspeed":
            check(name is not None, f"{path}.deepspeed_config_filename",
                  "the deepspeed backend needs a DeepSpeed JSON, e.g. ds_config_h100_zero2.json")

    def deepspeed_path(self) -> Path | None:
        """The DeepSpeed file: a bare name is looked up in :data:`DEEPSPEED_DIR`.

        >>> WebAlgorithmConfig(deepspeed_config_filename="ds_config_h100_zero3.json").deepspeed_path().name
        'ds_config_h100_zero3.json'
        """
        name = self.deepspeed_config_filename
        if name is None:
            return None
        if os.path.isabs(name) or os.sep in name or (os.altsep and os.altsep in name):
            return Path(name)
        return DEEPSPEED_DIR / name


@dataclass(frozen=True)
class DeepSpeedSettings:
    """What a DeepSpeed JSON sets, read once (see :func:`load_deepspeed_config`).

    Attributes:
        path: the file read.
        stage: ``zero_optimization.stage`` (0-3).
        bf16: ``bf16.enabled``.
        fp16: ``fp16.enabled``.
        offload_optimizer: ``zero_optimization.offload_optimizer.device`` (cpu, nvme) or None.
        offload_param: ``zero_optimization.offload_param.device`` (ZeRO-3 only) or None.
        overlap_comm: ``zero_optimization.overlap_comm``.
        activation_checkpointing: the file has an ``activation_checkpointing`` section.
        micro_batch_size: ``train_micro_batch_size_per_gpu`` when an int (None = "auto" / absent).
        gradient_accumulation_steps: ``gradient_accumulation_steps`` when an int.
        raw: the whole JSON object.
    """

    path: str
    stage: int
    bf16: bool
    fp16: bool
    offload_optimizer: str | None
    offload_param: str | None
    overlap_comm: bool
    activation_checkpointing: bool
    micro_batch_size: int | None
    gradient_accumulation_steps: int | None
    raw: dict[str, Any]


def load_deepspeed_config(path: str | os.PathLike,
                          key: str = "algorithm_config.deepspeed_config_filename") -> DeepSpeedSettings:
    """Read and check a DeepSpeed JSON; a problem raises :class:`ConfigError` naming ``key`` and
    the file.

    >>> s = load_deepspeed_config(DEEPSPEED_DIR / "ds_config_h100_zero3.json")
    >>> s.stage, s.bf16, s.offload_param
    (3, True, 'cpu')
    """
    where = str(path)
    if not os.path.isfile(path):
        raise ConfigError(key, f"{where}: no such file (a bare name is looked up in {DEEPSPEED_DIR})")
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ConfigError(key, f"{where}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(key, f"{where}: cannot be read: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(key, f"{where}: expected a JSON object, got {type(raw).__name__}")
    zero = _section(raw, "zero_optimization", key, where)
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage <= 3:
        raise ConfigError(key, f"{where}: zero_optimization.stage must be 0, 1, 2 or 3, got {stage!r}")
    flags = {}
    for name in ("bf16", "fp16"):
        enabled = _section(raw, name, key, where).get("enabled", False)
        if enabled != "auto" and not isinstance(enabled, bool):
            raise ConfigError(key, f"{where}: {name}.enabled must be true, false or \"auto\", got {enabled!r}")
        flags[name] = enabled is True  # "auto" = the actor's precision: web actors train fp32 weights
    if flags["bf16"] and flags["fp16"]:
        raise ConfigError(key, f"{where}: bf16.enabled and fp16.enabled are both true; enable one")
    offload = {}
    for name in ("offload_optimizer", "offload_param"):
        device = _section(zero, name, key, where, f"zero_optimization.{name}").get("device", "none")
        if device not in ("none", "cpu", "nvme"):
            raise ConfigError(key, f"{where}: zero_optimization.{name}.device must be none, cpu or nvme, "
                                   f"got {device!r}")
        offload[name] = None if device == "none" else device
    if offload["offload_param"] is not None and stage != 3:
        raise ConfigError(key, f"{where}: zero_optimization.offload_param needs stage 3, the file sets stage {stage}")
    overlap = zero.get("overlap_comm", False)
    if not isinstance(overlap, bool):
        raise ConfigError(key, f"{where}: zero_optimization.overlap_comm must be true or false, got {overlap!r}")
    counts = {}
    for name in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        value = raw.get(name, "auto")
        if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(key, f"{where}: {name} must be \"auto\" or an int >= 1, got {value!r}")
        counts[name] = None if value == "auto" else value
    return DeepSpeedSettings(
        path=where, stage=stage, bf16=flags["bf16"], fp16=flags["fp16"],
        offload_optimizer=offload["offload_optimizer"], offload_param=offload["offload_param"],
        overlap_comm=overlap, activation_checkpointing="activation_checkpointing" in raw,
        micro_batch_size=counts["train_micro_batch_size_per_gpu"],
        gradient_accumulation_steps=counts["gradient_accumulation_steps"], raw=raw)


def _section(parent: dict, name: str, key: str, where: str, label: str | None = None) -> dict:
    value = parent.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(key, f"{where}: {label or name} must be a JSON object, got {json.dumps(value)}")
    return value


def zero_to_fsdp(ds: DeepSpeedSettings) -> dict[str, Any]:
    """How a ZeRO file maps onto FSDP2 under ``training_backend: fsdp`` (``actor.fsdp_config``
    keys, plus ``gradient_checkpointing`` of the model): stage 3 shards parameters too
    (``full_shard``); stages 1 and 2 keep gathered parameters between forward and backward
    (``shard_grad_op``); stage 0 replicates (``no_shard``); an optimizer or parameter offload
    becomes FSDP2's CPU offload; ``bf16.enabled`` computes in bf16 (fp32 master weights and
    reduction); an ``activation_checkpointing`` section turns on gradient checkpointing.

    >>> s = DeepSpeedSettings("f", 3, True, False, "cpu", "cpu", True, True, None, None, {})
    >>> zero_to_fsdp(s)
    {'sharding_strategy': 'full_shard', 'cpu_offload': True, 'param_dtype': 'bf16', 'gradient_checkpointing': True}
    """
    strategy = {0: "no_shard", 1: "shard_grad_op", 2: "shard_grad_op", 3: "full_shard"}[ds.stage]
    return {"sharding_strategy": strategy, "cpu_offload": bool(ds.offload_optimizer or ds.offload_param),
            "param_dtype": "bf16" if ds.bf16 else ("fp16" if ds.fp16 else "fp32"),
            "gradient_checkpointing": ds.activation_checkpointing}


def zero_to_fsdp_text(ds: DeepSpeedSettings) -> str:
    """:func:`zero_to_fsdp` in one line (the start-up note)."""
    return ", ".join(f"{k} {str(v).lower() if isinstance(v, bool) else v}" for k, v in zero_to_fsdp(ds).items())
