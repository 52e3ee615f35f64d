"""Pure tensor functions for RL on LLMs and robot policies: advantages, policy/value losses,
KL, entropy and batch shaping. No Ray, no config objects, no I/O.

Conventions: token tensors are ``[batch, seq]`` with a float or bool ``response_mask``
(1 = response token that counts); sequence tensors are ``[batch]``; a group is
``group_size`` consecutive samples of one prompt (batch = n_prompts * group_size).

Public API (registry key in brackets):

Advantages (``adv_type``): registered estimators ``fn(AdvantageInputs) -> AdvantageOutputs``
(see :mod:`rlinf.algorithms.registry`), each over a tensor function returning
``(advantages, returns)``:
    grpo_estimator ["grpo"]                        compute_grpo_advantages
    reinpp_estimator ["reinpp"]                    compute_reinpp_advantages
    reinpp_baseline_estimator ["reinpp_baseline"]  compute_reinpp_baseline_advantages
    rloo_estimator ["rloo"]                        compute_rloo_advantages
    gae_estimator ["gae"]                          compute_gae_advantages
    embodied (``rlinf.algorithms.embodied``): embodied_grpo_estimator ["grpo"],
    embodied_gae_estimator ["gae"]
    group_mean_baseline, rewards_to_last_token, discounted_returns
Policy losses (``loss_type``, each returns ``(loss, metrics)``):
    compute_ppo_loss                 ["ppo"]
    compute_decoupled_ppo_loss       ["decoupled_ppo"]
    clipped_surrogate
Other losses: aggregate_loss (``loss_agg_func``), compute_value_loss, entropy_from_logits,
    compute_entropy_loss, compute_kl_loss
KL (``kl_penalty_type``): compute_kl, kl_k1 ["kl", "k1"], kl_abs ["abs"], kl_k2 ["mse", "k2"],
    kl_k3 ["low_var_kl", "k3"], apply_kl_penalty_to_rewards
Batch shaping: dynamic_sampling_filter, overlong_penalty, scale_math_rewards, pack_micro_batches
Fully asynchronous training (``rlinf.algorithms.async_admission``): AsyncLedger (which groups
    may start, which finished groups a step takes, staleness <= k per group), staleness_metrics
Registries: register_advantage, register_embodied_advantage, register_policy_loss,
    register_kl_penalty, advantage_registry, get_advantage_estimator, get_policy_loss_fn, get_kl_fn
Masked helpers: masked_sum, masked_mean, masked_whiten
Off-policy (``rlinf.algorithms.sac``: SAC, CrossQ, RLPD): squashed_gaussian_logprob,
    sample_squashed_gaussian, sac_critic_target, sac_critic_loss, sac_actor_loss, alpha_value,
    alpha_loss, soft_update, subsample_heads, crossq_split

>>> from rlinf.algorithms import get_advantage_estimator
>>> get_advantage_estimator("gae").needs_critic
True
"""

from rlinf.algorithms.advantages import (
    compute_grpo_advantages,
    compute_reinpp_advantages,
    compute_reinpp_baseline_advantages,
    compute_rloo_advantages,
    discounted_returns,
    group_mean_baseline,
    grpo_estimator,
    reinpp_baseline_estimator,
    reinpp_estimator,
    rewards_to_last_token,
    rloo_estimator,
)
from rlinf.algorithms.async_admission import AsyncLedger, staleness_metrics
from rlinf.algorithms.batching import pack_micro_batches
from rlinf.algorithms.entropy import compute_entropy_loss, entropy_from_logits
from rlinf.algorithms.gae import compute_gae_advantages, gae_estimator
from rlinf.algorithms.kl import (
    apply_kl_penalty_to_rewards,
    compute_kl,
    compute_kl_loss,
    kl_abs,
    kl_k1,
    kl_k2,
    kl_k3,
)
from rlinf.algorithms.loss_agg import LOSS_AGG_MODES, aggregate_loss
from rlinf.algorithms.policy_loss import clipped_surrogate, compute_decoupled_ppo_loss, compute_ppo_loss
from rlinf.algorithms.registry import (
    ADVANTAGES,
    EMBODIED_ADVANTAGES,
    KL_PENALTIES,
    POLICY_LOSSES,
    AdvantageEstimator,
    AdvantageInputs,
    AdvantageOutputs,
    AdvantageRegistry,
    Registry,
    advantage_registry,
    get_advantage_estimator,
    get_kl_fn,
    get_policy_loss_fn,
    register_advantage,
    register_embodied_advantage,
    register_kl_penalty,
    register_policy_loss,
)
from rlinf.algorithms.sampling import (
    GroupFilterResult,
    dynamic_sampling_filter,
    overlong_penalty,
    scale_math_rewards,
)
from rlinf.algorithms.utils import masked_mean, masked_sum, masked_whiten
from rlinf.algorithms.value_loss import compute_value_loss

__all__ = [
    "ADVANTAGES",
    "AdvantageEstimator",
    "AdvantageInputs",
    "AdvantageOutputs",
    "AdvantageRegistry",
    "AsyncLedger",
    "EMBODIED_ADVANTAGES",
    "GroupFilterResult",
    "KL_PENALTIES",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "Registry",
    "advantage_registry",
    "aggregate_loss",
    "apply_kl_penalty_to_rewards",
    "clipped_surrogate",
    "compute_decoupled_ppo_loss",
    "compute_entropy_loss",
    "compute_gae_advantages",
    "compute_grpo_advantages",
    "compute_kl",
    "compute_kl_loss",
    "compute_ppo_loss",
    "compute_reinpp_advantages",
    "compute_reinpp_baseline_advantages",
    "compute_rloo_advantages",
    "compute_value_loss",
    "discounted_returns",
    "dynamic_sampling_filter",
    "entropy_from_logits",
    "gae_estimator",
    "get_advantage_estimator",
    "get_kl_fn",
    "get_policy_loss_fn",
    "group_mean_baseline",
    "grpo_estimator",
    "kl_abs",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "masked_mean",
    "masked_sum",
    "masked_whiten",
    "overlong_penalty",
    "pack_micro_batches",
    "register_advantage",
    "register_embodied_advantage",
    "register_kl_penalty",
    "register_policy_loss",
    "reinpp_baseline_estimator",
    "reinpp_estimator",
    "rewards_to_last_token",
    "rloo_estimator",
    "scale_math_rewards",
    "staleness_metrics",
]
