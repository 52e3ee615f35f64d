"""Load a real OpenVLA / OpenVLA-OFT folder into an :class:`~.modeling.OpenVLAPolicy` and write
one back in the same format.

Loading is strict: every checkpoint tensor is either loaded into a module (towers through
:mod:`.vision`'s name map) or one of the tensors the forward never uses (the last vision
block, the towers' final norms, SigLIP's ``attn_pool``), which are carried and written back
unchanged; anything else is an error, and so is a module tensor the checkpoint lacks, except
the ones we create: a fresh RLinf value head (absent from OpenVLA releases), a fresh OFT proprio
projector when the folder has none, and DINOv2's unused ``mask_token``. Parameters are created
on the meta device and the checkpoint's tensors assigned, so a 7B model is never initialised at
random first.

Example (a tiny checkpoint in the real format; see :mod:`.tiny`):
    >>> import tempfile
    >>> from rlinf.models.embodied.openvla.tiny import write_tiny_openvla
    >>> tmp = tempfile.TemporaryDirectory()
    >>> policy = load_openvla(write_tiny_openvla(tmp.name), OpenVLAOptions(model_type="openvla"))
    >>> policy.num_action_tokens, sorted(policy.carried)[:1]  # the last of 3 DINOv2 blocks is unused
    (7, ['vision_backbone.featurizer.blocks.2.attn.proj.bias'])
    >>> tmp.cleanup()
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from rlinf.models.embodied.openvla.checkpoint import (
    STATS_FILE,
    CheckpointError,
    OpenVLAFolder,
    copy_other_files,
    inspect_folder,
    load_extra,
    write_weights,
)
from rlinf.models.embodied.openvla.lora import merged_state_dict, save_lora_adapter
from rlinf.models.embodied.openvla.modeling import OpenVLAOptions, OpenVLAPolicy
from rlinf.models.embodied.openvla.prompt import load_tokenizer, special_ids
from rlinf.models.embodied.openvla.vision import (
    TowerSpec,
    join_tower_state,
    model_only_keys,
    split_tower_state,
    tower_spec,
)
from rlinf.utils.atomic_file import atomic_folder

TOWER_PREFIXES = ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer.")
PROPRIO_PREFIX = "proprio_projector."


@contextmanager
def params_on_meta():
    """Modules built inside get their parameters on the meta device (buffers stay real)."""
    original = nn.Module.register_parameter

    def register(module, name, param):
        original(module, name, param)
        if param is not None and param.device.type != "meta":
            p = module._parameters[name]
            module._parameters[name] = nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)

    nn.Module.register_parameter = register
    try:
        yield
    finally:
        nn.Module.register_parameter = original


def tower_specs(folder: OpenVLAFolder, shapes: Mapping[str, tuple[int, ...]]) -> list[TowerSpec]:
    """The vision towers of a folder (timm ids and image sizes from config.json, sizes from the
    tensor shapes)."""
    cfg = folder.config
    ids = list(cfg.get("timm_model_ids") or [])
    sizes = list(cfg.get("image_sizes") or [])
    fused = bool(cfg.get("use_fused_vision_backbone", len(ids) > 1))
    want = 2 if fused else 1
    if len(ids) != want or len(sizes) < want:
        raise CheckpointError(f"{folder.path}/config.json: use_fused_vision_backbone={fused} needs {want} "
                              f"timm_model_ids and image_sizes, got {ids} / {sizes}")
    acts = list(cfg.get("timm_override_act_layers") or [None] * want)
    specs = []
    for i, prefix in enumerate(TOWER_PREFIXES[:want]):
        if acts[i] is not None:
            raise CheckpointError(f"{folder.path}/config.json: timm_override_act_layers {acts[i]!r} is not "
                                  "supported (only the towers' own GELU)")
        sub = {k[len(prefix):]: v for k, v in shapes.items() if k.startswith(prefix)}
        try:
            specs.append(tower_spec(ids[i], int(sizes[i]), sub))
        except ValueError as err:
            raise CheckpointError(f"{folder.path}: {prefix.rstrip('.')}: {err}") from None
    return specs


def _options_with_proprio(options: OpenVLAOptions, folder: OpenVLAFolder) -> tuple[OpenVLAOptions, dict | None]:
    if not options.use_proprio:
        return options, None
    state = load_extra(folder.extras["proprio_projector"]) if "proprio_projector" in folder.extras else None
    if state is not None:
        dim = int(state["fc1.weight"].shape[1])
        if options.proprio_dim not in (None, dim):
            raise CheckpointError(f"{folder.extras['proprio_projector']}: reads {dim} state values, "
                                  f"proprio_dim is {options.proprio_dim}")
        options = OpenVLAOptions(**{**options.__dict__, "proprio_dim": dim})
    elif not options.proprio_dim:
        raise CheckpointError(f"{folder.path}: use_proprio without a proprio_projector--*_checkpoint.pt file "
                              "needs proprio_dim (a fresh projector)")
    return options, state


def load_openvla(path: str | os.PathLike, options: OpenVLAOptions, dtype: torch.dtype = torch.float32,
                 attn_implementation: str | None = None) -> OpenVLAPolicy:
    """Builds the policy from a real-format folder (see the module docstring).

    Args:
        path: the checkpoint folder.
        options: how to run it.
        dtype: dtype of the weights in memory (the folder's are usually bf16).
        attn_implementation: for the LM (e.g. ``sdpa``, ``flash_attention_2``); None = default.

    Raises:
        CheckpointError: the folder is not a complete checkpoint of a supported layout.
        KeyError: ``unnorm_key`` names no statistics of the folder.
    """
    folder = inspect_folder(path)
    shapes = folder.shapes()
    towers = tower_specs(folder, shapes)
    try:
        tokenizer = load_tokenizer(folder.path)
        ids = special_ids(tokenizer, folder.config.get("pad_token_id"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{folder.path}: tokenizer: {err}") from None
    options, proprio_state = _options_with_proprio(options, folder)
    if "text_config" not in folder.config:
        raise CheckpointError(f"{folder.path}/config.json: no text_config")
    try:
        with params_on_meta():
            policy = OpenVLAPolicy(folder.config, towers, options, tokenizer, ids, folder.norm_stats,
                                   attn_implementation=attn_implementation)
    except ValueError as err:
        raise CheckpointError(f"{folder.path}/config.json: {err}") from None
    state = folder.tensors(dtype)
    ours, carried = checkpoint_to_model(state, policy, str(folder.path))
    if proprio_state is not None:
        ours.update({PROPRIO_PREFIX + k: v.to(dtype) for k, v in proprio_state.items()})
    _check_coverage(policy, ours, str(folder.path))
    policy.load_state_dict(ours, strict=False, assign=True)
    _materialize(policy, dtype)
    policy.carried = carried
    policy.extras = {name: load_extra(p) for name, p in folder.extras.items() if name != "proprio_projector"}
    policy.source_path = folder.path
    policy.source_dtype = folder.disk_dtype()
    policy.to(dtype)
    if getattr(policy.language_model.config, "tie_word_embeddings", False):
        policy.language_model.tie_weights()
    return policy


def checkpoint_to_model(state: Mapping[str, torch.Tensor], policy: OpenVLAPolicy, where: str
                        ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Checkpoint names -> ``(our state dict, carried tensors)``; raises on unknown tensors."""
    ours: dict[str, torch.Tensor] = {}
    carried: dict[str, torch.Tensor] = {}
    rest = dict(state)
    for (name, _, spec), prefix in zip(policy.vision_backbone.towers(), TOWER_PREFIXES):
        sub = {k[len(prefix):]: rest.pop(k) for k in list(rest) if k.startswith(prefix)}
        try:
            mapped, unused = split_tower_state(sub, spec)
        except KeyError as err:
            raise CheckpointError(f"{where}: {prefix}{err.args[0]}") from None
        ours.update({f"vision_backbone.{name}.{k}": v for k, v in mapped.items()})
        carried.update({prefix + k: v for k, v in unused.items()})
    model_keys = set(policy.state_dict())
    unknown = []
    for key, t in rest.items():
        if key in model_keys:
            ours[key] = t
        elif key.startswith("value_head."):  # a trained value head the run does not use: keep it
            carried[key] = t
        else:
            unknown.append(key)
    bad_carry = [k for k in carried if not _is_unused_tower_tensor(k, policy)]
    if unknown or bad_carry:
        names = sorted(unknown + bad_carry)
        raise CheckpointError(f"{where}: {len(names)} tensor(s) fit no part of the model, e.g. "
                              f"{', '.join(names[:4])}")
    return ours, carried


def _is_unused_tower_tensor(key: str, policy: OpenVLAPolicy) -> bool:
    if key.startswith("value_head."):
        return True
    for (_, _, spec), prefix in zip(policy.vision_backbone.towers(), TOWER_PREFIXES):
        if key.startswith(prefix):
            rel = key[len(prefix):]
            return rel.startswith((f"blocks.{spec.depth - 1}.", "norm.", "attn_pool.", "head.", "fc_norm."))
    return False


def _created_here(key: str, policy: OpenVLAPolicy) -> bool:
    if key.startswith(("value_head.", PROPRIO_PREFIX)):
        return True
    for name, _, spec in policy.vision_backbone.towers():
        if any(key == f"vision_backbone.{name}.{k}" for k in model_only_keys(spec)):
            return True
    return key == "language_model.lm_head.weight" and getattr(
        policy.language_model.config, "tie_word_embeddings", False)


def _check_coverage(policy: OpenVLAPolicy, ours: Mapping[str, torch.Tensor], where: str) -> None:
    expected = policy.state_dict()
    missing = sorted(k for k in expected if k not in ours and not _created_here(k, policy))
    if missing:
        raise CheckpointError(f"{where}: {len(missing)} tensor(s) missing, e.g. {', '.join(missing[:4])}")
    wrong = sorted(k for k, t in ours.items() if tuple(t.shape) != tuple(expected[k].shape))
    if wrong:
        k = wrong[0]
        raise CheckpointError(f"{where}: {len(wrong)} tensor(s) of the wrong shape, e.g. {k} "
                              f"{tuple(ours[k].shape)} (expected {tuple(expected[k].shape)})")


def _materialize(policy: OpenVLAPolicy, dtype: torch.dtype) -> None:
    """Real storage and initial values for the parameters the checkpoint did not provide."""
    for module_name in ("value_head", "proprio_projector"):
        module = getattr(policy, module_name)
        if module is not None and any(p.is_meta for p in module.parameters()):
            module.to_empty(device="cpu")
            for m in module.modules():
                if hasattr(m, "reset_parameters") and m is not module:
                    m.reset_parameters()
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
    for name, p in list(policy.named_parameters()):
        if p.is_meta:  # e.g. DINOv2's mask_token (never used without masked inputs)
            owner, attr = policy.get_submodule(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1]
            setattr(owner, attr, nn.Parameter(torch.zeros(p.shape, dtype=dtype), requires_grad=p.requires_grad))


def model_to_checkpoint(policy: OpenVLAPolicy, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our (merged) state dict -> checkpoint names, with the carried tensors; the proprio
    projector is left out (it lives in its own file)."""
    out = dict(policy.carried)
    rest = {k: v for k, v in state.items() if not k.startswith(PROPRIO_PREFIX)}
    for (name, _, spec), prefix in zip(policy.vision_backbone.towers(), TOWER_PREFIXES):
        ours_prefix = f"vision_backbone.{name}."
        sub = {k[len(ours_prefix):]: rest.pop(k) for k in list(rest) if k.startswith(ours_prefix)}
        carried = {k[len(prefix):]: v for k, v in policy.carried.items() if k.startswith(prefix)}
        for k in model_only_keys(spec):
            sub.pop(k, None)
        out.update({prefix + k: v for k, v in join_tower_state(sub, carried, spec).items()})
    tied = getattr(policy.language_model.config, "tie_word_embeddings", False)
    out.update({k: v for k, v in rest.items() if not (tied and k == "language_model.lm_head.weight")})
    return out


def save_openvla(policy: OpenVLAPolicy, out_dir: str | os.PathLike, state: Mapping[str, torch.Tensor] | None = None,
                 dtype: torch.dtype | None = None) -> Path:
    """Writes ``policy`` as a real-format folder (atomically: a temporary sibling, then renamed).

    Weights in ``dtype`` (default: the source folder's, bf16 for released checkpoints) under the
    checkpoint's names (LoRA merged in, value head included as ``value_head.mlp.*``); the proprio
    projector as ``proprio_projector--{step}_checkpoint.pt``; the source folder's other files
    (tokenizer, statistics, preprocessor, OFT action head) copied; with LoRA, the adapter in the
    original layout under ``lora_adapter/`` as well (relative to the source weights).

    Args:
        policy: the policy.
        out_dir: destination (replaced if it exists).
        state: our state dict to write instead of ``policy``'s own (e.g. gathered from FSDP).
        dtype: weight dtype on disk.

    Returns:
        The folder.
    """
    out = Path(out_dir)
    with atomic_folder(out) as tmp:
        merged = merged_state_dict(policy, state)
        dtype = dtype or getattr(policy, "source_dtype", None) or policy.dtype
        write_weights(model_to_checkpoint(policy, merged), tmp, dtype=dtype)
        cfg = dict(policy.config)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        source = getattr(policy, "source_path", None)
        proprio_name = "proprio_projector--0_checkpoint.pt"
        if source is not None:
            copy_other_files(Path(source), tmp)
            for name in os.listdir(source):
                if name.startswith("proprio_projector--"):
                    proprio_name = name
        else:
            policy.tokenizer.save_pretrained(str(tmp))
            if policy.norm_stats is not None:
                (tmp / STATS_FILE).write_text(json.dumps(policy.norm_stats, indent=2) + "\n")
        if policy.proprio_projector is not None:
            proprio = {k[len(PROPRIO_PREFIX):]: v.detach().to(dtype).cpu() for k, v in merged.items()
                       if k.startswith(PROPRIO_PREFIX)}
            torch.save(proprio, tmp / proprio_name)
        if getattr(policy, "lora", None) is not None:
            save_lora_adapter(policy, tmp / "lora_adapter", state)
    return out
