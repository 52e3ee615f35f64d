"""Typed objects that cross component boundaries (rollout batches) and the prompt datasets."""

from rlinf.data.rollout_batch import RolloutBatch

__all__ = ["RolloutBatch"]
