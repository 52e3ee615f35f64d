"""The three on-disk layouts of π0 / π0.5 checkpoints, read and written.

* ``openpi`` (``examples/convert_jax_model_to_pytorch.py``, ``scripts/train_pytorch.py``):
  ``model.safetensors`` under ``PI0Pytorch``'s names, ``config.json`` (``action_dim``,
  ``action_horizon``, ``paligemma_variant``, ``action_expert_variant``, ``precision``),
  ``assets/<asset_id>/norm_stats.json``.
* ``rlinf`` (RLinf's released SFT / RL folders): the same names in any ``*.safetensors`` files
  (merged), optional ``value_head.*`` / ``noise_head.*`` tensors, statistics at
  ``<folder>/<asset_id>/norm_stats.json`` (no ``assets/``).
* ``lerobot`` (LeRobot 0.6 ``pi0`` / ``pi05``): ``config.json`` with ``type``,
  ``chunk_size``, ``input_features`` / ``output_features``, ``normalization_mapping``,
  ``tokenizer_max_length``; ``model.safetensors`` with every name under ``model.``;
  ``policy_preprocessor.json`` / ``policy_postprocessor.json`` whose normaliser steps name
  ``*_normalizer_processor.safetensors`` files keyed ``<feature>.<stat>``.

The tied text embedding is stored as ``paligemma_with_expert.paligemma.lm_head.weight`` only
(``safetensors.save_model`` drops the duplicate); ``...language_model.embed_tokens.weight`` is
accepted too. Problems are :class:`Pi0CheckpointError` with one line naming the file.

Example:
    >>> try:
    ...     inspect_pi0_folder("/nonexistent")
    ... except Pi0CheckpointError as err:
    ...     print(err)
    /nonexistent: not a folder
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from rlinf.models.embodied.pi0.normalization import NormStats, stats_from_openpi_json

LAYOUTS = ("openpi", "rlinf", "lerobot")
LEROBOT_PREFIX = "model."
LEROBOT_TYPES = ("pi0", "pi05")
STATS_NAME = "norm_stats.json"
PRE_JSON = "policy_preprocessor.json"
POST_JSON = "policy_postprocessor.json"
#: RLinf's extra heads, kept as tensors for the caller.
EXTRA_PREFIXES = ("value_head.", "noise_head.")
_LEROBOT_MODES = {"MEAN_STD": "mean_std", "QUANTILES": "quantile"}


class Pi0CheckpointError(ValueError):
    """A folder that is not a readable π0 / π0.5 checkpoint (one-line message)."""


@dataclass
class Pi0Folder:
    """What :func:`inspect_pi0_folder` found.

    Attributes:
        path: the folder.
        layout: ``openpi``, ``rlinf`` or ``lerobot``.
        config: ``config.json`` (empty when absent).
        weight_files: the safetensors files holding the model.
        stats_files: asset id -> ``norm_stats.json`` (openpi / rlinf layouts).
        processors: LeRobot's ``policy_{pre,post}processor.json`` contents by file name.
    """

    path: Path
    layout: str
    config: dict[str, Any]
    weight_files: list[str]
    stats_files: dict[str, Path] = field(default_factory=dict)
    processors: dict[str, Any] = field(default_factory=dict)

    def _strip(self, key: str) -> str:
        if self.layout != "lerobot":
            return key
        if not key.startswith(LEROBOT_PREFIX):
            raise Pi0CheckpointError(f"{self.path}/model.safetensors: {key} lacks LeRobot's {LEROBOT_PREFIX!r} prefix")
        return key[len(LEROBOT_PREFIX):]

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Tensor name (openpi naming) -> shape, from the file headers."""
        out: dict[str, tuple[int, ...]] = {}
        for name in self.weight_files:
            with safe_open(str(self.path / name), framework="pt") as f:
                for key in f.keys():
                    out[self._strip(key)] = tuple(f.get_slice(key).get_shape())
        return out

    def disk_dtype(self) -> torch.dtype:
        """dtype of the weights on disk (of the language model's first projection)."""
        names = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}
        with safe_open(str(self.path / self.weight_files[0]), framework="pt") as f:
            keys = list(f.keys())
            key = next((k for k in keys if "q_proj" in k), keys[0])
            return names.get(f.get_slice(key).get_dtype(), torch.float32)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor (openpi naming), as stored."""
        out: dict[str, torch.Tensor] = {}
        for name in self.weight_files:
            try:
                part = load_file(str(self.path / name))
            except Exception as err:  # noqa: BLE001 - safetensors raises several types
                raise Pi0CheckpointError(f"{self.path / name}: cannot read ({type(err).__name__}: {err})") from None
            out.update({self._strip(k): v for k, v in part.items()})
        return out

    def action_horizon(self) -> int | None:
        """``H`` from config.json (``action_horizon``, LeRobot ``chunk_size``), or None."""
        value = self.config.get("chunk_size" if self.layout == "lerobot" else "action_horizon")
        return int(value) if value is not None else None

    def lerobot_type(self) -> str | None:
        """LeRobot's ``type`` (``pi0`` / ``pi05``), or None for the other layouts."""
        return self.config.get("type") if self.layout == "lerobot" else None


def read_json(path: Path) -> Any:
    """JSON of ``path``; a one-line :class:`Pi0CheckpointError` when unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise Pi0CheckpointError(f"{path}: cannot read JSON ({err})") from None


def _find_stats(root: Path) -> dict[str, Path]:
    out = {}
    for depth in ("*", "*/*", "*/*/*"):
        for p in sorted(root.glob(f"{depth}/{STATS_NAME}")):
            out[p.parent.relative_to(root).as_posix()] = p
    return out


def _is_processor_state(name: str) -> bool:
    return name.startswith(("policy_preprocessor", "policy_postprocessor"))


def inspect_pi0_folder(path: str | os.PathLike) -> Pi0Folder:
    """Finds the layout and the files of a checkpoint folder (reads JSON files only).

    Raises:
        Pi0CheckpointError: not a folder, no weights, unreadable JSON, a LeRobot ``type`` that is
            not π0 / π0.5.
    """
    root = Path(path)
    if not root.is_dir():
        raise Pi0CheckpointError(f"{root}: not a folder")
    cfg_path = root / "config.json"
    config = read_json(cfg_path) if cfg_path.is_file() else {}
    if not isinstance(config, dict):
        raise Pi0CheckpointError(f"{cfg_path}: expected a JSON object")
    weights = sorted(p.name for p in root.glob("*.safetensors") if not _is_processor_state(p.name))
    if "type" in config:
        if config["type"] not in LEROBOT_TYPES:
            raise Pi0CheckpointError(f"{cfg_path}: type is {config['type']!r}; expected one of {LEROBOT_TYPES} "
                                     "(a LeRobot π0 / π0.5 checkpoint)")
        if not (root / "model.safetensors").is_file():
            raise Pi0CheckpointError(f"{root}: no model.safetensors")
        processors = {name: read_json(root / name) for name in (PRE_JSON, POST_JSON) if (root / name).is_file()}
        return Pi0Folder(root, "lerobot", config, ["model.safetensors"], processors=processors)
    if not weights:
        raise Pi0CheckpointError(f"{root}: no *.safetensors weights")
    if (root / "assets").is_dir():
        return Pi0Folder(root, "openpi", config, ["model.safetensors"] if "model.safetensors" in weights else weights,
                         stats_files=_find_stats(root / "assets"))
    stats = _find_stats(root)
    layout = "rlinf" if stats or len(weights) > 1 else "openpi"
    return Pi0Folder(root, layout, config, weights, stats_files=stats)


def select_stats(folder: Pi0Folder, asset_id: str | None, pi05: bool) -> NormStats | None:
    """The statistics of ``asset_id`` (None: the only set; no sets: None).

    openpi / rlinf: π0 mean/std, π0.5 quantile (openpi's ``use_quantile_norm``); LeRobot: the
    modes of its normaliser processors (``asset_id`` is not used: a LeRobot folder has one set;
    no processor files: None).

    Raises:
        KeyError: ``asset_id`` names no statistics, or several exist and none was named.
        Pi0CheckpointError: unreadable statistics.
    """
    if folder.layout == "lerobot":
        if not folder.processors:  # e.g. a base model saved without its processors
            if asset_id is not None:
                raise KeyError(f"{asset_id!r}: {folder.path} has no {POST_JSON}")
            return None
        return lerobot_stats(folder)
    if not folder.stats_files:
        if asset_id is not None:
            raise KeyError(f"{asset_id!r}: {folder.path} has no {STATS_NAME}")
        return None
    if asset_id is None:
        if len(folder.stats_files) > 1:
            raise KeyError(f"several statistics in {folder.path}: name one of {sorted(folder.stats_files)}")
        asset_id = next(iter(folder.stats_files))
    if asset_id not in folder.stats_files:
        raise KeyError(f"{asset_id!r} is not one of {sorted(folder.stats_files)}")
    path = folder.stats_files[asset_id]
    try:
        return stats_from_openpi_json(read_json(path), "quantile" if pi05 else "mean_std", str(path))
    except ValueError as err:
        raise Pi0CheckpointError(str(err)) from None


def _processor_step(folder: Pi0Folder, file: str, registry: str) -> tuple[dict, dict[str, torch.Tensor]]:
    data = folder.processors.get(file)
    if data is None:
        raise Pi0CheckpointError(f"{folder.path}: no {file} (LeRobot's normaliser statistics)")
    for step in data.get("steps") or []:
        if step.get("registry_name") == registry:
            state_file = step.get("state_file")
            if not state_file or not (folder.path / state_file).is_file():
                raise Pi0CheckpointError(f"{folder.path / file}: the {registry} step's state_file "
                                         f"{state_file!r} is missing")
            return step.get("config") or {}, load_file(str(folder.path / state_file))
    raise Pi0CheckpointError(f"{folder.path / file}: no {registry!r} step")


def _feature_stats(tensors: Mapping[str, torch.Tensor], feature: str) -> dict[str, list[float]] | None:
    out = {k[len(feature) + 1:]: v.double().reshape(-1).tolist() for k, v in tensors.items()
           if k.startswith(feature + ".") and "." not in k[len(feature) + 1:]}
    return out or None


def lerobot_stats(folder: Pi0Folder) -> NormStats:
    """Statistics of a LeRobot folder: actions from the postprocessor's unnormaliser, state from
    the preprocessor's normaliser, modes from their ``norm_map``."""
    post_cfg, post = _processor_step(folder, POST_JSON, "unnormalizer_processor")
    pre_cfg, pre = _processor_step(folder, PRE_JSON, "normalizer_processor")
    where = str(folder.path / POST_JSON)
    modes = {}
    for kind, cfg in (("ACTION", post_cfg), ("STATE", pre_cfg)):
        raw = (cfg.get("norm_map") or folder.config.get("normalization_mapping") or {}).get(kind)
        if raw not in _LEROBOT_MODES:
            raise Pi0CheckpointError(f"{where}: {kind} normalisation {raw!r} is not supported "
                                     f"(expected one of {sorted(_LEROBOT_MODES)})")
        modes[kind] = _LEROBOT_MODES[raw]
    actions = _feature_stats(post, "action")
    if actions is None:
        raise Pi0CheckpointError(f"{where}: no action.* statistics")
    try:
        return NormStats(mode=modes["ACTION"], style="lerobot", actions=actions,
                         state=_feature_stats(pre, "observation.state"), eps=float(post_cfg.get("eps", 1e-8)),
                         where=where, state_mode=modes["STATE"])
    except ValueError as err:
        raise Pi0CheckpointError(str(err)) from None


def lerobot_cameras(config: Mapping[str, Any]) -> list[str]:
    """The VISUAL input features of a LeRobot config in order, then its empty cameras."""
    feats = config.get("input_features") or {}
    names = [k for k, v in feats.items() if isinstance(v, Mapping) and v.get("type") == "VISUAL"]
    names += [f"observation.images.empty_camera_{i}" for i in range(int(config.get("empty_cameras") or 0))]
    return names


def write_safetensors(state: Mapping[str, torch.Tensor], path: Path, prefix: str = "") -> None:
    """One safetensors file (contiguous CPU copies; shared storage broken up)."""
    tensors = {prefix + k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}
    save_file(tensors, str(path), metadata={"format": "pt"})


def copy_other_files(src: Path, out: Path, skip: set[str]) -> None:
    """Copies what is not in ``skip`` and not a weight file from ``src`` to ``out``."""
    for entry in os.listdir(src):
        p = src / entry
        if entry in skip or (entry.endswith(".safetensors") and not _is_processor_state(entry)):
            continue
        if p.is_file():
            shutil.copy2(p, out / entry)
        elif p.is_dir():
            shutil.copytree(p, out / entry, dirs_exist_ok=True)
