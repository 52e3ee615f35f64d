"""Thin adapters over the libraries that generate and train: one interface per role
(:class:`RolloutEngine`, :class:`TrainingEngine`), one adapter per library."""

from rlinf.engines.rollout.base import Generation, RolloutEngine
from rlinf.engines.training.base import LossFn, TrainingEngine

__all__ = ["Generation", "LossFn", "RolloutEngine", "TrainingEngine"]
