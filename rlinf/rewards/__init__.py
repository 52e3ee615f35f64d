"""Every reward and judge, behind one interface (:mod:`rlinf.rewards.base`): a :class:`Scorer`
turns :class:`Sample` s into :class:`Score` s.

Scorers (each keeps its own entry point too):
    MathVerifier   (:mod:`.math_verify`)    math-verify of the last ``\\boxed{}`` answer in a
                                            bounded process pool; ``math_reward`` (±scale)
    HFRewardModel  (:mod:`.reward_model`)   an HF sequence-classification reward model's logit
    ChatJudge      (:mod:`.llm_judge`)      an LLM judge of text responses (``reward.judge``)
    RuleEvaluator  (:mod:`.rule_judge`)     web trajectories: final answer vs the task's reference
    LLMJudge       (:mod:`.web_judges`)     web trajectories: LLM judges (blocking, key points,
                                            evaluation); ``make_judge("rule" | "llm")``
Parts: ChatClient / Endpoint (:mod:`.openai_client`, a bounded retrying OpenAI-compatible client),
extract_boxed_answer (:mod:`.math_answer`), the ``reward_type`` registry REWARDS / get_reward_fn /
register_reward (:mod:`.registry`), JudgeError, JudgeResult.

Reward *shaping* (clipping, normalisation, overlong penalty) is tensor math on rewards already
computed, and stays in :mod:`rlinf.algorithms`.

Names are imported on first use, so that the web judges load neither torch nor math-verify.

>>> from rlinf.rewards import get_reward_fn
>>> get_reward_fn("math").__name__
'math_reward'
"""

from __future__ import annotations

import importlib

from rlinf.rewards.base import JudgeError, Sample, Score, Scorer

_LAZY = {
    "MathVerifier": "rlinf.rewards.math_verify", "math_reward": "rlinf.rewards.math_verify",
    "extract_boxed_answer": "rlinf.rewards.math_answer",
    "REWARDS": "rlinf.rewards.registry", "get_reward_fn": "rlinf.rewards.registry",
    "register_reward": "rlinf.rewards.registry",
    "HFRewardModel": "rlinf.rewards.reward_model",
    "ChatClient": "rlinf.rewards.openai_client", "Endpoint": "rlinf.rewards.openai_client",
    "ChatJudge": "rlinf.rewards.llm_judge",
    "JudgeResult": "rlinf.rewards.rule_judge", "RuleEvaluator": "rlinf.rewards.rule_judge",
    "LLMJudge": "rlinf.rewards.web_judges", "make_judge": "rlinf.rewards.web_judges",
}
__all__ = ["JudgeError", "Sample", "Score", "Scorer", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlinf.rewards' has no attribute {name!r}")
