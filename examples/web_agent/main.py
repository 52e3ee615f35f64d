"""Web-agent RL on the shipped sites (WebGym's seeds 000 / 004): the Hydra entry point.

    python -m toolkits.web_tasks.prepare --out results/tiny_web         # once: the tiny policy (minutes)
    python examples/web_agent/main.py                                   # tiny CPU online loop
    python examples/web_agent/main.py cluster.backend=local             # the same in this process, no Ray
    python examples/web_agent/main.py --config-name rollout_train       # one train rollout (seed 004)
    python examples/web_agent/main.py --config-name rollout_test policy_config.base_model=...

Run from the repository root (paths in the configs are relative to it); without the tiny policy
a run stops with one line naming the prepare command. Everything happens in
:func:`rlinf.runners.recipe.run_recipe` with
:data:`rlinf.runners.web_agent.recipe.WEB_RECIPE`; config errors name the key and stop before any
worker starts.
"""

import os
import sys

import hydra

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from rlinf.config.resolvers import register_resolvers

register_resolvers()
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@hydra.main(version_base="1.3", config_path="config", config_name="web_agent_tiny_cpu")
def main(cfg) -> None:
    from rlinf.runners.entry import run_entry
    from rlinf.runners.web_agent.recipe import WEB_RECIPE

    run_entry(WEB_RECIPE, cfg)


if __name__ == "__main__":
    from rlinf.runners.compose import precheck_config_files

    precheck_config_files(__file__, "web_agent_tiny_cpu")
    main()
