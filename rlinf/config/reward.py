"""``reward:``, ``critic:`` and ``inference:`` sections."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlinf.config.rollout import ModelRef
from rlinf.utils.typed_config import check


@dataclass(frozen=True)
class RewardConfig:
    """``reward``.

    Attributes:
        group_name: worker group name.
        use_reward_model: score with a learned reward model (not supported yet: must be false).
        reward_type: which rule-based reward (math).
        reward_scale: correct answers get +reward_scale, incorrect ones -reward_scale.
        verify_timeout_s: per-answer time budget of the math verifier (our key).
        verify_processes: verifier processes per reward worker (our key).
    """

    group_name: str = "RewardGroup"
    use_reward_model: bool = False
    reward_type: Literal["math"] = "math"
    reward_scale: float = 1.0
    verify_timeout_s: float = 2.0
    verify_processes: int = 1

    def validate(self, path: str) -> None:
        check(not self.use_reward_model, f"{path}.use_reward_model",
              "learned reward models are not supported yet; use the rule-based math reward (false)")
        check(self.reward_scale > 0, f"{path}.reward_scale", f"must be > 0, got {self.reward_scale}")
        check(self.verify_timeout_s > 0, f"{path}.verify_timeout_s", f"must be > 0, got {self.verify_timeout_s}")
        check(self.verify_processes >= 1, f"{path}.verify_processes", f"must be >= 1, got {self.verify_processes}")


@dataclass(frozen=True)
class CriticConfig:
    """``critic``: a value model for ``adv_type: gae``.

    Attributes:
        use_critic_model: train a value model next to the actor.
        group_name: worker group name.
        model: value model checkpoint (default: the actor's, with a fresh value head).
        lr: value model learning rate (default: actor.optim.value_lr or actor.optim.lr).
        value_clip: clip range of the clipped value loss; null = plain squared error (no
            clipping, as ManiSkill's PPO baseline).
    """

    use_critic_model: bool = False
    group_name: str = "CriticGroup"
    model: ModelRef = field(default_factory=ModelRef)
    lr: float | None = None
    value_clip: float | None = 0.2

    def validate(self, path: str) -> None:
        check(self.lr is None or self.lr > 0, f"{path}.lr", f"must be > 0 or null, got {self.lr}")
        check(self.value_clip is None or self.value_clip > 0, f"{path}.value_clip",
              f"must be > 0 or null (null = unclipped), got {self.value_clip}")


@dataclass(frozen=True)
class InferenceConfig:
    """``inference``: the group that computes reference (and old) log-probs when placed apart.

    Attributes:
        group_name: worker group name.
        model: see :class:`ModelRef`.
    """

    group_name: str = "InferenceGroup"
    model: ModelRef = field(default_factory=ModelRef)
