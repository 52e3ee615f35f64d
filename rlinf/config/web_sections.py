"""The smaller sections of a web-agent run: ``model_config``, ``policy_config``,
``context_config``, ``openai_config``, ``log_config`` and ``runner``.

Keys are spelled as in WebGym's configuration reference (seed 000) with its defaults; keys marked
*ours* are this runtime's. ``env_config`` lives in :mod:`rlinf.config.web_env`,
``algorithm_config`` and the DeepSpeed files in :mod:`rlinf.config.web_train`, the root in
:mod:`rlinf.config.web`.

Example:
    >>> from rlinf.utils.typed_config import parse_section
    >>> parse_section(WebPolicyConfig, {"temperature": 0.7, "top_k": -1}, "policy_config").top_k
    -1
    >>> parse_section(WebPolicyConfig, {"top_p": 0}, "policy_config")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: policy_config.top_p: must be in (0, 1], got 0.0
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

from rlinf.config.reward import OpenAIConfig, check_env_var_name
from rlinf.utils.typed_config import check, rule

#: the judge tasks of ``openai_config`` (seed 000's per-task overrides)
JUDGE_TASKS = ("keypoint_detection", "blocking_detection", "evaluation")


@dataclass(frozen=True)
class WebModelConfig:
    """``model_config``: which chat model family the policy is, and its prompt.

    Attributes:
        model_type: ``qwen3-instruct``, or ``qwen3-think``: a ``<think>...</think>`` block is
            stripped from each reply before its action is parsed.
        prompt_version: ``vanilla`` = the task, the history and the page only; ``complete`` =
            also the action grammar and its rules.
    """

    model_type: Literal["qwen3-instruct", "qwen3-think"] = "qwen3-instruct"
    prompt_version: Literal["vanilla", "complete"] = "complete"


@dataclass(frozen=True)
class WebPolicyConfig:
    """``policy_config``: the policy model and its sampling settings.

    Attributes:
        base_model: the policy's local HF model folder (config.json, weights, tokenizer);
            required when the run generates with its own rollout workers or trains; with an
            external server (``env_config.vllm_server_url``) it is the model name sent.
        checkpoint_path: null, or an HF folder to start from instead of base_model (its
            weights; base_model still names the family).
        max_new_tokens: reply length budget per step.
        temperature: sampling temperature (0 = greedy).
        top_p: nucleus sampling mass, in (0, 1].
        top_k: sample from the k most likely tokens; -1 = no limit.
        min_p: drop tokens below min_p x the top token's probability, in [0, 1).
        rollout_backend: ours: the engine of the run's own rollout workers (``hf`` or ``vllm``);
            read when ``env_config.vllm_server_url`` is null.
        test_temperature: ours: the sampling temperature of evaluation rollouts (test tasks;
            0 = greedy); null = temperature.
    """

    base_model: str | None = None
    checkpoint_path: str | None = None
    max_new_tokens: int = 3072
    temperature: float = 1.0
    top_p: float = 0.99
    top_k: int = 2
    min_p: float = 0.0
    rollout_backend: Literal["hf", "vllm"] = "hf"
    test_temperature: float | None = None

    @property
    def weights_path(self) -> str | None:
        """The folder the policy's weights are read from (checkpoint_path, else base_model)."""
        return self.checkpoint_path or self.base_model

    def validate(self, path: str) -> None:
        check(self.max_new_tokens >= 1, f"{path}.max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        check(math.isfinite(self.temperature) and self.temperature >= 0, f"{path}.temperature",
              f"must be >= 0, got {self.temperature}")
        check(self.test_temperature is None or (math.isfinite(self.test_temperature) and self.test_temperature >= 0),
              f"{path}.test_temperature", f"must be >= 0 or null, got {self.test_temperature}")
        check(0 < self.top_p <= 1, f"{path}.top_p", f"must be in (0, 1], got {self.top_p}")
        check(self.top_k == -1 or self.top_k >= 1, f"{path}.top_k", f"must be -1 (no limit) or >= 1, got {self.top_k}")
        check(0 <= self.min_p < 1, f"{path}.min_p", f"must be in [0, 1), got {self.min_p}")
        for key in ("base_model", "checkpoint_path"):
            value = getattr(self, key)
            check(value is None or bool(value.strip()), f"{path}.{key}", "expected a folder or null, got ''")


@dataclass(frozen=True)
class WebContextConfig:
    """``context_config``: what the policy sees of the page and of its past.

    Attributes:
        interaction_mode: ``set_of_marks`` = interactive elements carry ``[n]`` marks and
            actions name them (``click [3]``); ``coordinates`` = elements carry their box centre
            and actions give pixels (``click (120, 340)``).
        observation: ours: what the policy is given of the page each step: ``text`` = the element
            tree as text; ``screenshot`` = the viewport as a PNG only (set_of_marks mode: each
            element's frame and ``n`` drawn on it; coordinates mode: the plain screenshot, its
            pixels are the actions' coordinates); ``both`` = the text and the PNG. A screenshot
            needs a vision-language policy: refused before Ray while the policy model is
            text-only (docs/vlm.md, "Screenshot observations").
        history_length: ours: how many previous steps' actions the prompt shows.
        max_observation_chars: ours: the observation text is cut to this many characters.
    """

    interaction_mode: Literal["coordinates", "set_of_marks"] = "set_of_marks"
    observation: Literal["text", "screenshot", "both"] = "text"
    history_length: int = 4
    max_observation_chars: int = 6000

    def validate(self, path: str) -> None:
        check(self.history_length >= 0, f"{path}.history_length", f"must be >= 0, got {self.history_length}")
        check(self.max_observation_chars >= 200, f"{path}.max_observation_chars",
              f"must be >= 200, got {self.max_observation_chars}")


@dataclass(frozen=True)
class WebOpenAIConfig(OpenAIConfig):
    """``openai_config``: the OpenAI-compatible chat endpoints of the LLM judges, with seed
    000's defaults and per-task overrides, plus which evaluator scores trajectories.

    Attributes:
        model: default judge model name.
        openai_api_key_env_var: default environment variable holding the API key (read when a
            request is made; unset = no Authorization header, as local servers take).
        base_url: default base URL (up to, not including, ``/chat/completions``).
        keypoint_detection: override for picking the steps whose pages the evaluation sees
            (N-1 calls per trajectory).
        blocking_detection: override for detecting CAPTCHA / blocking pages (1 call per
            trajectory).
        evaluation: override for the verdicts (criterion_a, criterion_b, reference answer:
            2 + R calls per trajectory).
        evaluator: ours: ``rule`` = the answer is compared with the task's reference answer
            (offline; the endpoints above are not called); ``llm`` = the judges above decide.
        timeout_s: ours: seconds one judge request may take.
        max_retries: ours: retries of a failed judge request (timeouts, connection errors,
            HTTP 429 / 5xx).
        on_failure: ours: a judge request that still fails scores the trajectory 0 and is
            counted (``zero``), or stops the run (``stop``).
    """

    model: str | None = "gemini-3-flash-preview"
    openai_api_key_env_var: str = "GEMINI_API_KEY"
    base_url: str | None = "https://generativelanguage.googleapis.com/v1beta/openai/"
    evaluator: Literal["rule", "llm"] = "rule"
    timeout_s: float = 60.0
    max_retries: int = 3
    on_failure: Literal["zero", "stop"] = "zero"

    def validate(self, path: str) -> None:
        super().validate(path)
        check(self.timeout_s > 0, f"{path}.timeout_s", f"must be > 0, got {self.timeout_s}")
        check(self.max_retries >= 0, f"{path}.max_retries", f"must be >= 0, got {self.max_retries}")
        if self.evaluator != "llm":
            return
        for task in JUDGE_TASKS:
            ep = self.endpoint(task)
            check(ep.base_url is not None, f"{path}.{task}.base_url",
                  f"evaluator llm needs an endpoint for {task} ({path}.base_url or {path}.{task}.base_url)")
            check(ep.model is not None, f"{path}.{task}.model",
                  f"evaluator llm needs a model name for {task} ({path}.model or {path}.{task}.model)")


@dataclass(frozen=True)
class WebLogConfig:
    """``log_config``: experiment tracking (the backend is ``algorithm_config.report_to``).

    Attributes:
        run_name: the run's name (wandb run name prefix; also names the default save_path).
        wandb_key_env_var: environment variable holding the wandb API key (unset = wandb runs
            offline).
        entity_name: wandb entity / team; null = the key's default entity.
        project_name: ours: wandb project (tensorboard logs go to ``<save_path>/tensorboard``).
    """

    run_name: str = "webgym"
    wandb_key_env_var: str = "WANDB_API_KEY"
    entity_name: str | None = None
    project_name: str = "rlinf-web-agent"

    def validate(self, path: str) -> None:
        check(bool(self.run_name.strip()), f"{path}.run_name", "expected a name, got ''")
        check_env_var_name(self.wandb_key_env_var, f"{path}.wandb_key_env_var")


#: why ``runner.rollout_mode`` is sync only in a web-agent run (docs/web_agent.md)
WEB_ASYNC_REASON = (
    "the web agent collects one batch of episodes per iteration and updates between batches; running "
    "ahead or fully asynchronously would take its rollout workers loading weights while episodes are in "
    "flight (generation that pauses inside the batching policy's engine calls), a policy version per step "
    "in its trajectories and saves, an update that takes finished episodes as they come instead of a "
    "batch with a straggler cut-off, and actor and rollout placed apart; an external server "
    "(env_config.vllm_server_url) cannot receive weights at all. Leave sync")


@dataclass(frozen=True)
class WebRunnerConfig:
    """``runner`` (ours): the outer loop of a web-agent run.

    An iteration is one batch of train rollouts followed (when an actor is placed) by training
    on it; a rollout-only run collects ``iterations`` batches of ``env_config.split`` (with
    split test each batch is an evaluation batch, and ``test_interval`` is not read).

    Attributes:
        iterations: iterations to run.
        test_interval: when evaluation rollouts run (if ``env_config.test_tasks_rollout_size``
            is not 0): N >= 1 = before the first iteration (the baseline), after every N-th and
            after the last; 0 = after the last iteration only.
        seed: int = iteration k samples tasks and generates with seed + k (reproducible);
            null = a time-based seed per iteration, as WebGym's rollout script does.
        resume: ``auto`` = continue from what save_path holds (finished iterations' trajectories
            and checkpoints, a batch's incremental saves); null = start afresh (an existing
            save_path with saved iterations is then refused by the runner).
        resume_unverified: continue from a checkpoint that has no manifest.json (saved before
            checkpoints carried one) or holds files its manifest does not list; false (the
            default) refuses it before Ray, naming the file. Said in a start-up note when used.
        max_minutes: stop (after saving) once this many minutes have passed; null = no limit.
        recover_mode: disabled, auto, fault or resume (as in math and embodied runs, AReaL's
            key): ``resume`` continues from the latest complete checkpoint of ``save_path``
            (refused when there is none); ``fault`` restarts the run from it (with the
            unsaved part of an interrupted batch redone) when a worker dies or raises, up to
            ``recover_retries`` times; ``auto`` both, continuing whatever ``save_path`` holds.
        recover_retries: restarts allowed after failures (fault / auto).
        save_interval: checkpoint the actor every N iterations (and after the last); -1 = not
            by count. Ignored by a rollout-only run (no actor), which saves trajectories only.
        save_interval_secs: also checkpoint once this many seconds have passed since the last
            checkpoint, checked after each iteration; null = by count only.
        rollout_mode: only ``sync`` (the math recipes' key): the web agent trains between
            batches; ``async`` and ``fully_async`` are refused with what they would take
            (docs/web_agent.md, "Asynchronous training").
    """

    iterations: int = 1
    test_interval: int = 1
    seed: int | None = None
    resume: Literal["auto"] | None = None
    resume_unverified: bool = False
    max_minutes: float | None = None
    recover_mode: Literal["disabled", "auto", "fault", "resume"] = "disabled"
    recover_retries: int = 3
    save_interval: int = 1
    save_interval_secs: float | None = None
    rollout_mode: Literal["sync", "async", "fully_async"] = rule("sync", only=("sync",), reason=WEB_ASYNC_REASON)

    @property
    def continues(self) -> bool:
        """Whether the run continues what ``save_path`` already holds (``resume: auto``, or
        ``recover_mode`` auto / resume).

        >>> WebRunnerConfig(recover_mode="auto").continues, WebRunnerConfig().continues
        (True, False)
        """
        return self.resume == "auto" or self.recover_mode in ("auto", "resume")

    def iteration_seed(self, k: int) -> int:
        """The seed of iteration ``k``: ``seed + k``, or a time-based one when seed is null.

        >>> WebRunnerConfig(seed=7).iteration_seed(3)
        10
        """
        if self.seed is not None:
            return self.seed + k
        return time.time_ns() % (2**31 - 1)

    def evaluates_after(self, done: int) -> bool:
        """Whether evaluation rollouts run when ``done`` iterations have finished (0 = before
        the first), given that evaluation is on.

        >>> r = WebRunnerConfig(iterations=5, test_interval=2)
        >>> [k for k in range(6) if r.evaluates_after(k)]
        [0, 2, 4, 5]
        >>> [k for k in range(6) if WebRunnerConfig(iterations=5, test_interval=0).evaluates_after(k)]
        [5]
        """
        if done == self.iterations:
            return True
        return self.test_interval >= 1 and done % self.test_interval == 0

    def validate(self, path: str) -> None:
        check(self.iterations >= 1, f"{path}.iterations", f"must be >= 1, got {self.iterations}")
        check(self.test_interval >= 0, f"{path}.test_interval",
              f"must be >= 1 (every N iterations) or 0 (after the last only), got {self.test_interval}")
        check(self.seed is None or self.seed >= 0, f"{path}.seed", f"must be >= 0 or null, got {self.seed}")
        check(self.max_minutes is None or (math.isfinite(self.max_minutes) and self.max_minutes > 0),
              f"{path}.max_minutes", f"must be > 0 or null, got {self.max_minutes}")
        check(self.recover_retries >= 0, f"{path}.recover_retries", f"must be >= 0, got {self.recover_retries}")
        check(self.save_interval == -1 or self.save_interval >= 1, f"{path}.save_interval",
              f"must be -1 (off) or >= 1, got {self.save_interval}")
        secs = self.save_interval_secs
        check(secs is None or (math.isfinite(secs) and secs > 0),
              f"{path}.save_interval_secs", f"must be > 0 or null, got {self.save_interval_secs}")
