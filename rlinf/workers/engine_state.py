"""Checkpoint a training engine together with this process's torch RNG state (shared by the
actor and critic workers)."""

from __future__ import annotations

import os

import torch


def save_engine(engine, path: str, rank: int) -> None:
    """``engine.save_checkpoint(path)`` plus ``rng_rank<rank>.pt`` (collective)."""
    engine.save_checkpoint(path)
    torch.save(torch.get_rng_state(), os.path.join(path, f"rng_rank{rank}.pt"))


def load_engine(engine, path: str, rank: int) -> None:
    """Restore :func:`save_engine` (the RNG state too when this rank saved one)."""
    engine.load_checkpoint(path)
    rng = os.path.join(path, f"rng_rank{rank}.pt")
    if os.path.isfile(rng):
        torch.set_rng_state(torch.load(rng, weights_only=True))
