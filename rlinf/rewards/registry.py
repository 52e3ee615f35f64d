"""Rule-based rewards selected by ``reward.reward_type``: ``fn(responses, golds, reward_scale) ->
[batch] tensor``.

>>> get_reward_fn("math").__name__
'math_reward'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from rlinf.algorithms.registry import Registry
from rlinf.rewards.math_verify import math_reward

__all__ = ["REWARDS", "get_reward_fn", "register_reward"]

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
