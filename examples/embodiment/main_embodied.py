"""Embodied RL (PPO / GRPO, or SAC / CrossQ / RLPD off-policy, on simulators): the Hydra entry point.

    python examples/embodiment/main_embodied.py --config-name maniskill_ppo_mlp_cpu
    python examples/embodiment/main_embodied.py --config-name toy_ppo_mlp runner.max_steps=5
    python examples/embodiment/main_embodied.py --config-name maniskill_sac_mlp_cpu
    python examples/embodiment/main_embodied.py cluster.backend=local    # the same in this process, no Ray

Run from the repository root. The tiny configs' random-weight VLA / π0 folders and RLPD's
demonstrations are made on first use (``toolkits.embodied.make_tiny_vla`` / ``make_demos``; one
line says so). Shared env groups come from ``config/env/`` through
``hydra.searchpath`` (``REPO_PATH`` is set to this checkout when unset). Everything happens in
:func:`rlinf.runners.recipe.run_recipe` with
:data:`rlinf.runners.embodied.recipe.EMBODIED_RECIPE`; config errors name the key and stop before any
worker starts.
"""

import os
import sys

import hydra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
os.environ.setdefault("REPO_PATH", ROOT)
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from rlinf.config.resolvers import register_resolvers  # noqa: E402

register_resolvers()


@hydra.main(version_base="1.3", config_path="config", config_name="toy_ppo_mlp")
def main(cfg) -> None:
    from rlinf.runners.embodied_offpolicy.recipe import embodied_recipe_for
    from rlinf.runners.entry import run_entry

    run_entry(embodied_recipe_for(cfg), cfg)  # algorithm.loss_type embodied_sac: SAC / CrossQ / RLPD


if __name__ == "__main__":
    from rlinf.runners.compose import precheck_config_files

    precheck_config_files(__file__, "toy_ppo_mlp")
    main()
