"""Rollout engines: HF generate (``huggingface``), vLLM (``vllm``), SGLang (``sglang``, GPU only).

Build one with :func:`~rlinf.engines.rollout.factory.make_rollout_engine`; every engine reports
per-token log-probs with the definition in :mod:`rlinf.engines.rollout._common`.
"""

from rlinf.engines.rollout.base import Generation, RolloutEngine
from rlinf.engines.rollout.factory import BACKENDS, make_rollout_engine

__all__ = ["BACKENDS", "Generation", "RolloutEngine", "make_rollout_engine"]
