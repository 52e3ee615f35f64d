"""The tool-agent recipe: multi-turn RL where the model calls tools (a calculator, a sandboxed
Python interpreter, local search, or tools of your own) between turns.

    config -> :class:`~rlinf.config.agent.ToolAgentConfig` + tokenizer + prompt loaders + every
    tool built and checked (before Ray) -> actor / agent rollout / reward (/ inference / critic)
    groups -> :class:`~rlinf.runners.tool_agent.loop.ToolAgentRunner` -> fit, export, summary

It is the math recipe with :class:`~rlinf.workers.rollout.agent_worker.AgentRolloutWorker` as its
rollout group: placements (collocated, disaggregated), engines (HF, vLLM), objectives (GRPO, PPO
with a critic, REINFORCE++, RLOO, decoupled PPO with the async lookahead), checkpoints and resume
are the math run's. ``examples/tool_agent/main.py`` is its Hydra entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rlinf.config.agent import ToolAgentConfig
from rlinf.engines.tools.base import make_tool
from rlinf.runners.math.preflight import MathStart, prepare_math
from rlinf.runners.math.recipe import MathRecipe
from rlinf.runners.recipe import run_recipe
from rlinf.runners.tool_agent.preflight import TOOL_AGENT_ASSETS


def build_tools(cfg: ToolAgentConfig) -> dict:
    """The run's tool objects (``tools:``), each built from its keys and checked (files,
    binaries); a problem is a :class:`~rlinf.utils.typed_config.ConfigError` naming the key."""
    return {name: make_tool(name, options) for name, options in cfg.tools.items()}


def _prompt_extras(cfg: ToolAgentConfig) -> tuple[str | None, list[dict] | None]:
    """The system prompt and, with ``pass_tool_schemas``, the tools' schemas for the template."""
    schemas = None
    if cfg.agentloop.pass_tool_schemas:
        tools = build_tools(cfg)
        try:
            schemas = [t.schema() for t in tools.values()]
        finally:
            for t in tools.values():
                t.close()
    return cfg.agentloop.system_prompt, schemas


class ToolAgentRecipe(MathRecipe):
    """Tool-agent RL on the shared run layer (see the module docstring)."""

    name = "tool_agent"
    config_cls = ToolAgentConfig
    summary_metric = "accuracy"
    summary_label = "held-out success"
    task_type = "tool_agent"
    reference_order = 20  # after the embodied sections: adds agentloop and tools

    def prepare(self, raw: Any) -> MathStart:
        start = prepare_math(raw, ToolAgentConfig, _prompt_extras, TOOL_AGENT_ASSETS)
        if not start.cfg.agentloop.pass_tool_schemas:  # the tools are still built and checked before Ray
            for tool in build_tools(start.cfg).values():
                tool.close()
        return start

    def placement_workflow(self, cfg):
        """The math step (:meth:`MathRecipe.placement_workflow`), whose rollout also waits for its
        tools (``external_waits``: a measured profile gives it its wall minus CPU seconds)."""
        workflow = super().placement_workflow(cfg)
        return None if workflow is None else dataclasses.replace(workflow, external_waits=("rollout",))

    def describe(self, start: MathStart, plan) -> list[str]:
        a = start.cfg.agentloop
        return [*super().describe(start, plan),
                f"agent: {a.toolcall_parser} calls to {', '.join(start.cfg.tools)}; up to {a.max_turns} turns, "
                f"{start.cfg.response_budget} response tokens (model + tool); trained as {a.train_mode} samples"]

    def launch(self, start: MathStart, cluster, plan, print_fn: Callable = print):
        # lazy: math groups/loop + the agent worker import transformers (~10 s); only a launched run
        from rlinf.runners.math.groups import launch_math_groups
        from rlinf.runners.math.loop import total_training_steps
        from rlinf.workers.rollout.agent_worker import AgentRolloutWorker

        cfg = start.cfg
        total = total_training_steps(cfg, start.train.batches_per_epoch)
        return launch_math_groups(cfg, cluster, plan, total, AgentRolloutWorker,
                                  (cfg.agentloop, dict(cfg.tools), cfg.response_budget))

    def runner_class(self) -> type:
        # lazy: the tool-agent loop imports the math loop and transformers (~10 s); only a launched run needs it
        from rlinf.runners.tool_agent.loop import ToolAgentRunner

        return ToolAgentRunner


#: the tool-agent recipe (stateless)
TOOL_AGENT_RECIPE = ToolAgentRecipe()


def run_tool_agent(raw: Any, print_fn: Callable = print) -> dict[str, float]:
    """Run the tool-agent job described by ``raw`` (a Hydra ``DictConfig`` or a plain dict)."""
    return run_recipe(TOOL_AGENT_RECIPE, raw, print_fn)
