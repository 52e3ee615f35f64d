"""``algorithm:`` — advantage estimator, policy loss, KL, sampling."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from rlinf.algorithms.registry import AdvantageEstimator, advantage_registry
from rlinf.utils.typed_config import check, rule

#: run kinds and their advantage registries (``rlinf.algorithms.registry``)
ADVANTAGE_KINDS = {"llm": "math / LLM", "embodied": "embodied"}
#: ``algorithm.adv_type``: exactly the registered estimators, of every kind of run (a root config
#: refuses a name its kind lacks, see :meth:`AlgorithmConfig.estimator`)
ADV_TYPES = tuple(sorted({name for kind in ADVANTAGE_KINDS for name in advantage_registry(kind).names()}))
AdvType = Literal[ADV_TYPES]  # type: ignore[valid-type]


@dataclass(frozen=True)
class SamplingParams:
    """``algorithm.sampling_params`` (rollout generation).

    Attributes:
        do_sample: sample (True) or greedy (False).
        temperature, top_k, top_p, repetition_penalty: the usual; top_k <= 0 or a huge value
            disables top-k.
        max_new_tokens: response token budget (the reference derives it with
            ``${subtract:${runner.seq_length}, ${data.max_prompt_length}}``).
        min_new_tokens: minimum response tokens.
        stop: stop strings: a response ends at the token that completes one (kept, as an EOS
            token is); the HF engine cuts after generating, vLLM stops at it.
        stop_token_ids: token ids that end a response besides the tokenizer's EOS.
        frequency_penalty: subtracted from a token's logit once per time it already occurs in
            the response (-2 to 2; negative encourages repetition).
        min_p: sampling keeps tokens whose probability is at least min_p x the top token's
            (0 = off).
    """

    do_sample: bool = rule(True, scope="math")
    temperature: float = 1.0
    top_k: int = rule(1000000, scope="math")
    top_p: float = rule(1.0, scope="math")
    repetition_penalty: float = rule(1.0, scope="math")
    max_new_tokens: int = rule(1024, scope="math")
    min_new_tokens: int = rule(1, scope="math")
    stop: tuple[str, ...] = rule((), scope="math")
    stop_token_ids: tuple[int, ...] = rule((), scope="math")
    frequency_penalty: float = rule(0.0, scope="math")
    min_p: float = rule(0.0, scope="math")

    def validate(self, path: str) -> None:
        check(self.temperature > 0 or not self.do_sample, f"{path}.temperature",
              f"must be > 0 when do_sample is true, got {self.temperature}")
        check(0 < self.top_p <= 1, f"{path}.top_p", f"must be in (0, 1], got {self.top_p}")
        check(self.repetition_penalty > 0, f"{path}.repetition_penalty",
              f"must be > 0 (1 = off; it divides logits), got {self.repetition_penalty}")
        check(self.max_new_tokens >= 1, f"{path}.max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        check(-2 <= self.frequency_penalty <= 2, f"{path}.frequency_penalty",
              f"must be in [-2, 2], got {self.frequency_penalty}")
        check(0 <= self.min_p < 1, f"{path}.min_p", f"must be in [0, 1), got {self.min_p}")
        for i, s in enumerate(self.stop):
            check(bool(s), f"{path}.stop[{i}]", "an empty stop string would end every response at once")
        check(0 <= self.min_new_tokens <= self.max_new_tokens, f"{path}.min_new_tokens",
              f"must be in [0, max_new_tokens={self.max_new_tokens}], got {self.min_new_tokens}")


@dataclass(frozen=True)
class LengthParams:
    """``algorithm.length_params`` (embodied VLA token budgets; mlp / cnn policies have no
    tokens, so they take only the defaults).

    Attributes:
        max_new_token: tokens a VLA policy generates per step: it emits exactly one token per
            action dimension per chunk, so null or action_dim x num_action_chunks.
        max_length: longest prompt + generated sequence: runner.max_prompt_length (when set) +
            the action tokens must fit.
        min_length: shortest sequence; a VLA sequence is never shorter than its action tokens,
            so it must not exceed them.
    """

    max_new_token: int | None = None
    max_length: int = 1024
    min_length: int = 1

    def validate(self, path: str) -> None:
        check(self.max_new_token is None or self.max_new_token >= 1, f"{path}.max_new_token",
              f"must be >= 1 or null, got {self.max_new_token}")
        check(1 <= self.min_length <= self.max_length, f"{path}.min_length",
              f"must be in [1, max_length={self.max_length}], got {self.min_length}")


@dataclass(frozen=True)
class RewardNormConfig:
    """``algorithm.reward_norm`` (AReaL's NormConfig): rewards are normalised before the
    advantages, r' = (r - mu) / (sigma + eps); groups are ``algorithm.group_size`` samples.

    Attributes:
        mean_level: batch, group, or null (no centring).
        mean_leave1out: mu of a sample excludes the sample itself.
        std_level: batch, group, or null (no scaling).
        std_unbiased: unbiased (n - 1) standard deviation.
        eps: added to sigma.
    """

    mean_level: Literal["batch", "group"] | None = "batch"
    mean_leave1out: bool = False
    std_level: Literal["batch", "group"] | None = "batch"
    std_unbiased: bool = True
    eps: float = 1e-5

    def validate(self, path: str) -> None:
        check(self.eps >= 0, f"{path}.eps", f"must be >= 0, got {self.eps}")


@dataclass(frozen=True)
class AlgorithmConfig:
    """``algorithm``.

    Attributes:
        group_size: responses per prompt (> 1 for group baselines).
        n_minibatches: optimizer steps per rollout batch.
        training_batch_size_per_gpu: micro-batch per actor process.
        rollout_batch_size_per_gpu: generation micro-batch per rollout process; null = even split.
        logprob_forward_micro_batch_size: micro-batch of log-prob forward passes.
        val_rollout_batch_size_per_gpu: validation generation micro-batch per process.
        loss_type: policy loss (ppo, or decoupled_ppo for off-policy batches: math runs with async
            rollout, embodied runs with max_head_offpolicyness 1, whose update then recomputes the
            proximal log-probs first).
        loss_agg_func: token-mean, seq-mean-token-sum or seq-mean-token-mean.
        adv_type: the advantage estimator, a name registered in ``rlinf.algorithms.registry``:
            grpo (group-normalised), gae (PPO with a critic / value head), reinpp (REINFORCE++:
            returns whitened over the batch), reinpp_baseline (REINFORCE++ minus the group mean
            reward, then whitened over the batch) or rloo (leave-one-out baseline: each sample's
            baseline is the mean reward of the other samples of its group); embodied runs take
            gae or grpo.
        reward_clip: math: rewards are clipped to [-reward_clip, reward_clip] before the
            advantages (AReaL's key); null = off.
        reward_norm: math: reward normalisation before the advantages (see
            :class:`RewardNormConfig`); null = off.
        normalize_advantages: normalise advantages (per group for grpo, per batch otherwise).
        kl_beta: KL weight; > 0 needs reference log-probs.
        kl_penalty_type: kl (k1), abs, mse (k2) or low_var_kl (k3).
        kl_in_reward: add the KL penalty to rewards instead of the loss.
        ratio_clip_eps: PPO clip epsilon (both sides unless clip_ratio_high is set).
        clip_ratio_high: clip-higher upper epsilon (DAPO); null = ratio_clip_eps.
        clip_ratio_c: dual-clip constant (> 1); null disables.
        entropy_bonus: entropy coefficient in the loss.
        calculate_entropy: compute entropy metrics even without a bonus.
        early_stop_imp_ratio: drop tokens whose importance ratio exceeds this; null disables.
        use_valid_token_scale: how the micro-batch losses of one optimizer step add up: true
            = each micro-batch weighs by its share of the minibatch's valid (response) tokens, so
            the step minimises the token-mean loss of the whole minibatch however it is split
            over ranks and micro-batches; false = every micro-batch weighs the same (the mean of
            the micro-batch losses, as the reference's default).
        gamma, lam: discount and GAE lambda (gae / reinpp / reinpp_baseline).
        dynamic_sampling: DAPO: drop groups whose rewards are all equal and refill the batch.
        max_dynamic_sampling_rounds: extra rollout rounds allowed to refill one batch.
        overlong_buffer_len: DAPO overlong penalty buffer (tokens); 0 disables.
        overlong_penalty_factor: scale of the overlong penalty.
        max_head_offpolicyness: async mode: how many policy versions rollout may run ahead of
            training; 0 = synchronous (on-policy). Math runs: needs ``decoupled_ppo`` and a
            disaggregated placement. Embodied runs: 0 or 1; 1 starts the next training rollout
            before each update (simulation overlaps the update; each update learns from the
            previous policy version's data, clipped against its recorded log-probs).
        behav_imp_weight_cap: decoupled PPO: cap on the behaviour importance weight; null = none.
        sampling_params: see :class:`SamplingParams`.
        kl_penalty: embodied: KL estimator between policy and reference; embodied runs have no
            reference KL term yet, so only kl is accepted (math runs: kl_penalty_type).
        rollout_epoch: embodied: rollout passes (each over all train envs) per training step.
        reward_type: embodied: chunk_level (one reward and value per action chunk) or
            action_level (one per action).
        logprob_type: embodied: importance-ratio unit: token_level (per action dimension),
            action_level (per action) or chunk_level (per chunk).
        entropy_type: embodied: entropy unit, as logprob_type.
        length_params: see :class:`LengthParams`.
        value_loss_coef: embodied PPO: weight of the value-head loss (our key).
        update_epochs: embodied PPO: passes over each rollout batch (our key).
        target_kl: embodied PPO: stop the update (this and every later epoch) at the first
            minibatch whose approximate KL to the rollout policy (k3 estimator, per action: the
            log-probs summed over action dimensions) exceeds this; that minibatch takes no
            optimizer step. null = never (our key).
        normalize_minibatch_advantages: embodied PPO: whiten the advantages again inside every
            minibatch (mean 0, std 1; over each actor rank's part of it) before the loss, as
            CleanRL; the batch-level ``normalize_advantages`` happens first either way (our key).
        auto_reset, ignore_terminations: embodied: the episode rules the reference's env files
            inherit (``env.<split>.auto_reset: ${algorithm.auto_reset}``); when set, every env
            split that does not set its own takes them (a split's own value wins, as the
            reference's eval block overrides it); a value no split takes is refused. null = each
            split's own value.
    """

    group_size: int = 1
    n_minibatches: int = rule(1, scope="math")
    training_batch_size_per_gpu: int = rule(1, scope="math")
    rollout_batch_size_per_gpu: int | None = rule(None, scope="math")
    logprob_forward_micro_batch_size: int = rule(1, scope="math")
    val_rollout_batch_size_per_gpu: int = rule(4, scope="math")
    loss_type: Literal["ppo", "decoupled_ppo"] = "ppo"
    loss_agg_func: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = "token-mean"
    adv_type: AdvType = "grpo"
    reward_clip: float | None = rule(None, scope="math")
    reward_norm: RewardNormConfig | None = rule(None, scope="math")
    normalize_advantages: bool = True
    kl_beta: float = 0.0
    kl_penalty_type: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"] = rule("low_var_kl", scope="math")
    kl_in_reward: bool = rule(False, scope="math")
    ratio_clip_eps: float = 0.2
    clip_ratio_high: float | None = None
    clip_ratio_c: float | None = None
    entropy_bonus: float = 0.0
    calculate_entropy: bool = rule(False, scope="math")
    early_stop_imp_ratio: float | None = rule(None, scope="math")
    use_valid_token_scale: bool = rule(True, scope="math")
    gamma: float = 1.0
    lam: float = 1.0
    dynamic_sampling: bool = rule(False, scope="math")
    max_dynamic_sampling_rounds: int = rule(4, scope="math")
    overlong_buffer_len: int = rule(0, scope="math")
    overlong_penalty_factor: float = rule(1.0, scope="math")
    max_head_offpolicyness: int = 0
    behav_imp_weight_cap: float | None = rule(None, scope="math")
    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    kl_penalty: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"] = rule(
        "kl", scope="embodied", only=("kl", "k1"), reason="embodied runs have no KL term to a reference "
        "policy (algorithm.kl_beta must be 0), so there is no estimator to choose; leave kl")
    rollout_epoch: int = rule(1, scope="embodied")
    reward_type: Literal["chunk_level", "action_level"] = rule("chunk_level", scope="embodied")
    logprob_type: Literal["token_level", "action_level", "chunk_level"] = rule("token_level", scope="embodied")
    entropy_type: Literal["token_level", "action_level", "chunk_level"] = rule("token_level", scope="embodied")
    length_params: LengthParams = rule(factory=LengthParams, scope="embodied")
    value_loss_coef: float = rule(0.5, scope="embodied")
    update_epochs: int = rule(1, scope="embodied")
    target_kl: float | None = rule(None, scope="embodied")
    normalize_minibatch_advantages: bool = rule(False, scope="embodied")
    auto_reset: bool | None = rule(None, scope="embodied")
    ignore_terminations: bool | None = rule(None, scope="embodied")

    def validate(self, path: str) -> None:
        for key in ("group_size", "n_minibatches", "training_batch_size_per_gpu",
                    "logprob_forward_micro_batch_size", "val_rollout_batch_size_per_gpu",
                    "rollout_epoch", "update_epochs"):
            value = getattr(self, key)
            check(value >= 1, f"{path}.{key}", f"must be >= 1, got {value}")
        needs_groups = any(advantage_registry(kind).get(self.adv_type).needs_groups
                           for kind in ADVANTAGE_KINDS if self.adv_type in advantage_registry(kind))
        check(not needs_groups or self.group_size > 1, f"{path}.group_size",
              f"{self.adv_type} needs group_size > 1 (a group baseline), got {self.group_size}")
        check(self.reward_clip is None or self.reward_clip > 0, f"{path}.reward_clip",
              f"must be > 0 or null, got {self.reward_clip}")
        check(self.kl_beta >= 0, f"{path}.kl_beta", f"must be >= 0, got {self.kl_beta}")
        check(self.ratio_clip_eps > 0, f"{path}.ratio_clip_eps", f"must be > 0, got {self.ratio_clip_eps}")
        check(self.clip_ratio_c is None or self.clip_ratio_c > 1, f"{path}.clip_ratio_c",
              f"must be > 1 or null, got {self.clip_ratio_c}")
        check(self.early_stop_imp_ratio is None or self.early_stop_imp_ratio > 1,
              f"{path}.early_stop_imp_ratio", f"must be > 1 or null, got {self.early_stop_imp_ratio}")
        check(0 < self.gamma <= 1, f"{path}.gamma", f"must be in (0, 1], got {self.gamma}")
        check(0 <= self.lam <= 1, f"{path}.lam", f"must be in [0, 1], got {self.lam}")
        check(self.value_loss_coef >= 0, f"{path}.value_loss_coef", f"must be >= 0, got {self.value_loss_coef}")
        check(self.target_kl is None or self.target_kl > 0, f"{path}.target_kl",
              f"must be > 0 or null, got {self.target_kl}")
        check(self.rollout_batch_size_per_gpu is None or self.rollout_batch_size_per_gpu >= 1,
              f"{path}.rollout_batch_size_per_gpu", f"must be >= 1 or null, got {self.rollout_batch_size_per_gpu}")
        check(self.clip_ratio_high is None or self.clip_ratio_high > 0, f"{path}.clip_ratio_high",
              f"must be > 0 or null, got {self.clip_ratio_high}")
        check(self.behav_imp_weight_cap is None or self.behav_imp_weight_cap > 1,
              f"{path}.behav_imp_weight_cap", f"must be > 1 or null, got {self.behav_imp_weight_cap}")
        check(self.overlong_buffer_len >= 0, f"{path}.overlong_buffer_len",
              f"must be >= 0 (0 = off), got {self.overlong_buffer_len}")
        check(self.overlong_penalty_factor >= 0, f"{path}.overlong_penalty_factor",
              f"must be >= 0, got {self.overlong_penalty_factor}")
        check(self.max_dynamic_sampling_rounds >= 0, f"{path}.max_dynamic_sampling_rounds",
              f"must be >= 0, got {self.max_dynamic_sampling_rounds}")
        check(math.isfinite(self.entropy_bonus), f"{path}.entropy_bonus", f"must be finite, got {self.entropy_bonus}")
        check(self.max_head_offpolicyness >= 0, f"{path}.max_head_offpolicyness",
              f"must be >= 0, got {self.max_head_offpolicyness}")

    def estimator(self, kind: str, path: str = "algorithm") -> AdvantageEstimator:
        """The estimator ``adv_type`` selects for ``kind`` of run (``"llm"`` or ``"embodied"``);
        its ``needs_critic`` / ``needs_groups`` drive the root configs' checks.

        >>> AlgorithmConfig(adv_type="gae").estimator("llm").needs_critic
        True
        >>> AlgorithmConfig(adv_type="reinpp").estimator("embodied")
        Traceback (most recent call last):
        ...
        rlinf.utils.typed_config.ConfigError: algorithm.adv_type: embodied runs use one of gae, grpo, got 'reinpp'
        """
        registry = advantage_registry(kind)
        check(self.adv_type in registry, f"{path}.adv_type",
              f"{ADVANTAGE_KINDS[kind]} runs use one of {', '.join(registry.names())}, got {self.adv_type!r}")
        return registry.get(self.adv_type)
