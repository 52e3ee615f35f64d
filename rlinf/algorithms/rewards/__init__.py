"""Rule-based rewards for LLM reasoning, selected by ``reward.reward_type``.

Public API:
    get_reward_fn(name)      reward function registered as ``name`` (``"math"``)
    register_reward(*names)  decorator adding a reward function to the registry
    REWARDS                  the registry
    math_reward              ``fn(responses, golds, reward_scale) -> [batch] float32`` of ±scale
    MathVerifier             math-verify in a process pool with per-answer time budgets
    extract_boxed_answer     content of the last closed ``\\boxed{}`` / ``\\fbox{}``

>>> get_reward_fn("math").__name__
'math_reward'
"""

from __future__ import annotations

from typing import Callable, TypeVar

from rlinf.algorithms.registry import Registry
from rlinf.algorithms.rewards.math_answer import extract_boxed_answer
from rlinf.algorithms.rewards.math_verify_reward import MathVerifier, math_reward

F = TypeVar("F", bound=Callable)

REWARDS = Registry("reward type (reward_type)")


def register_reward(*names: str) -> Callable[[F], F]:
    """Register a reward ``fn(responses, golds, reward_scale) -> [batch] tensor``."""
    return REWARDS.register(*names)


def get_reward_fn(name: str) -> Callable:
    """Reward function registered as ``name``.

    Raises:
        ValueError: If ``name`` is unknown; the message lists the registered names.

    >>> get_reward_fn("math") is math_reward
    True
    """
    return REWARDS.get(name)


register_reward("math")(math_reward)

__all__ = ["REWARDS", "MathVerifier", "extract_boxed_answer", "get_reward_fn", "math_reward",
           "register_reward"]
