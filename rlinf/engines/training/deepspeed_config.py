"""DeepSpeed JSON files in WebGym's layout -> the config dict :class:`DeepSpeedEngine` passes to
``deepspeed.initialize``, with every key honoured, filled in, noted or refused.

WebGym (seed 000) names a file per ZeRO stage in ``algorithm_config.deepspeed_config_filename``
(``ds_config_{h100,b200}_zero{1,2,3}.json``); such files are written for the Hugging Face
Trainer, so many values are ``"auto"``. :func:`resolve_ds_config` fills them the way the HF
Trainer does, from this run's settings:

- ``train_micro_batch_size_per_gpu`` / ``gradient_accumulation_steps``: the web config's
  ``per_device_train_batch_size`` / ``gradient_accumulation_steps`` when given (authoritative; a
  different number in the file is replaced and noted), else the file's integer, else 1;
  ``train_batch_size`` = micro x accumulation x world size.
- ``gradient_clipping``: ``"auto"`` / absent = ``actor.optim.clip_grad``; a number must equal it.
- ``bf16.enabled``: ``"auto"`` = ``actor.model.precision == "bf16"``; true = bf16 weights and
  compute with fp32 master weights in the optimizer (honoured on the CPU too). ``fp16.enabled``
  true is refused (fp16 loss scaling is refused project-wide; use bf16).
- ``zero_optimization``: ``stage`` 0-3; ``reduce_bucket_size``, ``stage3_prefetch_bucket_size``,
  ``stage3_param_persistence_threshold`` ``"auto"`` = hidden², 0.9 hidden², 10 hidden (as HF
  does). ``offload_optimizer`` / ``offload_param`` with device ``cpu``: honoured on a GPU; on a CPU
  device dropped with a note (the state already lives in CPU memory); ``nvme`` refused. Every
  other key is checked by DeepSpeed's own schema (unknown key or bad value -> refused, named).
- ``optimizer``: type Adam / AdamW only (the engine builds ``torch.optim.AdamW`` from
  ``actor.optim``); each param ``"auto"`` or equal to ``actor.optim``'s value. ``scheduler``:
  params must be ``"auto"``; the project's schedule (``actor.lr_sched``) sets the LR every step.
- ``activation_checkpointing``: the section turns on recomputation of every decoder layer
  (HF gradient checkpointing); its DeepSpeed-checkpointing sub-keys are noted or refused.
- Logging keys (``steps_per_print``, ``wall_clock_breakdown``, ``memory_breakdown``) and
  ``communication_data_type``, ``prescale_gradients``, ``gradient_predivide_factor``,
  ``zero_allow_untested_optimizer``, ``zero_force_ds_cpu_optimizer`` pass through.
- Any other top-level key is refused, naming it.

Errors are :class:`DeepSpeedConfigError` (a ``ConfigError``): one line, ``<file>: <key>: <why>``.

Example:
    >>> from rlinf.config.actor import ActorConfig
    >>> raw = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    ...        "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}
    >>> r = resolve_ds_config(raw, ActorConfig(), world_size=2, device_type="cpu",
    ...                       micro_batch_size=3, gradient_accumulation_steps=4)
    >>> r.config["train_batch_size"], r.stage, r.bf16
    (24, 2, False)
    >>> resolve_ds_config({"zero_optimisation": {}}, ActorConfig(), world_size=1,
    ...                   device_type="cpu")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rlinf...DeepSpeedConfigError: ds_config: zero_optimisation: unknown DeepSpeed key; this engine reads ...
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from rlinf.utils.typed_config import ConfigError

AUTO = "auto"
#: top-level keys passed to DeepSpeed unchanged (logging, gradient-reduction numerics)
PASS_THROUGH = ("steps_per_print", "wall_clock_breakdown", "memory_breakdown", "communication_data_type",
                "prescale_gradients", "gradient_predivide_factor", "zero_allow_untested_optimizer",
                "zero_force_ds_cpu_optimizer")
HANDLED = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
           "gradient_clipping", "bf16", "fp16", "zero_optimization", "optimizer", "scheduler",
           "activation_checkpointing")
KNOWN_KEYS = tuple(sorted(PASS_THROUGH + HANDLED))
_OPTIM_PARAMS = ("lr", "betas", "eps", "weight_decay")
_ACT_CKPT_NOTES = {
    "partition_activations": "no model parallelism here, nothing to partition",
    "contiguous_memory_optimization": "applies to DeepSpeed's own checkpointing API, which HF models do not call",
    "synchronize_checkpoint_boundary": "applies to DeepSpeed's own checkpointing API, which HF models do not call",
    "profile": "applies to DeepSpeed's own checkpointing API, which HF models do not call",
}


class DeepSpeedConfigError(ConfigError):
    """A DeepSpeed JSON key is unknown or has a value this engine cannot honour."""

    def __init__(self, source: str, key: str, message: str):
        super().__init__(f"{source}: {key}" if source else key, message)
        self.key, self.source = key, source


@dataclass
class ResolvedDsConfig:
    """What :func:`resolve_ds_config` returns.

    Attributes:
        config: the dict for ``deepspeed.initialize(config=...)`` (no ``"auto"`` left, no
            ``optimizer`` / ``scheduler`` / ``activation_checkpointing`` sections).
        stage: ZeRO stage 0-3.
        bf16: bf16 weights and compute (fp32 master weights in the optimizer).
        activation_checkpointing: recompute every decoder layer in the backward pass.
        offload_optimizer, offload_param: CPU offload passed to DeepSpeed (GPU devices only).
        notes: one line per key that was replaced or has no effect here.
    """

    config: dict[str, Any]
    stage: int
    bf16: bool
    activation_checkpointing: bool
    offload_optimizer: bool = False
    offload_param: bool = False
    notes: list[str] = field(default_factory=list)


def load_ds_config(path: str) -> dict[str, Any]:
    """Read a DeepSpeed JSON file; one-line errors naming the file (missing, not JSON, not an
    object).

    >>> import json, tempfile, os
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "ds.json")
    >>> _ = open(p, "w").write('{"zero_optimization": {"stage": 1,}}')
    >>> load_ds_config(p)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../ds.json:1:35: not valid JSON: Expecting property name enclosed in double quotes
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"DeepSpeed config {path}: no such file")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a DeepSpeed config must be a JSON object, got {type(raw).__name__}")
    return raw


def resolve_ds_config(raw: dict[str, Any], actor, *, world_size: int, device_type: str,
                      micro_batch_size: int | None = None, gradient_accumulation_steps: int | None = None,
                      hidden_size: int | None = None, source: str = "ds_config") -> ResolvedDsConfig:
    """Check ``raw`` (a DeepSpeed JSON object) and fill in its ``"auto"`` values from ``actor``
    (``ActorConfig``) and this run's batch settings; see the module docstring for each key.

    ``hidden_size`` (the model's) fills the ``"auto"`` bucket sizes; None drops them (DeepSpeed's
    defaults). ``source`` (the file name) starts every error line.
    """
    raw = copy.deepcopy(raw)
    notes: list[str] = []
    for key in raw:
        if key not in KNOWN_KEYS:
            hint = "; it belongs under zero_optimization" if key in _zero_fields() else ""
            raise DeepSpeedConfigError(source, key, f"unknown DeepSpeed key{hint}; this engine reads "
                                       + ", ".join(KNOWN_KEYS))
    cfg: dict[str, Any] = {k: raw[k] for k in PASS_THROUGH if k in raw}
    cfg.setdefault("steps_per_print", 10**9)  # DeepSpeed's progress lines: off unless asked for
    _check_bool_keys(raw, source)
    _batch_sizes(raw, cfg, world_size, micro_batch_size, gradient_accumulation_steps, source, notes)
    _clipping(raw, cfg, actor, source)
    bf16 = _precision(raw, cfg, actor, source)
    zero, stage, off_opt, off_param = _zero(raw.get("zero_optimization", {}), device_type, hidden_size,
                                            source, notes)
    cfg["zero_optimization"] = zero
    cfg["zero_allow_untested_optimizer"] = True  # the client optimizer is torch's AdamW
    if off_opt:  # torch's AdamW steps the CPU partitions (DeepSpeedCPUAdam would need a C++ build)
        cfg["zero_force_ds_cpu_optimizer"] = False
    _optimizer(raw.get("optimizer"), actor, source)
    _scheduler(raw.get("scheduler"), source, notes)
    act_ckpt = _activation_checkpointing(raw.get("activation_checkpointing"), device_type, source, notes)
    _no_auto_left(cfg, source)
    return ResolvedDsConfig(config=cfg, stage=stage, bf16=bf16, activation_checkpointing=act_ckpt,
                            offload_optimizer=off_opt, offload_param=off_param, notes=notes)


# ---- one function per section ---------------------------------------------------------------------
def _check_bool_keys(raw: dict, source: str) -> None:
    for key in ("wall_clock_breakdown", "memory_breakdown", "prescale_gradients",
                "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer"):
        if key in raw and not isinstance(raw[key], bool):
            raise DeepSpeedConfigError(source, key, f"expected true or false, got {raw[key]!r}")
    if raw.get("zero_allow_untested_optimizer") is False:
        raise DeepSpeedConfigError(source, "zero_allow_untested_optimizer", "false is refused: the engine's "
                                   "optimizer is torch.optim.AdamW, which DeepSpeed calls untested")


def _positive_int(value: Any, key: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DeepSpeedConfigError(source, key, f'expected a positive integer or "auto", got {value!r}')
    return value


def _batch_sizes(raw, cfg, world_size, micro, accum, source, notes) -> None:
    chosen = {}
    for key, given, origin in (("train_micro_batch_size_per_gpu", micro, "per_device_train_batch_size"),
                               ("gradient_accumulation_steps", accum, "gradient_accumulation_steps")):
        value = raw.get(key, AUTO)
        in_file = None if value == AUTO else _positive_int(value, key, source)
        if given is not None:
            given = _positive_int(given, f"algorithm_config.{origin}", "")
            if in_file is not None and in_file != given:
                notes.append(f"{source}: {key}: {in_file} replaced by {given} (algorithm_config.{origin})")
        chosen[key] = given if given is not None else (in_file or 1)
        cfg[key] = chosen[key]
    total = chosen["train_micro_batch_size_per_gpu"] * chosen["gradient_accumulation_steps"] * world_size
    value = raw.get("train_batch_size", AUTO)
    if value != AUTO and _positive_int(value, "train_batch_size", source) != total:
        notes.append(f"{source}: train_batch_size: {value} replaced by {total} (micro batch x accumulation "
                     f"x {world_size} ranks)")
    cfg["train_batch_size"] = total


def _clipping(raw, cfg, actor, source) -> None:
    value = raw.get("gradient_clipping", AUTO)
    want = float(actor.optim.clip_grad)
    if value != AUTO:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise DeepSpeedConfigError(source, "gradient_clipping", f'expected a number >= 0 or "auto", got {value!r}')
        if float(value) != want:
            raise DeepSpeedConfigError(source, "gradient_clipping", f"{value} disagrees with actor.optim.clip_grad="
                                       f'{want}; set "auto" or the same value')
    cfg["gradient_clipping"] = want


def _precision(raw, cfg, actor, source) -> bool:
    fp16 = raw.get("fp16", {}) or {}
    if not isinstance(fp16, dict):
        raise DeepSpeedConfigError(source, "fp16", f"expected an object, got {fp16!r}")
    if fp16.get("enabled", False) not in (False, AUTO):
        raise DeepSpeedConfigError(source, "fp16.enabled", "true is refused: fp16 loss scaling is not supported "
                                   "by this runtime; use bf16")
    precision = str(actor.model.precision).lower()
    if precision in ("fp16", "float16"):
        raise DeepSpeedConfigError(source, "fp16", "actor.model.precision fp16 is refused with DeepSpeed "
                                   "(fp16 needs loss scaling); use bf16 or fp32")
    bf16 = raw.get("bf16", {}) or {}
    if not isinstance(bf16, dict):
        raise DeepSpeedConfigError(source, "bf16", f"expected an object, got {bf16!r}")
    bf16 = dict(bf16)
    enabled = bf16.get("enabled", False)
    if enabled == AUTO:
        enabled = precision in ("bf16", "bfloat16")
    if not isinstance(enabled, bool):
        raise DeepSpeedConfigError(source, "bf16.enabled", f'expected true, false or "auto", got {enabled!r}')
    if not enabled and precision in ("bf16", "bfloat16"):
        raise DeepSpeedConfigError(source, "bf16.enabled", "false is refused with actor.model.precision bf16: "
                                   'the optimizer would step bf16 weights without fp32 masters; set true or "auto"')
    bf16["enabled"] = enabled
    _validate_model("runtime.precision_config", "DeepSpeedBF16Config", bf16, "bf16", source)
    cfg["bf16"] = bf16
    return enabled


def _zero(zero, device_type, hidden_size, source, notes):
    if not isinstance(zero, dict):
        raise DeepSpeedConfigError(source, "zero_optimization", f"expected an object, got {zero!r}")
    zero = dict(zero)
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise DeepSpeedConfigError(source, "zero_optimization.stage", f"expected 0, 1, 2 or 3, got {stage!r}")
    autos = {"reduce_bucket_size": lambda h: h * h, "stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h),
             "stage3_param_persistence_threshold": lambda h: 10 * h}
    for key, fill in autos.items():
        if zero.get(key) == AUTO:
            if hidden_size is None:
                del zero[key]
            else:
                zero[key] = fill(int(hidden_size))
    offloaded = {}
    for key in ("offload_optimizer", "offload_param"):
        section = zero.get(key)
        if section is None:
            offloaded[key] = False
            continue
        if not isinstance(section, dict):
            raise DeepSpeedConfigError(source, f"zero_optimization.{key}", f"expected an object, got {section!r}")
        device = section.get("device", "none")
        if device == "nvme":
            raise DeepSpeedConfigError(source, f"zero_optimization.{key}.device", "nvme is refused: NVMe offload "
                                       "needs DeepSpeed's async-IO C++ op and an nvme_path; use cpu or none")
        if device not in ("cpu", "none"):
            raise DeepSpeedConfigError(source, f"zero_optimization.{key}.device",
                                       f"expected cpu, none or nvme, got {device!r}")
        if key == "offload_param" and device == "cpu" and stage != 3:
            raise DeepSpeedConfigError(source, "zero_optimization.offload_param", f"needs stage 3, got stage {stage}")
        if device == "cpu" and device_type == "cpu":
            notes.append(f"{source}: zero_optimization.{key}: no effect on a CPU device (the state already "
                         "lives in CPU memory); dropped")
            del zero[key]
            device = "none"
        offloaded[key] = device == "cpu"
    if zero.get("stage3_gather_16bit_weights_on_model_save") is True:
        notes.append(f"{source}: zero_optimization.stage3_gather_16bit_weights_on_model_save: no effect: "
                     "export_hf always gathers the full fp32 master weights")
    _validate_model("runtime.zero.config", "DeepSpeedZeroConfig", zero, "zero_optimization", source)
    return zero, stage, offloaded["offload_optimizer"], offloaded["offload_param"]


def _optimizer(section, actor, source) -> None:
    if section is None:
        return
    if not isinstance(section, dict):
        raise DeepSpeedConfigError(source, "optimizer", f"expected an object, got {section!r}")
    for key in section:
        if key not in ("type", "params"):
            raise DeepSpeedConfigError(source, f"optimizer.{key}", "unknown key; expected type and params")
    kind = str(section.get("type", "AdamW"))
    if kind.lower() not in ("adam", "adamw"):
        raise DeepSpeedConfigError(source, "optimizer.type", f"{kind!r} is refused: the engine trains with AdamW "
                                   "built from actor.optim; expected Adam or AdamW")
    o = actor.optim
    want = {"lr": o.lr, "betas": [o.adam_beta1, o.adam_beta2], "eps": o.adam_eps, "weight_decay": o.weight_decay}
    for key, value in (section.get("params") or {}).items():
        if key in ("torch_adam", "adam_w_mode"):
            if value is False and key == "adam_w_mode":
                raise DeepSpeedConfigError(source, "optimizer.params.adam_w_mode", "false is refused: the engine's "
                                           "Adam is AdamW (decoupled weight decay), as actor.optim.optimizer adam is")
            continue
        if key not in _OPTIM_PARAMS:
            raise DeepSpeedConfigError(source, f"optimizer.params.{key}", "unknown key; expected one of "
                                       + ", ".join(_OPTIM_PARAMS + ("torch_adam", "adam_w_mode")))
        if value != AUTO and _as_floats(value) != _as_floats(want[key]):
            raise DeepSpeedConfigError(source, f"optimizer.params.{key}", f"{value} disagrees with actor.optim "
                                       f'({want[key]}); set "auto" or the same value')


def _as_floats(value):
    try:
        return [float(v) for v in value] if isinstance(value, (list, tuple)) else float(value)
    except (TypeError, ValueError):
        return value


def _scheduler(section, source, notes) -> None:
    if section is None:
        return
    if not isinstance(section, dict):
        raise DeepSpeedConfigError(source, "scheduler", f"expected an object, got {section!r}")
    for key, value in (section.get("params") or {}).items():
        if value != AUTO:
            raise DeepSpeedConfigError(source, f"scheduler.params.{key}", f"{value!r} is refused: the learning "
                                       'rate follows actor.lr_sched (algorithm_config); set "auto" or drop the section')
    notes.append(f"{source}: scheduler: the LR follows actor.lr_sched (set every step), not DeepSpeed's "
                 f"{section.get('type', 'scheduler')}")


def _activation_checkpointing(section, device_type, source, notes) -> bool:
    if section is None:
        return False
    if not isinstance(section, dict):
        raise DeepSpeedConfigError(source, "activation_checkpointing", f"expected an object, got {section!r}")
    for key, value in section.items():
        name = f"activation_checkpointing.{key}"
        if key == "cpu_checkpointing":
            if value and device_type != "cpu":
                raise DeepSpeedConfigError(source, name, "true is refused: HF gradient checkpointing keeps the "
                                           "checkpoints on the device; set false")
            if value:
                notes.append(f"{source}: {name}: no effect on a CPU device (activations already in CPU memory)")
        elif key == "number_checkpoints":
            if value is not None:
                notes.append(f"{source}: {name}: no effect: one checkpoint per decoder layer")
        elif key in _ACT_CKPT_NOTES:
            if value:
                notes.append(f"{source}: {name}: no effect: {_ACT_CKPT_NOTES[key]}")
        else:
            raise DeepSpeedConfigError(source, name, "unknown key; expected one of cpu_checkpointing, "
                                       "number_checkpoints, " + ", ".join(_ACT_CKPT_NOTES))
    return True


def _no_auto_left(cfg: dict, source: str, prefix: str = "") -> None:
    for key, value in cfg.items():
        if isinstance(value, dict):
            _no_auto_left(value, source, f"{prefix}{key}.")
        elif value == AUTO:
            raise DeepSpeedConfigError(source, prefix + key, '"auto" cannot be filled in here; give a value')


# ---- DeepSpeed's own schema (pydantic) ------------------------------------------------------------
def import_deepspeed():
    """``import deepspeed`` (ImportError when it is not installed). Its first import creates
    DeepSpeed's logger on the current ``sys.stdout`` and logs the detected accelerator there; the
    import runs with the process's real stdout so that a temporary redirection (a doctest, a
    ``redirect_stdout`` block) does not swallow DeepSpeed's log for the rest of the process."""
    if "deepspeed" in sys.modules or sys.__stdout__ is None:
        return importlib.import_module("deepspeed")
    saved, sys.stdout = sys.stdout, sys.__stdout__
    try:
        return importlib.import_module("deepspeed")
    finally:
        sys.stdout = saved


def _zero_fields() -> set[str]:
    try:
        import_deepspeed()
        # lazy: optional extra (deepspeed, which brings pydantic)
        from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    except ImportError:
        return {"overlap_comm", "contiguous_gradients", "reduce_bucket_size", "offload_optimizer", "offload_param"}
    fields = set(DeepSpeedZeroConfig.model_fields)
    fields |= {f.alias for f in DeepSpeedZeroConfig.model_fields.values() if f.alias}
    return fields


def _validate_model(module: str, cls_name: str, values: dict, prefix: str, source: str) -> None:
    """Validate ``values`` with DeepSpeed's pydantic class (skipped when DeepSpeed is missing);
    the first error becomes one line naming the key."""
    try:
        import_deepspeed()
        cls = getattr(importlib.import_module(f"deepspeed.{module}"), cls_name)
        # lazy: optional extra (deepspeed, which brings pydantic)
        from pydantic import ValidationError
    except ImportError:
        return
    try:
        cls(**{k: v for k, v in values.items() if v != AUTO})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        key = f"{prefix}.{loc}" if loc else prefix
        got = f", got {err['input']!r}" if "input" in err and not isinstance(err["input"], dict) else ""
        reason = "unknown key" if err.get("type") == "extra_forbidden" else err.get("msg", "invalid value")
        raise DeepSpeedConfigError(source, key, f"{reason}{got}") from None
