"""Checkpoints and HF export of :class:`rlinf.engines.training.fsdp.FSDPEngine`.

A checkpoint folder holds the sharded model + optimizer state written by
``torch.distributed.checkpoint`` (DCP; each rank writes its shards, loading reshards to any world
size) and ``engine_state.json`` with the optimizer-step counter (the LR-schedule position). The
folder must be reachable by every rank (shared file system).
"""

from __future__ import annotations

import json
import os
import shutil

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from rlinf.engines.training.collective_save import on_rank0, plain_dcp_error
from rlinf.models.vlm.load import PROCESSOR_CLASSES
from rlinf.utils.hf_save import save_hf_model

ENGINE_STATE_FILE = "engine_state.json"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".index.json")


def save_sharded(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str, step: int) -> None:
    """Collective: DCP-save model + optimizer to ``path``; rank 0 writes ``engine_state.json``. A
    failure on any rank (a full disk: an :class:`OSError` with its errno) raises on every rank."""
    had_state = bool(optimizer.state)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    try:
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
    except CheckpointException as exc:  # a BaseException: an ordinary one, errno kept (a full disk)
        raise plain_dcp_error(exc) from None
    finally:
        if not had_state:  # get_state_dict created zero Adam state; keep the live optimizer fresh
            optimizer.state.clear()

    def write_state():
        with open(os.path.join(path, ENGINE_STATE_FILE), "w") as f:
            json.dump({"step": step, "world_size": dist.get_world_size()}, f)

    on_rank0(write_state)  # a failure on rank 0 (a full disk) ends the save on every rank


def load_sharded(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str) -> int:
    """Collective: restore what :func:`save_sharded` wrote into ``model`` / ``optimizer`` in place;
    returns the saved step counter."""
    state_file = os.path.join(path, ENGINE_STATE_FILE)
    if not os.path.isfile(state_file):
        raise FileNotFoundError(f"{path} is not an FSDPEngine checkpoint (no {ENGINE_STATE_FILE})")
    with open(state_file) as f:
        step = int(json.load(f)["step"])
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if step == 0:  # saved before the first step: the optimizer had no state yet
        optimizer.state.clear()
    return step


def write_hf_folder(state: dict[str, torch.Tensor], hf_config, model_path: str, path: str) -> None:
    """Write an HF model folder: ``config.json`` and safetensors weights from ``state`` (their
    dtype), then the other non-weight files of ``model_path`` verbatim (tokenizer, generation
    config, chat template, a vision-language model's processor files, ...)."""
    # lazy: transformers (~2 s) only when an HF folder is written
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    os.makedirs(path, exist_ok=True)
    dtype = next(iter(state.values())).dtype if state else torch.float32
    vlm = getattr(hf_config, "model_type", None) in PROCESSOR_CLASSES
    with torch.device("meta"):  # a shell for the config and save logic; weights come from `state`
        shell = (AutoModelForImageTextToText if vlm else AutoModelForCausalLM).from_config(hf_config, dtype=dtype)
    save_hf_model(shell, path, state_dict=state)  # (without importing DeepSpeed: rlinf.utils.hf_save)
    for name in os.listdir(model_path):
        src = os.path.join(model_path, name)
        if os.path.isfile(src) and name != "config.json" and not name.endswith(_WEIGHT_SUFFIXES):
            shutil.copy2(src, os.path.join(path, name))
