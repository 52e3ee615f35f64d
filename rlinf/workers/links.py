"""Names that actor and rollout workers agree on, in a module that imports nothing.

A rollout process imports this instead of the actor's module, so it does not load what only the
actor needs (FSDP, ``torch.distributed.checkpoint``, the losses: ~1 s of imports per process).

Example:
    >>> from rlinf.workers.links import POLICY_LINK, WEIGHT_LINK, weights_key
    >>> WEIGHT_LINK, POLICY_LINK, weights_key(3)
    ('actor_to_rollout', 'actor_to_rollout_policy', 'weights/3')
"""

from __future__ import annotations

#: The tensor link an LLM actor's rank 0 sends weights on (rollout ranks receive on it).
WEIGHT_LINK = "actor_to_rollout"

#: The tensor link an embodied actor (PPO / GRPO, or the off-policy learner) sends policy weights on.
POLICY_LINK = "actor_to_rollout_policy"


def weights_key(rollout_rank: int) -> str:
    """The channel key on which rollout rank ``rollout_rank`` finds pushed weights (async off-policy mode)."""
    return f"weights/{rollout_rank}"
