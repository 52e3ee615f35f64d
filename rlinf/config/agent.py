"""``agentloop:`` and ``tools:`` sections, and the tool agent's root config.

A tool-agent run is a math-style run (same ``data``, ``algorithm``, ``actor``, ``rollout``,
``reward`` sections, same objectives) whose rollout is multi-turn: the model calls tools between
turns (:mod:`rlinf.workers.rollout.agent_loop`). Key names follow RLinf's ``agentloop`` where it
has one.

Example:
    >>> AgentLoopConfig(max_turns=0).validate("agentloop")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: agentloop.max_turns: must be >= 1, got 0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rlinf.config.math import MathConfig
from rlinf.utils.typed_config import ConfigError, check


@dataclass(frozen=True)
class AgentLoopConfig:
    """``agentloop``: how episodes run.

    Attributes:
        toolcall_parser: the tool-call format (``hermes``, ``searchr1``, ``code``; see
            :mod:`rlinf.engines.tools.formats`).
        max_turns: model turns per episode; an episode whose last turn still calls a tool ends
            with ``max_turns``.
        max_parallel_calls: calls run per turn (more are answered with an error and counted as
            invalid).
        max_tool_response_length: tokens of one tool result (cut in the middle).
        max_response_length: tokens after the prompt, model and tool together; null =
            ``runner.seq_length - data.max_prompt_length``; one turn is bounded by
            ``algorithm.sampling_params.max_new_tokens``.
        continue_at_tool_failure: false: an episode ends (``tool_failure``) at a call that
            failed or timed out, instead of showing the error to the model.
        tool_concurrency: calls running at once per rollout rank.
        tool_timeout_s: wall-clock limit of one call (a tool's own limit, e.g.
            ``tools.python.timeout_s``, fires first); a tool's simulated wait
            (``tools.<name>.latency``) counts toward it.
        wait_fraction: a generation round starts once this share of the unfinished episodes
            have their tool results (the others' calls overlap with it); 1 = wait for all.
        system_prompt: a system message put before every prompt (null: none).
        pass_tool_schemas: give the tools' JSON schemas to the chat template (``tools=``), as
            Qwen2.5 / Hermes templates render them in the system turn.
        format_reward: added to the reward of an episode that ended with an answer and made no
            invalid call (0 = off).
        train_mode: ``trajectory``: one sample per episode, tool tokens masked out of the loss;
            ``per_turn``: one sample per model turn, the history before it as its prompt, the
            episode's reward and advantage shared (:mod:`rlinf.runners.tool_agent.per_turn`;
            with a ``seq-mean-*`` ``loss_agg_func`` each turn then weighs the same).
        save_trajectories: save every step's episodes (``<run>/train_trajectories``) and every
            validation's (``<run>/test_trajectories``) in the web agent's trajectory format, for
            ``python -m rlinf.runners.trajectory_viewer``.
    """

    toolcall_parser: Literal["hermes", "searchr1", "code"] = "hermes"
    max_turns: int = 5
    max_parallel_calls: int = 1
    max_tool_response_length: int = 256
    max_response_length: int | None = None
    continue_at_tool_failure: bool = True
    tool_concurrency: int = 8
    tool_timeout_s: float = 30.0
    wait_fraction: float = 0.5
    system_prompt: str | None = None
    pass_tool_schemas: bool = True
    format_reward: float = 0.0
    train_mode: Literal["trajectory", "per_turn"] = "trajectory"
    save_trajectories: bool = False

    def validate(self, path: str) -> None:
        for key in ("max_turns", "max_parallel_calls", "max_tool_response_length", "tool_concurrency"):
            value = getattr(self, key)
            check(value >= 1, f"{path}.{key}", f"must be >= 1, got {value}")
        check(self.max_response_length is None or self.max_response_length >= 1, f"{path}.max_response_length",
              f"must be >= 1, got {self.max_response_length}")
        check(self.tool_timeout_s > 0, f"{path}.tool_timeout_s", f"must be > 0, got {self.tool_timeout_s}")
        check(0 < self.wait_fraction <= 1, f"{path}.wait_fraction", f"must be in (0, 1], got {self.wait_fraction}")


@dataclass(frozen=True)
class ToolAgentConfig(MathConfig):
    """The root of a tool-agent run: a :class:`~rlinf.config.math.MathConfig` plus

    Attributes:
        agentloop: how episodes run (:class:`AgentLoopConfig`).
        tools: tool name -> its keys (``{}`` for none); a tool of your own takes
            ``class_path: package.module:ToolClass``; every tool takes ``latency`` (a seeded
            wait before each call, e.g. ``{distribution: lognormal, median_s: 0.3, p95_s: 3.0,
            seed: 0}``; :mod:`rlinf.engines.tools.latency`). Each is built and checked before Ray.
    """

    agentloop: AgentLoopConfig = field(default_factory=AgentLoopConfig)
    tools: dict[str, Any] = field(default_factory=dict)

    TASK_TYPE = "tool_agent"
    RUN_KIND = "a tool-agent run"

    @property
    def response_budget(self) -> int:
        """Tokens after the prompt (``agentloop.max_response_length`` or the seq_length rest)."""
        return self.agentloop.max_response_length or self.runner.seq_length - self.data.max_prompt_length

    def validate(self, path: str) -> None:
        super().validate(path)
        check(bool(self.tools), "tools", "name at least one tool (e.g. tools: {calculator: {}})")
        for name, options in self.tools.items():
            if options is not None and not isinstance(options, dict):
                raise ConfigError(f"tools.{name}", f"expected a mapping of the tool's keys, got {options!r}")
        check(self.data.max_prompt_length + self.response_budget <= self.runner.seq_length,
              "agentloop.max_response_length",
              f"data.max_prompt_length ({self.data.max_prompt_length}) + max_response_length "
              f"({self.response_budget}) exceeds runner.seq_length ({self.runner.seq_length})")
        python = self.tools.get("python") or {}
        sandbox_limit = python.get("timeout_s", 10) if isinstance(python, dict) else 10
        check("python" not in self.tools or sandbox_limit <= self.agentloop.tool_timeout_s,
              "agentloop.tool_timeout_s",
              f"{self.agentloop.tool_timeout_s:g} s is shorter than tools.python.timeout_s ({sandbox_limit:g} s): the "
              "pool would give up on a call before the sandbox stops its process; raise it")
        needs = {"searchr1": "search", "code": "python"}.get(self.agentloop.toolcall_parser)
        check(needs is None or needs in self.tools, "tools",
              f"agentloop.toolcall_parser {self.agentloop.toolcall_parser} calls the {needs!r} tool; add it to tools")
