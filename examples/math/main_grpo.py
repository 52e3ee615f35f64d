"""Math RL with GRPO (and PPO-style variants): the Hydra entry point of the math recipe.

    python examples/math/main_grpo.py                                  # tiny CPU default
    python examples/math/main_grpo.py cluster.backend=local            # the same in this process, no Ray
    python examples/math/main_grpo.py --config-name grpo_tiny_disaggregated runner.max_steps=5
    python examples/math/main_grpo.py --config-name qwen2.5-1.5b-grpo-fsdp actor.model.model_path=...
    python examples/math/main_grpo.py -cd my_configs -cn my_grpo       # a config of your own

Run from the repository root (paths in the configs are relative to it). The tiny configs' model,
``results/tiny_math/warm``, is made on first use (a copy of the shipped warm start, by
``python -m toolkits.tiny_math.prepare``; one line says so). Everything happens in
:func:`rlinf.runners.recipe.run_recipe` with :data:`rlinf.runners.math.recipe.MATH_RECIPE`; config
errors name the key and stop before any worker starts.
"""

import os
import sys

import hydra

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from rlinf.config.resolvers import register_resolvers

register_resolvers()
# model loading bars from every worker would bury the step progress bar
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@hydra.main(version_base="1.3", config_path="config", config_name="grpo_tiny_cpu")
def main(cfg) -> None:
    from rlinf.runners.entry import run_entry
    from rlinf.runners.math.recipe import MATH_RECIPE

    run_entry(MATH_RECIPE, cfg)


if __name__ == "__main__":
    from rlinf.runners.compose import precheck_config_files

    precheck_config_files(__file__, "grpo_tiny_cpu")
    main()
