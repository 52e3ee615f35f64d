"""Vision-language RL (GRPO) on the math run layer: prompts with images (``data.image_key``), a
Qwen2.5-VL / Qwen3-VL actor, reference and HF rollout (docs/vlm.md).

    python examples/vlm/main.py                                        # tiny CPU default
    python examples/vlm/main.py cluster.backend=local                  # the same in this process, no Ray

Run from the repository root. The tiny config's model and data, ``results/tiny_vlm``, are made on
first use by ``python -m toolkits.vlm.prepare --out results/tiny_vlm`` (one line says so). The
run is :func:`rlinf.runners.recipe.run_recipe` with :data:`rlinf.runners.math.recipe.MATH_RECIPE`.
"""

import os
import sys

import hydra

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from rlinf.config.resolvers import register_resolvers

register_resolvers()
# model loading bars from every worker would bury the step progress bar
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@hydra.main(version_base="1.3", config_path="config", config_name="vlm_grpo_tiny_cpu")
def main(cfg) -> None:
    from rlinf.runners.entry import run_entry
    from rlinf.runners.math.recipe import MATH_RECIPE

    run_entry(MATH_RECIPE, cfg)


if __name__ == "__main__":
    from rlinf.runners.compose import precheck_config_files

    precheck_config_files(__file__, "vlm_grpo_tiny_cpu")
    main()
