"""The tool-agent recipe's checks before Ray are the math recipe's
(:func:`~rlinf.runners.math.preflight.prepare_math` with
:class:`~rlinf.config.agent.ToolAgentConfig`) plus every tool built and checked
(:mod:`rlinf.runners.tool_agent.recipe`); what its tiny configs read is listed here.

Example:
    >>> TOOL_AGENT_ASSETS[0].command_for(None, "results/tiny_tool/warm")
    'python -m toolkits.tool_agent.prepare --out results/tiny_tool'
"""

from __future__ import annotations

from rlinf.runners.preflight import Asset

_TINY_TOOL = "python -m toolkits.tool_agent.prepare --out {parent}"
#: what the tiny tool-agent configs read and the command that makes it (it trains the warm start:
#: minutes, so a run that misses it stops with the command instead of making it)
TOOL_AGENT_ASSETS = tuple(Asset(key, "results/tiny_tool/warm", _TINY_TOOL, "it trains a 1600-step warm start: minutes")
                          for key in ("actor.model.model_path", "rollout.model.model_path"))
