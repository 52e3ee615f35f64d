"""LoRA on an HF causal LM for the LLM actor (``actor.model.is_lora``), with PEFT's layers.

:func:`inject_lora` puts a LoRA pair on every Linear whose name ends in one of
``target_modules`` (default: the attention and MLP projections of Llama / Qwen-style blocks):
y = W x + (alpha / r) B A x, A Gaussian (PEFT's default Kaiming-uniform), B = 0, dropout 0, so the
model starts exactly at the base weights; every other parameter is frozen, so the optimizer holds
the adapter only. ``lora_path`` starts from a PEFT adapter folder (``adapter_config.json`` +
``adapter_model.safetensors``, keys ``base_model.model.<module>.lora_{A,B}.weight``) instead.

The engine's state dict then has ``<module>.base_layer.weight`` and
``<module>.lora_{A,B}.default.weight``; :func:`merge_lora_state` folds them back into plain HF
names (W + (alpha / r) B A), which is what weight sync sends to the rollout engines (HF or vLLM)
and what the HF export writes. :func:`adapter_state` / :func:`write_adapter` give the adapter
alone in PEFT's layout (checkpoints keep it next to the sharded state).

Example:
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Sequential(); model.add_module("q_proj", nn.Linear(4, 4))
    >>> cfg = inject_lora(model, rank=2, alpha=4, target_modules=("q_proj",))
    >>> sorted(n for n, p in model.named_parameters() if p.requires_grad)
    ['q_proj.lora_A.default.weight', 'q_proj.lora_B.default.weight']
    >>> sorted(merge_lora_state(model.state_dict(), cfg))
    ['q_proj.bias', 'q_proj.weight']
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

ADAPTER = "default"
PEFT_PREFIX = "base_model.model."
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def inject_lora(model: torch.nn.Module, rank: int, alpha: float | None = None,
                target_modules: Sequence[str] = DEFAULT_TARGETS, lora_path: str | None = None) -> dict[str, Any]:
    """Attach LoRA in place and freeze the rest; returns the adapter config (PEFT's keys).

    Raises:
        ValueError: no module matches ``target_modules``, or a bad ``lora_path`` (named).
    """
    # lazy: optional (peft, embodied extra; ~3 s with transformers) only when LoRA is on
    from peft import LoraConfig, inject_adapter_in_model

    saved: dict[str, torch.Tensor] = {}
    if lora_path is not None:
        cfg_file = Path(lora_path) / "adapter_config.json"
        if not cfg_file.is_file():
            raise ValueError(f"actor.model.lora_path: {lora_path!r} has no adapter_config.json")
        with open(cfg_file, encoding="utf-8") as f:
            disk = json.load(f)
        rank, alpha = int(disk["r"]), float(disk.get("lora_alpha", disk["r"]))
        target_modules = tuple(disk.get("target_modules") or target_modules)
        saved = load_file(str(Path(lora_path) / "adapter_model.safetensors"))
    alpha = float(rank if alpha is None else alpha)
    targets = [n for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and n.split(".")[-1] in target_modules]
    if not targets:
        raise ValueError(f"actor.model.lora_target_modules: no Linear of {type(model).__name__} is named "
                         f"{', '.join(target_modules)}")
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": int(rank), "lora_alpha": alpha,
              "lora_dropout": 0.0, "target_modules": sorted(set(target_modules)), "bias": "none",
              "use_rslora": False, "use_dora": False}
    inject_adapter_in_model(LoraConfig(r=int(rank), lora_alpha=alpha, lora_dropout=0.0, bias="none",
                                       target_modules=sorted(set(target_modules))), model, adapter_name=ADAPTER)
    if saved:
        own = {}
        for key, t in saved.items():
            body = key[len(PEFT_PREFIX):] if key.startswith(PEFT_PREFIX) else key
            module, _, part = body.rpartition(".lora_")
            own[f"{module}.lora_{part.split('.')[0]}.{ADAPTER}.weight"] = t
        params = dict(model.named_parameters())
        missing = [k for k in params if ".lora_" in k and k not in own]
        if missing:
            raise ValueError(f"actor.model.lora_path: the adapter has no {missing[0]!r}")
        with torch.no_grad():
            for key, t in own.items():
                if key not in params:
                    raise ValueError(f"actor.model.lora_path: adapter tensor {key!r} fits no module of the model")
                params[key].copy_(t.to(params[key].dtype))
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_" in name)
    return config


def merge_lora_state(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Plain HF names with ``W + (alpha / r) B A`` (in W's dtype) for every LoRA module."""
    scale = float(config["lora_alpha"]) / int(config["r"])
    out: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        if ".lora_" in key:
            continue
        if key.endswith(".base_layer.weight"):
            module = key[: -len(".base_layer.weight")]
            a = state[f"{module}.lora_A.{ADAPTER}.weight"].float()
            b = state[f"{module}.lora_B.{ADAPTER}.weight"].float()
            out[f"{module}.weight"] = (t.float() + scale * (b @ a)).to(t.dtype)
        elif ".base_layer." in key:
            out[key.replace(".base_layer.", ".")] = t
        else:
            out[key] = t
    return out


def adapter_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter tensors under PEFT's saved names."""
    return {PEFT_PREFIX + k.replace(f".{ADAPTER}.weight", ".weight"): v.detach().cpu().contiguous()
            for k, v in state.items() if ".lora_" in k}


def write_adapter(state: Mapping[str, torch.Tensor], config: Mapping[str, Any], out_dir: str) -> None:
    """``adapter_config.json`` + ``adapter_model.safetensors`` (PEFT's layout) in ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    save_file(adapter_state(state), os.path.join(out_dir, "adapter_model.safetensors"))
    with open(os.path.join(out_dir, "adapter_config.json"), "w", encoding="utf-8") as f:
        json.dump(dict(config), f, indent=2)
