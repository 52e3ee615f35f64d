"""Reading and writing OpenVLA / OpenVLA-OFT folders in their real on-disk format.

A folder holds:

* ``config.json`` with ``model_type: "openvla"``: ``vision_backbone_id``, ``timm_model_ids``,
  ``timm_override_act_layers``, ``image_sizes``, ``use_fused_vision_backbone``,
  ``llm_backbone_id``, ``arch_specifier`` (projector), ``pad_token_id``, ``pad_to_multiple_of``,
  ``text_config`` (Llama), ``n_action_bins``, ``norm_stats``;
* safetensors weights: shards + ``model.safetensors.index.json`` (or one ``model.safetensors``)
  under the names ``vision_backbone.featurizer.*``, ``vision_backbone.fused_featurizer.*``,
  ``projector.fc{1,2,3}.*``, ``language_model.model.*``, ``language_model.lm_head.weight``
  (RLinf-trained folders may add ``value_head.mlp.*``);
* ``dataset_statistics.json`` (replaces ``norm_stats`` when present, as OFT's loader does),
  tokenizer files, ``preprocessor_config.json``;
* OpenVLA-OFT extras: ``proprio_projector--{step}_checkpoint.pt``,
  ``action_head--{step}_checkpoint.pt`` (keys may carry a ``module.`` prefix), ``lora_adapter/``.

Every problem is a :class:`CheckpointError` with one line naming the file.

Example:
    >>> try:
    ...     inspect_folder("/nonexistent")
    ... except CheckpointError as err:
    ...     print(err)
    /nonexistent: not a folder
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

MODEL_TYPE = "openvla"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
STATS_FILE = "dataset_statistics.json"
_EXTRA_RE = re.compile(r"^(proprio_projector|action_head)--(\d+|latest)_checkpoint\.pt$")
#: Files we write ourselves when saving (everything else of the source folder is copied verbatim).
_WEIGHT_NAME_RE = re.compile(r"^model(-\d+-of-\d+)?\.safetensors$")


class CheckpointError(ValueError):
    """A folder that is not a readable OpenVLA checkpoint (one-line message)."""


@dataclass
class OpenVLAFolder:
    """What :func:`inspect_folder` found.

    Attributes:
        path: the folder.
        config: ``config.json`` as a dict.
        weight_map: tensor name -> shard file name.
        norm_stats: action / proprio statistics (``dataset_statistics.json`` if present, else
            ``config.json``'s ``norm_stats``), or None.
        extras: ``proprio_projector`` / ``action_head`` -> the newest such ``.pt`` file.
        preprocessor: ``preprocessor_config.json`` or None.
    """

    path: Path
    config: dict[str, Any]
    weight_map: dict[str, str]
    norm_stats: dict[str, Any] | None
    extras: dict[str, Path] = field(default_factory=dict)
    preprocessor: dict[str, Any] | None = None

    @property
    def weight_files(self) -> list[str]:
        """Shard file names in order."""
        return sorted(set(self.weight_map.values()))

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Tensor name -> shape, read from the shard headers (no weights loaded)."""
        out: dict[str, tuple[int, ...]] = {}
        for name in self.weight_files:
            with safe_open(str(self.path / name), framework="pt") as f:
                for key in f.keys():
                    out[key] = tuple(f.get_slice(key).get_shape())
        return out

    def disk_dtype(self) -> torch.dtype:
        """dtype of the first weight tensor on disk (bf16 for the released checkpoints)."""
        names = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}
        with safe_open(str(self.path / self.weight_files[0]), framework="pt") as f:
            key = next(iter(f.keys()))
            return names.get(f.get_slice(key).get_dtype(), torch.float32)

    def tensors(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """Every tensor of the shards (cast to ``dtype`` when given)."""
        out: dict[str, torch.Tensor] = {}
        for name in self.weight_files:
            try:
                part = load_file(str(self.path / name))
            except Exception as err:  # noqa: BLE001 - safetensors raises several types
                raise CheckpointError(f"{self.path / name}: cannot read ({type(err).__name__}: {err})") from None
            for key, t in part.items():
                out[key] = t if dtype is None else t.to(dtype)
        return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: cannot read JSON ({err})") from None


def inspect_folder(path: str | os.PathLike) -> OpenVLAFolder:
    """Checks an OpenVLA folder and lists its parts (reads JSON files and shard headers only).

    Raises:
        CheckpointError: not a folder, no / unknown ``config.json``, missing shards, a shard
            without an index entry, unreadable statistics.
    """
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a folder")
    cfg_path = root / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{root}: no config.json (not an HF model folder)")
    config = _read_json(cfg_path)
    model_type = config.get("model_type")
    if model_type != MODEL_TYPE:
        raise CheckpointError(f"{cfg_path}: model_type is {model_type!r}; expected {MODEL_TYPE!r} "
                              "(an OpenVLA / OpenVLA-OFT checkpoint)")
    index = root / INDEX_FILE
    if index.is_file():
        weight_map = dict(_read_json(index).get("weight_map") or {})
        if not weight_map:
            raise CheckpointError(f"{index}: empty weight_map")
        missing = sorted({f for f in weight_map.values() if not (root / f).is_file()})
        if missing:
            raise CheckpointError(f"{root}: missing weight shard(s) {', '.join(missing)} listed in {INDEX_FILE}")
    elif (root / SINGLE_FILE).is_file():
        with safe_open(str(root / SINGLE_FILE), framework="pt") as f:
            weight_map = {k: SINGLE_FILE for k in f.keys()}
    else:
        raise CheckpointError(f"{root}: no weights ({INDEX_FILE} or {SINGLE_FILE})")
    stats_path = root / STATS_FILE
    norm_stats = _read_json(stats_path) if stats_path.is_file() else config.get("norm_stats")
    extras: dict[str, Path] = {}
    steps: dict[str, int] = {}
    for entry in sorted(os.listdir(root)):
        m = _EXTRA_RE.match(entry)
        if m:
            step = -1 if m.group(2) == "latest" else int(m.group(2))
            if m.group(1) not in steps or step >= steps[m.group(1)]:
                extras[m.group(1)], steps[m.group(1)] = root / entry, step
    pre = root / "preprocessor_config.json"
    return OpenVLAFolder(path=root, config=config, weight_map=weight_map, norm_stats=norm_stats,
                         extras=extras, preprocessor=_read_json(pre) if pre.is_file() else None)


def load_extra(path: Path) -> dict[str, torch.Tensor]:
    """An OFT ``*--{step}_checkpoint.pt`` state dict with any ``module.`` (DDP) prefix removed."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001
        raise CheckpointError(f"{path}: cannot read ({type(err).__name__}: {err})") from None
    return {k.removeprefix("module."): v for k, v in state.items()}


def write_weights(state: Mapping[str, torch.Tensor], out: Path, max_shard_bytes: int = 5 * 2 ** 30,
                  dtype: torch.dtype | None = None) -> None:
    """Writes ``state`` as safetensors shards ``model-0000i-of-0000n.safetensors`` + the index
    (HF's layout; one shard gets the same names), in ``dtype`` when given."""
    tensors = {k: (v if dtype is None else v.to(dtype)).detach().contiguous().cpu() for k, v in state.items()}
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key in sorted(tensors):
        nbytes = tensors[key].numel() * tensors[key].element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][key] = tensors[key]
        size += nbytes
    n = len(shards)
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{n:05d}.safetensors"
        save_file(shard, str(out / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (out / INDEX_FILE).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                             indent=2, sort_keys=True) + "\n")


def copy_other_files(src: Path, out: Path, skip: Iterable[str] = ()) -> None:
    """Copies the files of ``src`` that are not weights (tokenizer, preprocessor, statistics,
    OFT extras, ...) into ``out``, except those named in ``skip``."""
    skip = set(skip) | {INDEX_FILE, "config.json"}
    for name in os.listdir(src):
        p = src / name
        if name in skip or _WEIGHT_NAME_RE.match(name):
            continue
        if p.is_file():
            shutil.copy2(p, out / name)
        elif p.is_dir() and name != "lora_adapter":
            shutil.copytree(p, out / name, dirs_exist_ok=True)
