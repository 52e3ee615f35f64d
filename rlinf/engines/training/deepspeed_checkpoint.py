"""Checkpoints of :class:`rlinf.engines.training.deepspeed_engine.DeepSpeedEngine`: DeepSpeed's
own format plus a completion record, so that a partial checkpoint never loads.

Layout of a checkpoint folder ``path`` (reachable by every rank):

- ``path/deepspeed/``: what ``engine.save_checkpoint(path, tag="deepspeed")`` writes (module
  weights, and per rank its ZeRO partition of the fp32 master weights and Adam moments).
- ``path/engine_state.json``: written by rank 0 last, atomically (temporary file + rename), after
  every rank finished: ``{"format", "step", "world_size", "zero_stage", "files": {name: bytes}}``.

A save first removes an old record, so a folder whose save was interrupted has none and is
refused. A load checks the record: world size and ZeRO stage must match (ZeRO partitions are per
rank), and every listed file must exist with its recorded size.

Example:
    >>> import tempfile
    >>> read_record(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: ...: not a complete DeepSpeedEngine checkpoint (no engine_state.json: the save never finished)
"""

from __future__ import annotations

import json
import os

import torch.distributed as dist

from rlinf.engines.training.collective_save import on_rank0

RECORD_FILE = "engine_state.json"
TAG = "deepspeed"
FORMAT = "rlinf-deepspeed-1"


def _files(folder: str) -> dict[str, int]:
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            full = os.path.join(root, name)
            out[os.path.relpath(full, folder)] = os.path.getsize(full)
    return dict(sorted(out.items()))


def save_ds_checkpoint(engine, path: str, *, step: int, stage: int) -> None:
    """Collective: DeepSpeed's checkpoint under ``path/deepspeed``, then rank 0 writes the record."""
    record = os.path.join(path, RECORD_FILE)

    def clear():
        os.makedirs(path, exist_ok=True)
        if os.path.exists(record):
            os.remove(record)

    def write_record():
        state = {"format": FORMAT, "step": step, "world_size": dist.get_world_size(), "zero_stage": stage,
                 "files": _files(os.path.join(path, TAG))}
        tmp = record + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, record)

    on_rank0(clear)  # a failure on rank 0 (a full disk) ends the save on every rank
    engine.save_checkpoint(path, tag=TAG, client_state={"rlinf_step": step}, save_latest=False)
    dist.barrier()
    on_rank0(write_record)


def read_record(path: str) -> dict:
    """The completion record of checkpoint ``path``; one-line errors for a missing or foreign one."""
    record = os.path.join(path, RECORD_FILE)
    if not os.path.isfile(record):
        raise FileNotFoundError(f"{path}: not a complete DeepSpeedEngine checkpoint (no {RECORD_FILE}: "
                                "the save never finished)")
    try:
        with open(record) as f:
            state = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{record}: unreadable checkpoint record ({exc})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{record}: not a DeepSpeedEngine checkpoint record (format {FORMAT} expected)")
    return state


def check_record(path: str, state: dict, *, world_size: int, stage: int) -> None:
    """Refuse a checkpoint this engine cannot load exactly (other world size or stage, a file
    missing or of another size)."""
    if state["world_size"] != world_size:
        raise ValueError(f"{path}: saved by {state['world_size']} ranks, loading on {world_size}: DeepSpeed "
                         "ZeRO checkpoints hold one optimizer partition per rank")
    if state["zero_stage"] != stage:
        raise ValueError(f"{path}: saved with ZeRO stage {state['zero_stage']}, this engine runs stage {stage}")
    folder = os.path.join(path, TAG)
    for name, size in state["files"].items():
        full = os.path.join(folder, name)
        if not os.path.isfile(full):
            raise FileNotFoundError(f"{path}: incomplete checkpoint: {TAG}/{name} is missing")
        if os.path.getsize(full) != size:
            raise ValueError(f"{path}: incomplete checkpoint: {TAG}/{name} has {os.path.getsize(full)} bytes, "
                             f"{size} were saved")


def load_ds_checkpoint(engine, path: str, *, stage: int) -> int:
    """Collective: check the record, load DeepSpeed's checkpoint into ``engine``; returns the
    saved optimizer-step counter."""
    state = read_record(path)
    check_record(path, state, world_size=dist.get_world_size(), stage=stage)
    loaded, _ = engine.load_checkpoint(path, tag=TAG, load_module_strict=True, load_optimizer_states=True,
                                       load_lr_scheduler_states=False)
    if loaded is None:
        raise RuntimeError(f"{path}: DeepSpeed found no checkpoint under tag {TAG!r}")
    return int(state["step"])
