"""Typed objects that cross component boundaries (rollout batches) and the datasets: the math
prompt datasets and the web task files (:mod:`rlinf.data.web_tasks`)."""

from rlinf.data.rollout_batch import RolloutBatch

__all__ = ["RolloutBatch"]
