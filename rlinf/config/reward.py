"""``reward:``, ``critic:`` and ``inference:`` sections."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

from rlinf.config.actor import LrSchedConfig, OptimConfig
from rlinf.config.rollout import ModelRef
from rlinf.utils.typed_config import ConfigError, check, rule

#: the judge prompt unless ``reward.judge.prompt_template`` is set ({prompt}, {response}, {answer})
DEFAULT_JUDGE_TEMPLATE = (
    "You grade answers to math problems.\nProblem: {prompt}\nReference answer: {answer}\n"
    "Response: {response}\nReply with a single number: 1 if the response's final answer equals the "
    "reference answer, else 0.")


_ENV_VAR_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


def check_env_var_name(value: str | None, key: str) -> None:
    """A ``*_env_var`` key names an environment variable (upper case, digits, ``_``): a config never
    holds a key itself (it is saved with the run), and the refusal never repeats the value.

    >>> check_env_var_name("OPENAI_API_KEY", "openai_config.openai_api_key_env_var")
    >>> check_env_var_name("sk-proj-abc123", "openai_config.openai_api_key_env_var")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: openai_config.openai_api_key_env_var: expected the name of an environment variable (like OPENAI_API_KEY: upper-case letters, digits and _), not a key: export the key in that variable and name it here (a config is saved with the run, so it never holds a key)
    """  # noqa: E501 - a doctest's expected output is one line
    check(value is None or bool(_ENV_VAR_NAME.fullmatch(value)), key,
          "expected the name of an environment variable (like OPENAI_API_KEY: upper-case letters, digits and _), "
          "not a key: export the key in that variable and name it here (a config is saved with the run, so it "
          "never holds a key)")


@dataclass(frozen=True)
class OpenAIEndpointConfig:
    """One per-task override of ``openai_config`` (seed 000's keys); null = the default's value.

    Attributes:
        model: model name sent with each request.
        openai_api_key_env_var: environment variable holding the API key.
        base_url: the endpoint's base URL (up to, not including, ``/chat/completions``).
    """

    model: str | None = None
    openai_api_key_env_var: str | None = None
    base_url: str | None = None

    def validate(self, path: str) -> None:
        check_env_var_name(self.openai_api_key_env_var, f"{path}.openai_api_key_env_var")


@dataclass(frozen=True)
class OpenAIConfig:
    """``openai_config``: the OpenAI-compatible chat endpoint judges call, with per-task overrides
    (seed 000: ``keypoint_detection``, ``blocking_detection``, ``evaluation``).

    Attributes:
        model: default model name.
        openai_api_key_env_var: default environment variable holding the API key (read when a
            request is made; unset = no Authorization header, as local servers take).
        base_url: default base URL, e.g. ``http://127.0.0.1:8000/v1``.
        keypoint_detection, blocking_detection, evaluation: per-task overrides (see
            :class:`OpenAIEndpointConfig`); the math judge uses ``reward.judge.task``'s.
    """

    model: str | None = None
    openai_api_key_env_var: str = "OPENAI_API_KEY"
    base_url: str | None = None
    keypoint_detection: OpenAIEndpointConfig = field(default_factory=OpenAIEndpointConfig)
    blocking_detection: OpenAIEndpointConfig = field(default_factory=OpenAIEndpointConfig)
    evaluation: OpenAIEndpointConfig = field(default_factory=OpenAIEndpointConfig)

    def validate(self, path: str) -> None:
        check_env_var_name(self.openai_api_key_env_var, f"{path}.openai_api_key_env_var")

    def endpoint(self, task: str) -> OpenAIEndpointConfig:
        """The endpoint of ``task``: its override over the defaults, every field filled.

        >>> OpenAIConfig(model="m", base_url="u", evaluation=OpenAIEndpointConfig(model="judge")).endpoint("evaluation")
        OpenAIEndpointConfig(model='judge', openai_api_key_env_var='OPENAI_API_KEY', base_url='u')
        """
        own = getattr(self, task)
        return OpenAIEndpointConfig(own.model or self.model, own.openai_api_key_env_var or self.openai_api_key_env_var,
                                    own.base_url or self.base_url)


@dataclass(frozen=True)
class JudgeConfig:
    """``reward.judge``: an LLM judge scores each response through ``reward.openai_config``.

    The judge's reply is read as the first number in it, clipped to [0, 1]; that is the judge
    reward (weighted by ``reward.judge_weight``).

    Attributes:
        enabled: ask the judge for every response.
        task: which ``openai_config`` override the judge uses (its model / URL / key).
        prompt_template: the user message; ``{prompt}``, ``{response}`` and ``{answer}`` are
            filled in. null = a built-in grading prompt (reply 1 or 0).
        max_connections: requests in flight at once (the HTTP pool's size).
        timeout_s: budget of one request.
        max_retries: retries of a failed request (timeouts, connection errors, HTTP 429 / 5xx),
            with exponential back-off from backoff_s.
        backoff_s: first back-off; doubled per retry.
        max_tokens: reply length budget sent with each request.
        on_failure: what a request that still fails means: zero = judge reward 0, counted in
            ``reward/judge_failures``; stop = the run stops with the error.
    """

    enabled: bool = False
    task: Literal["evaluation", "keypoint_detection", "blocking_detection"] = "evaluation"
    prompt_template: str | None = None
    max_connections: int = 8
    timeout_s: float = 30.0
    max_retries: int = 3
    backoff_s: float = 0.5
    max_tokens: int = 16
    on_failure: Literal["zero", "stop"] = "zero"

    @property
    def template(self) -> str:
        return self.prompt_template or DEFAULT_JUDGE_TEMPLATE

    def validate(self, path: str) -> None:
        for key in ("max_connections", "max_tokens"):
            check(getattr(self, key) >= 1, f"{path}.{key}", f"must be >= 1, got {getattr(self, key)}")
        check(self.timeout_s > 0, f"{path}.timeout_s", f"must be > 0, got {self.timeout_s}")
        check(self.max_retries >= 0, f"{path}.max_retries", f"must be >= 0, got {self.max_retries}")
        check(self.backoff_s >= 0, f"{path}.backoff_s", f"must be >= 0, got {self.backoff_s}")
        try:
            self.template.format(prompt="", response="", answer="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"{path}.prompt_template", f"may use only {{prompt}}, {{response}} and "
                                                         f"{{answer}} ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class RewardConfig:
    """``reward``: what a response earns. The rule-based math reward, a learned reward model and
    an LLM judge can be combined: reward = rule_weight x rule + model_weight x reward model +
    judge_weight x judge, over the sources that are on.

    Attributes:
        group_name: worker group name (names the group in logs and error lines).
        use_reward_model: score every (prompt, response) with the sequence-classification HF
            model in ``reward.model.model_path`` (one label; its logit is the score), in the
            reward workers.
        model: the reward model checkpoint (model_path required with use_reward_model; its own
            tokenizer; the chat template, when it has one, wraps prompt and response as a user
            and an assistant turn).
        model_micro_batch_size: sequences per reward-model forward pass.
        reward_type: which rule-based reward: ``math`` (the last ``\\boxed{}`` checked with
            math-verify: +reward_scale / -reward_scale), ``exact_match`` (normalised equality with
            the gold, or any item of a JSON-list gold: reward_scale / 0) or ``f1`` (reward_scale x
            token F1; correct = exact match); see :mod:`rlinf.rewards.qa`.
        reward_scale: the size of the rule reward (see reward_type).
        rule_weight: weight of the rule reward (0 = accuracy is still measured, not rewarded).
        model_weight: weight of the reward model's score.
        judge_weight: weight of the judge's score.
        judge: see :class:`JudgeConfig`.
        openai_config: see :class:`OpenAIConfig`.
        verify_timeout_s: per-answer time budget of the math verifier (our key).
        verify_processes: verifier processes per reward worker (our key).
    """

    group_name: str = "RewardGroup"
    use_reward_model: bool = False
    model: ModelRef = field(default_factory=ModelRef)
    model_micro_batch_size: int = 8
    reward_type: Literal["math", "exact_match", "f1"] = "math"
    reward_scale: float = 1.0
    rule_weight: float = 1.0
    model_weight: float = 1.0
    judge_weight: float = 1.0
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    openai_config: OpenAIConfig = field(default_factory=OpenAIConfig)
    verify_timeout_s: float = 2.0
    verify_processes: int = 1

    def validate(self, path: str) -> None:
        check(not self.use_reward_model or self.model.model_path is not None, f"{path}.model.model_path",
              "use_reward_model needs the reward model's HF folder")
        check(self.model.model_path is None or self.use_reward_model, f"{path}.use_reward_model",
              "reward.model.model_path is set but use_reward_model is false; set it true (or drop the path)")
        check(self.model_micro_batch_size >= 1, f"{path}.model_micro_batch_size",
              f"must be >= 1, got {self.model_micro_batch_size}")
        if self.judge.enabled:
            ep = self.openai_config.endpoint(self.judge.task)
            check(ep.base_url is not None, f"{path}.openai_config.base_url",
                  f"the judge needs an endpoint (openai_config.base_url or openai_config.{self.judge.task}.base_url)")
            check(ep.model is not None, f"{path}.openai_config.model",
                  f"the judge needs a model name (openai_config.model or openai_config.{self.judge.task}.model)")
        for key in ("rule_weight", "model_weight", "judge_weight"):
            check(math.isfinite(getattr(self, key)), f"{path}.{key}", f"must be finite, got {getattr(self, key)}")
        check(self.reward_scale > 0, f"{path}.reward_scale", f"must be > 0, got {self.reward_scale}")
        check(self.verify_timeout_s > 0, f"{path}.verify_timeout_s", f"must be > 0, got {self.verify_timeout_s}")
        check(self.verify_processes >= 1, f"{path}.verify_processes", f"must be >= 1, got {self.verify_processes}")


@dataclass(frozen=True)
class CriticConfig:
    """``critic``: the value model of PPO (``adv_type: gae``).

    Math runs train a separate value model in its own worker group, placed by
    ``cluster.component_placement.critic`` (on the actor's devices when not placed): the HF
    architecture of ``critic.model.model_path`` (default: the actor's checkpoint) with a scalar
    head on every token (``AutoModelForTokenClassification``, one label, the head zero-initialised
    when the checkpoint has none), trained with FSDP2. Embodied runs use the policy's own value head.

    Attributes:
        use_critic_model: math: train the value model (adv_type gae needs it; the estimators
            without a critic refuse it); embodied: the policy's value head (gae needs it, grpo
            refuses it).
        group_name: math: worker group name (names the group in logs and error lines); embodied
            runs have no critic group.
        model: value model checkpoint (model_path null = the actor's); model_type is checked
            against its config.json as for the other sections.
        lr: value model learning rate (default: actor.optim.value_lr or actor.optim.lr).
        value_clip: clip range of the clipped value loss; null = plain squared error (no
            clipping, as ManiSkill's PPO baseline).
        warmup_steps: math: the first this many training steps update the value model only (the
            actor and the rollout weights stay as they are), so the advantages the actor first
            learns from come from a fitted critic.
        optim: math: the value model's optimizer (betas, eps, weight decay, clip_grad); null =
            actor.optim; its lr is replaced by critic.lr when that is set.
        lr_sched: math: the value model's LR schedule; null = actor.lr_sched.
    """

    use_critic_model: bool = False
    group_name: str = rule("CriticGroup", scope="math")
    model: ModelRef = field(default_factory=ModelRef)
    lr: float | None = None
    value_clip: float | None = 0.2
    warmup_steps: int = rule(0, scope="math")
    optim: OptimConfig | None = rule(None, scope="math")
    lr_sched: LrSchedConfig | None = rule(None, scope="math")

    def validate(self, path: str) -> None:
        check(self.lr is None or self.lr > 0, f"{path}.lr", f"must be > 0 or null, got {self.lr}")
        check(self.warmup_steps >= 0, f"{path}.warmup_steps", f"must be >= 0, got {self.warmup_steps}")
        check(self.value_clip is None or self.value_clip > 0, f"{path}.value_clip",
              f"must be > 0 or null (null = unclipped), got {self.value_clip}")


@dataclass(frozen=True)
class InferenceConfig:
    """``inference``: the group that computes reference (and old) log-probs when placed apart.

    Attributes:
        group_name: worker group name (names the group in logs and error lines).
        model: see :class:`ModelRef`.
    """

    group_name: str = "InferenceGroup"
    model: ModelRef = field(default_factory=ModelRef)
