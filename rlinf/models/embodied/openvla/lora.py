"""LoRA on an OpenVLA policy, in the adapter layout RLinf publishes.

RLinf trains adapters with PEFT on the ORIGINAL model (``target_modules``: ``proj``, ``qkv``,
``fc1``, ``fc2``, ``q``, ``kv``, ``fc3``, ``out_proj``, ``q_proj`` ... ``lm_head``; alpha = rank,
Gaussian init) and saves ``adapter_config.json`` + ``adapter_model.safetensors`` with keys
``base_model.model.<original module>.lora_{A,B}.weight``. Our towers are transformers modules,
so adapters are mapped module by module (:func:`~.vision.tower_module_links`):

* ``attn.qkv`` (one Linear) -> ``q_proj`` / ``k_proj`` / ``v_proj``: ``dW = s B A`` with
  ``B = [B_q; B_k; B_v]`` splits exactly into three rank-r LoRAs sharing ``A``. Back: when the
  three ``A`` are still equal, one rank-r LoRA; otherwise a rank-3r one
  (``A = [A_q; A_k; A_v]``, ``B = blockdiag(B_q, B_k, B_v)``, alpha x 3, or x sqrt(3) with
  rsLoRA, keeping the scale), recorded in ``rank_pattern`` / ``alpha_pattern``. Exact both ways.
* ``patch_embed.proj`` (Conv2d) -> the tower's patch convolution; other modules keep their names.
* Adapter tensors on modules the forward never uses (last vision block, ``attn_pool``) are
  carried and written back unchanged.

Dropout is 0 (RL needs ``act`` and ``evaluate`` to agree). Only LoRA weights and the value head
train. Example: see ``tests/models/test_openvla_lora.py``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from rlinf.models.embodied.openvla.vision import tower_module_links

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
ADAPTER = "default"
#: RLinf's target list (matched against the original module names).
RLINF_TARGETS = ("proj", "qkv", "fc1", "fc2", "q", "kv", "fc3", "out_proj", "q_proj", "k_proj", "v_proj",
                 "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
_TOWERS = (("featurizer", "vision_backbone.featurizer."), ("fused_featurizer", "vision_backbone.fused_featurizer."))


@dataclass
class LoraState:
    """What a policy remembers about its adapter.

    Attributes:
        config: the original ``adapter_config.json`` (or the one a fresh adapter would write).
        links: original module -> our module(s) (three = a split qkv).
        carried: adapter tensors of unused modules (original PEFT keys).
    """

    config: dict[str, Any]
    links: dict[str, tuple[str, ...]]
    carried: dict[str, torch.Tensor] = field(default_factory=dict)


def module_links(policy) -> dict[str, tuple[str, ...]]:
    """Original module name -> our module name(s) for every Linear / Conv2d the forward uses."""
    links: dict[str, tuple[str, ...]] = {}
    towers = {name: spec for name, _, spec in policy.vision_backbone.towers()}
    tower_ours = set()
    for name, prefix in _TOWERS:
        if name in towers:
            for src, dsts in tower_module_links(towers[name]):
                links[prefix + src] = tuple(f"vision_backbone.{name}.{d}" for d in dsts)
                tower_ours.update(links[prefix + src])
    for name, module in policy.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)) and not name.startswith(
                ("vision_backbone.", "value_head", "proprio_projector")) and name not in tower_ours:
            links[name] = (name,)
    return {k: v for k, v in links.items() if isinstance(policy.get_submodule(v[0]), (nn.Linear, nn.Conv2d))}


def _matches(name: str, targets) -> bool:
    if isinstance(targets, str):
        return targets == "all-linear" or name == targets or name.endswith("." + targets)
    return any(name == t or name.endswith("." + t) for t in targets)


def _read_adapter(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    cfg_file = path / ADAPTER_CONFIG
    if not cfg_file.is_file():
        raise FileNotFoundError(f"lora_path {str(path)!r} has no {ADAPTER_CONFIG}")
    config = json.loads(cfg_file.read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{cfg_file}: peft_type {config.get('peft_type')!r} is not LORA")
    if config.get("use_dora"):
        raise ValueError(f"{cfg_file}: DoRA adapters are not supported")
    if (path / ADAPTER_WEIGHTS).is_file():
        weights = load_file(str(path / ADAPTER_WEIGHTS))
    elif (path / "adapter_model.bin").is_file():
        weights = torch.load(path / "adapter_model.bin", map_location="cpu", weights_only=True)
    else:
        raise FileNotFoundError(f"lora_path {str(path)!r} has no {ADAPTER_WEIGHTS}")
    return config, weights


def _scale_of(config: Mapping[str, Any], module: str, rank: int) -> float:
    alpha = config.get("lora_alpha", config.get("r", rank))
    for pattern, a in (config.get("alpha_pattern") or {}).items():
        if module == pattern or module.endswith("." + pattern):
            alpha = a
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def enable_lora(policy, rank: int = 32, lora_path: str | os.PathLike | None = None) -> None:
    """Attaches LoRA (fresh, or the adapter at ``lora_path``) in place and freezes the rest.

    Args:
        policy: an :class:`~.modeling.OpenVLAPolicy`.
        rank: rank of a fresh adapter (``lora_alpha = rank``, RLinf's targets, Gaussian A, B = 0).
        lora_path: an adapter folder in RLinf's layout (its own ranks / alphas / targets).

    Raises:
        FileNotFoundError / ValueError: a bad adapter folder (the message names it).
    """
    # lazy: peft (embodied extra, ~3 s with transformers) only when LoRA is on
    from peft import LoraConfig, inject_adapter_in_model

    if getattr(policy, "lora", None) is not None:
        raise RuntimeError("LoRA is already enabled")
    links = module_links(policy)
    carried: dict[str, torch.Tensor] = {}
    per_module: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}  # ours -> (A, B, scale)
    if lora_path is not None:
        config, weights = _read_adapter(Path(lora_path))
        pairs: dict[str, dict[str, torch.Tensor]] = {}
        for key, t in weights.items():
            body = key[len(PEFT_PREFIX):] if key.startswith(PEFT_PREFIX) else key
            module, _, part = body.rpartition(".lora_")
            if module in links:
                pairs.setdefault(module, {})[part.split(".")[0]] = t
            else:
                carried[key] = t
        for module, ab in pairs.items():
            if set(ab) != {"A", "B"}:
                raise ValueError(f"{lora_path}: {module} has lora_{sorted(ab)} only")
            a, b = ab["A"], ab["B"]
            scale = _scale_of(config, module, a.shape[0])
            dsts = links[module]
            for dst, bpart in zip(dsts, b.chunk(len(dsts), dim=0) if len(dsts) > 1 else (b,)):
                per_module[dst] = (a, bpart, scale)
    else:
        config = {"peft_type": "LORA", "task_type": None, "r": int(rank), "lora_alpha": int(rank),
                  "lora_dropout": 0.0, "target_modules": list(RLINF_TARGETS), "bias": "none",
                  "fan_in_fan_out": False, "init_lora_weights": "gaussian", "modules_to_save": None,
                  "rank_pattern": {}, "alpha_pattern": {}, "use_rslora": False, "use_dora": False}
        for src, dsts in links.items():
            if _matches(src, RLINF_TARGETS) and not src.endswith("lm_head") or src == "language_model.lm_head":
                weight = policy.get_submodule(dsts[0]).weight
                shape = (rank, *weight.shape[1:]) if weight.dim() == 2 else (rank, weight.shape[1], *weight.shape[2:])
                a = torch.randn(shape, dtype=torch.float32) / rank  # PEFT's "gaussian": N(0, 1/r)
                for dst in dsts:
                    w = policy.get_submodule(dst).weight
                    b_shape = (w.shape[0], rank) if w.dim() == 2 else (w.shape[0], rank, 1, 1)
                    per_module[dst] = (a, torch.zeros(b_shape), 1.0)
    if not per_module:
        raise ValueError("the adapter targets no module of this model")
    ranks = {dst: int(a.shape[0]) for dst, (a, _, _) in per_module.items()}
    base_rank = max(set(ranks.values()), key=list(ranks.values()).count)
    peft_cfg = LoraConfig(r=base_rank, lora_alpha=base_rank, lora_dropout=0.0, target_modules=sorted(per_module),
                          rank_pattern={k: v for k, v in ranks.items() if v != base_rank}, bias="none",
                          init_lora_weights=True)
    inject_adapter_in_model(peft_cfg, policy, adapter_name=ADAPTER)
    with torch.no_grad():
        for dst, (a, b, scale) in per_module.items():
            layer = policy.get_submodule(dst)
            dtype = layer.lora_A[ADAPTER].weight.dtype
            layer.lora_A[ADAPTER].weight.copy_(a.to(dtype))
            layer.lora_B[ADAPTER].weight.copy_(b.to(dtype))
            layer.scaling[ADAPTER] = float(scale)
    for name, p in policy.named_parameters():
        p.requires_grad_(".lora_" in name or name.startswith("value_head."))
    policy.lora = LoraState(config=config, links=links, carried=carried)


def _lora_layers(policy) -> dict[str, nn.Module]:
    # lazy: peft (embodied extra, ~3 s with transformers) only when LoRA is on
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in policy.named_modules() if isinstance(m, LoraLayer)}


def merged_state_dict(policy, state: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Our plain state dict (no ``base_layer`` / ``lora_`` keys) with the LoRA deltas merged
    into the base weights; ``state`` (same keys as ``policy.state_dict()``) is read instead of
    the live weights when given."""
    state = dict(policy.state_dict() if state is None else state)
    if getattr(policy, "lora", None) is None:
        return state
    out: dict[str, torch.Tensor] = {}
    for name, layer in _lora_layers(policy).items():
        a = state.pop(f"{name}.lora_A.{ADAPTER}.weight").float()
        b = state.pop(f"{name}.lora_B.{ADAPTER}.weight").float()
        w = state.pop(f"{name}.base_layer.weight")
        delta = (b @ a) if a.dim() == 2 else torch.einsum("or,rikl->oikl", b[:, :, 0, 0], a)
        out[f"{name}.weight"] = (w.float() + layer.scaling[ADAPTER] * delta).to(w.dtype)
        if f"{name}.base_layer.bias" in state:
            out[f"{name}.bias"] = state.pop(f"{name}.base_layer.bias")
    out.update({k: v for k, v in state.items() if ".lora_" not in k})
    return out


def save_lora_adapter(policy, out_dir: str | os.PathLike, state: Mapping[str, torch.Tensor] | None = None) -> Path:
    """Writes the adapter in RLinf's layout (original module names; see the module docstring)."""
    lora: LoraState = policy.lora
    state = dict(policy.state_dict() if state is None else state)
    config = dict(lora.config)
    rank_pattern, alpha_pattern = dict(config.get("rank_pattern") or {}), dict(config.get("alpha_pattern") or {})
    tensors = dict(lora.carried)
    layers = _lora_layers(policy)
    base_r = int(config.get("r", 8))
    for src, dsts in lora.links.items():
        if dsts[0] not in layers:
            continue
        a = [state[f"{d}.lora_A.{ADAPTER}.weight"] for d in dsts]
        b = [state[f"{d}.lora_B.{ADAPTER}.weight"] for d in dsts]
        scale = layers[dsts[0]].scaling[ADAPTER]
        if len(dsts) == 1 or all(torch.equal(a[0], x) for x in a[1:]):
            a_out, b_out = a[0], torch.cat(b, 0)
        else:
            a_out, b_out = torch.cat(a, 0), torch.block_diag(*b)
        r = int(a_out.shape[0])
        if r != base_r:
            rank_pattern[src] = r
        alpha = scale * (math.sqrt(r) if config.get("use_rslora") else r)
        if abs(alpha - config.get("lora_alpha", base_r)) > 1e-9 * max(1.0, alpha) or src in alpha_pattern:
            alpha_pattern[src] = alpha
        tensors[f"{PEFT_PREFIX}{src}.lora_A.weight"] = a_out.detach().cpu().contiguous()
        tensors[f"{PEFT_PREFIX}{src}.lora_B.weight"] = b_out.detach().cpu().contiguous()
    config["rank_pattern"], config["alpha_pattern"] = rank_pattern, alpha_pattern
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / ADAPTER_WEIGHTS))
    (out / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out
