"""Tool-agent RL (multi-turn, the model calls tools between turns): the Hydra entry point of the
tool-agent recipe.

    python -m toolkits.tool_agent.prepare --out results/tiny_tool        # once: the tiny model (minutes)
    python examples/tool_agent/main.py                                   # tiny CPU default: calculator
    python examples/tool_agent/main.py cluster.backend=local             # the same in this process, no Ray
    python examples/tool_agent/main.py --config-name calc_tiny_disaggregated
    python examples/tool_agent/main.py --config-name searchr1-qwen2.5-3b actor.model.model_path=...

Run from the repository root (paths in the configs are relative to it); without the tiny model
a run stops with one line naming the prepare command. Everything happens in
:func:`rlinf.runners.recipe.run_recipe` with
:data:`rlinf.runners.tool_agent.recipe.TOOL_AGENT_RECIPE`; config errors (an unknown tool, a missing
corpus, ``agentloop.max_turns < 1``) name the key and stop before any worker starts.
"""

import os
import sys

import hydra

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from rlinf.config.resolvers import register_resolvers

register_resolvers()
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@hydra.main(version_base="1.3", config_path="config", config_name="calc_tiny_cpu")
def main(cfg) -> None:
    from rlinf.runners.entry import run_entry
    from rlinf.runners.tool_agent.recipe import TOOL_AGENT_RECIPE

    run_entry(TOOL_AGENT_RECIPE, cfg)


if __name__ == "__main__":
    from rlinf.runners.compose import precheck_config_files

    precheck_config_files(__file__, "calc_tiny_cpu")
    main()
