"""Thin adapters over the libraries that generate and train: one interface per role
(:class:`RolloutEngine`, :class:`TrainingEngine`), one adapter per library.

The interfaces are imported on first use, so that importing a light subpackage (the web sites,
the browser server) does not import torch."""

from __future__ import annotations

import importlib

_LAZY = {"Generation": "rlinf.engines.rollout.base", "RolloutEngine": "rlinf.engines.rollout.base",
         "LossFn": "rlinf.engines.training.base", "TrainingEngine": "rlinf.engines.training.base"}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlinf.engines' has no attribute {name!r}")
