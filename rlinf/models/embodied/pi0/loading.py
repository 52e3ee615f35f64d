"""Load a π0 / π0.5 folder (openpi, RLinf or LeRobot layout) into a :class:`~.policy.Pi0Policy`
and write it back in the same layout.

Loading is strict: every tensor of the folder goes into a parameter, except the ones the forward
never uses, which are carried and written back unchanged (``gemma_expert.lm_head.weight``, the
second copy of the tied embedding when both ``lm_head`` and ``embed_tokens`` are stored) and
RLinf's ``value_head.*`` / ``noise_head.*``, kept in ``policy.extras``. A tensor that fits
nothing, a parameter the folder lacks, or a wrong shape stops the load with one line naming it.
Parameters are created on the meta device and the folder's tensors assigned.

Example (a tiny checkpoint in the real format; see :mod:`.tiny`):
    >>> import tempfile
    >>> from rlinf.models.embodied.pi0.tiny import write_tiny_pi0
    >>> tmp = tempfile.TemporaryDirectory()
    >>> policy = load_pi0(write_tiny_pi0(tmp.name, pi05=True, layout="lerobot"))
    >>> policy.model_type, policy.layout, policy.prompt_format, policy.stats.mode
    ('pi05', 'lerobot', 'pi05_state', 'quantile')
    >>> tmp.cleanup()
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlinf.models.embodied.openvla.loading import params_on_meta
from rlinf.models.embodied.pi0.checkpoint import (
    EXTRA_PREFIXES,
    LEROBOT_PREFIX,
    Pi0CheckpointError,
    Pi0Folder,
    copy_other_files,
    inspect_pi0_folder,
    lerobot_cameras,
    select_stats,
    write_safetensors,
)
from rlinf.models.embodied.pi0.modeling import Pi0Model
from rlinf.models.embodied.pi0.normalization import stats_to_openpi_json
from rlinf.models.embodied.pi0.policy import Pi0Options, Pi0Policy
from rlinf.models.embodied.pi0.processing import OPENPI_CAMERAS, PaliGemmaTokenizer
from rlinf.models.embodied.pi0.spec import EMBED, EXPERT_LM_HEAD, LM_HEAD, SpecError, spec_from_shapes
from rlinf.utils.atomic_file import atomic_folder

TOKENIZER_NAMES = ("paligemma_tokenizer.model", "tokenizer.model")
DEFAULT_HORIZON = 50
DEFAULT_MAX_TOKENS = {"pi0": 48, "pi05": 200}


def find_tokenizer(folder: Pi0Folder, path: str | os.PathLike | None) -> PaliGemmaTokenizer:
    """The tokenizer at ``path``, else ``paligemma_tokenizer.model`` / ``tokenizer.model`` in the folder."""
    if path is None:
        found = [folder.path / n for n in TOKENIZER_NAMES if (folder.path / n).is_file()]
        if not found:
            raise Pi0CheckpointError(f"{folder.path}: no {' or '.join(TOKENIZER_NAMES)}; pass tokenizer_path "
                                     "(PaliGemma's SentencePiece paligemma_tokenizer.model)")
        path = found[0]
    if not Path(path).is_file():
        raise Pi0CheckpointError(f"tokenizer_path {path}: no such file")
    try:
        return PaliGemmaTokenizer(path)
    except ValueError as err:
        raise Pi0CheckpointError(str(err)) from None


def _prompt_format(folder: Pi0Folder, pi05: bool, discrete: bool | None) -> str:
    if not pi05:
        return "pi0_lerobot" if folder.layout == "lerobot" else "pi0"
    if folder.layout == "lerobot":
        if discrete is False:
            raise Pi0CheckpointError(f"{folder.path}: LeRobot's π0.5 always puts the state in the prompt "
                                     "(discrete_state_input must not be False)")
        return "pi05_state"
    return "pi0" if discrete is False else "pi05_state"


@dataclass
class Pi0Plan:
    """What a folder holds, read without its weights (:func:`plan_pi0`): enough to check a
    configuration against it before any tensor is loaded.

    Attributes:
        folder: the inspected folder.
        spec: the sizes (from the safetensors headers).
        model_type: ``pi0`` or ``pi05`` (from the tensors).
        tokenizer: the PaliGemma tokenizer.
        stats: the chosen statistics (None: the folder has none).
        cameras: the camera slots.
        prompt_format: see :mod:`.processing`.
        max_token_len: prompt length.
    """

    folder: Pi0Folder
    spec: Any
    model_type: str
    tokenizer: PaliGemmaTokenizer
    stats: Any
    cameras: list[str]
    prompt_format: str
    max_token_len: int


def plan_pi0(path: str | os.PathLike, options: Pi0Options | None = None) -> Pi0Plan:
    """Everything :func:`load_pi0` decides before it reads a weight: the layout, the sizes (from
    the file headers), the model type against ``options.model_type`` and a LeRobot ``type``, the
    tokenizer, the statistics of ``options.asset_id``, the cameras and the prompt format.

    Raises:
        Pi0CheckpointError: the folder is not a complete checkpoint of a supported layout, or
            ``options.model_type`` differs from the weights.
        KeyError: ``options.asset_id`` names no statistics of the folder.
    """
    options = options or Pi0Options()
    folder = inspect_pi0_folder(path)
    shapes = folder.shapes()
    horizon = options.action_horizon or folder.action_horizon() or DEFAULT_HORIZON
    try:
        spec = spec_from_shapes(shapes, horizon, vision_heads=options.vision_heads)
    except SpecError as err:
        raise Pi0CheckpointError(f"{folder.path}: {err}") from None
    model_type = "pi05" if spec.pi05 else "pi0"
    for where, declared in (("model_type", options.model_type),
                            (f"{folder.path}/config.json type", folder.lerobot_type())):
        if declared is not None and declared != model_type:
            raise Pi0CheckpointError(f"{where} is {declared!r} but the weights are {model_type!r} "
                                     f"({'adaRMS' if spec.pi05 else 'no adaRMS'} norms in the expert)")
    tokenizer = find_tokenizer(folder, options.tokenizer_path)
    if tokenizer.vocab_size > spec.vlm.vocab:
        raise Pi0CheckpointError(f"{tokenizer.path}: {tokenizer.vocab_size} pieces, the embedding has "
                                 f"{spec.vlm.vocab} rows")
    stats = select_stats(folder, options.asset_id, spec.pi05)
    if folder.layout == "lerobot":
        cameras = lerobot_cameras(folder.config)
        if not cameras:
            raise Pi0CheckpointError(f"{folder.path}/config.json: no VISUAL input_features")
        max_len = int(folder.config.get("tokenizer_max_length") or DEFAULT_MAX_TOKENS[model_type])
    else:
        cameras = list(OPENPI_CAMERAS)
        max_len = DEFAULT_MAX_TOKENS[model_type]
    fmt = _prompt_format(folder, spec.pi05, options.discrete_state_input)
    return Pi0Plan(folder, spec, model_type, tokenizer, stats, cameras, fmt, options.max_token_len or max_len)


def load_pi0(path: str | os.PathLike, options: Pi0Options | None = None,
             dtype: torch.dtype = torch.float32) -> Pi0Policy:
    """Builds the policy from a folder (see the module docstring).

    Args:
        path: the checkpoint folder.
        options: how to run it.
        dtype: dtype of the weights in memory (the releases store bf16).

    Raises:
        Pi0CheckpointError: the folder is not a complete checkpoint of a supported layout.
        KeyError: ``options.asset_id`` names no statistics of the folder.
    """
    options = options or Pi0Options()
    plan = plan_pi0(path, options)
    folder = plan.folder
    with params_on_meta():
        model = Pi0Model(plan.spec)
    state = folder.tensors()
    ours, carried, extras, embed_names = split_checkpoint(state, model, str(folder.path))
    model.load_state_dict({k: v.to(dtype) for k, v in ours.items()}, strict=True, assign=True)
    policy = Pi0Policy(model, plan.tokenizer, plan.stats, plan.cameras, plan.prompt_format, plan.max_token_len,
                       folder.layout, num_steps=options.num_steps)
    policy.carried, policy.extras, policy.embed_names = carried, extras, embed_names
    policy.config = dict(folder.config)
    policy.source_path = folder.path
    policy.source_dtype = folder.disk_dtype()
    policy.asset_id = options.asset_id
    return policy.eval()


def split_checkpoint(state: Mapping[str, torch.Tensor], model: Pi0Model, where: str):
    """Checkpoint tensors (openpi names) -> ``(model state dict, carried, extras, embedding
    names stored)``; raises on a tensor that fits nothing, a missing one or a wrong shape."""
    expected = model.state_dict()
    rest = dict(state)
    embed_names = [k for k in (LM_HEAD, EMBED) if k in rest]
    if not embed_names:
        raise Pi0CheckpointError(f"{where}: missing tensor {LM_HEAD} (the tied text embedding)")
    carried = {}
    if len(embed_names) == 2:  # both copies stored: embed_tokens is used, lm_head carried
        carried[LM_HEAD] = rest.pop(LM_HEAD)
        embed_names = [LM_HEAD, EMBED]
    else:
        rest[EMBED] = rest.pop(embed_names[0])
    if EXPERT_LM_HEAD in rest:
        carried[EXPERT_LM_HEAD] = rest.pop(EXPERT_LM_HEAD)
    extras = {k: rest.pop(k) for k in list(rest) if k.startswith(EXTRA_PREFIXES)}
    shape = {k: tuple(t.shape) for k, t in rest.items()}
    problems = [("unexpected tensor(s) that fit no part of the model", sorted(set(rest) - set(expected)), False),
                ("tensor(s) missing", sorted(set(expected) - set(rest)), False),
                ("tensor(s) of the wrong shape", sorted(k for k in rest if k in expected
                                                        and shape[k] != tuple(expected[k].shape)), True)]
    for what, keys, show_shape in problems:
        if keys:
            names = [f"{k} {shape[k]} (expected {tuple(expected[k].shape)})" if show_shape else k for k in keys[:4]]
            raise Pi0CheckpointError(f"{where}: {len(keys)} {what}, e.g. {', '.join(names)}")
    return rest, carried, extras, embed_names


def checkpoint_state(policy: Pi0Policy, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The policy's tensors under the names its folder used (openpi naming)."""
    out = {k: v.to(dtype) for k, v in policy.model.state_dict().items()}
    embedding = out.pop(EMBED)
    for name in policy.embed_names or [LM_HEAD]:
        out[name] = embedding
    out.update({k: v.to(dtype) for k, v in policy.carried.items()})
    out.update(policy.extras)
    return out


def _default_config(policy: Pi0Policy) -> dict:
    spec = policy.model.spec
    if policy.layout != "lerobot":
        return {"action_dim": spec.action_dim, "action_horizon": spec.action_horizon,
                "paligemma_variant": "custom", "action_expert_variant": "custom", "precision": "float32"}
    raise Pi0CheckpointError("a LeRobot checkpoint is written from a loaded LeRobot folder only")


def save_pi0(policy: Pi0Policy, out_dir: str | os.PathLike, dtype: torch.dtype | None = None) -> Path:
    """Writes ``policy`` in the layout it was loaded from (atomically: a temporary sibling, then
    renamed): ``model.safetensors`` (LeRobot: every name under ``model.``) in ``dtype`` (default:
    the source's), the source folder's other files (config, statistics, processors, tokenizer)
    copied; without a source folder, ``config.json`` and the statistics are generated (openpi /
    RLinf layouts only).

    Returns:
        The folder.
    """
    out = Path(out_dir)
    with atomic_folder(out) as tmp:
        state = checkpoint_state(policy, dtype or policy.source_dtype)
        prefix = LEROBOT_PREFIX if policy.layout == "lerobot" else ""
        write_safetensors(state, tmp / "model.safetensors", prefix=prefix)
        if policy.source_path is not None:
            copy_other_files(Path(policy.source_path), tmp, skip=set())
        else:
            (tmp / "config.json").write_text(json.dumps(_default_config(policy), indent=2) + "\n")
            shutil.copy2(policy.tokenizer.path, tmp / "paligemma_tokenizer.model")
            if policy.stats is not None:
                base = tmp / "assets" if policy.layout == "openpi" else tmp
                stats_dir = base / (policy.asset_id or "default")
                stats_dir.mkdir(parents=True, exist_ok=True)
                (stats_dir / "norm_stats.json").write_text(json.dumps(stats_to_openpi_json(policy.stats), indent=2))
    return out
