"""``python -m rlinf.scheduler.placement CONFIG --memory``: the estimate of a config file, from
the recipe the file names (:func:`~rlinf.runners.registry.recipe_for`) and its hook
(:meth:`~rlinf.runners.recipe.Recipe.memory_estimate`), summed on the placement by the scheduler.

The scheduler imports this module by the name in :data:`rlinf.scheduler.memory.ESTIMATOR_MODULES`,
only when ``--memory`` is asked for; it registers :func:`estimate_file` there. The file is read
whole (Hydra-composed when it has ``defaults:``), data paths not checked, no simulator started
except where a recipe needs one's shape (the off-policy replay buffer: its state size).

Usage (the placement map with the estimate, no run)::

    python -m rlinf.scheduler.placement examples/math/config/grpo_tiny_cpu.yaml --memory
    python -m rlinf.runners.memory_plan examples/math/config/qwen2.5-1.5b-grpo-fsdp.yaml --device-memory-gib 80

Example:
    >>> import os, rlinf
    >>> repo = os.path.dirname(os.path.dirname(rlinf.__file__))
    >>> cfg, raw, recipe = load_config(os.path.join(repo, "examples/embodiment/config/toy_ppo_mlp.yaml"))
    >>> recipe.name, type(cfg).__name__, sorted(raw["cluster"]["component_placement"])
    ('embodied', 'EmbodiedConfig', ['actor', 'env', 'rollout'])
"""

from __future__ import annotations

import os
import sys
from typing import Any

import yaml

from rlinf.config.root import resolve_hydra
from rlinf.runners.memory_check import estimate
from rlinf.runners.registry import recipe_for
from rlinf.scheduler.memory import register_file_estimator
from rlinf.utils.typed_config import ConfigError


def load_config(path: str) -> tuple[Any, dict, Any]:
    """The typed root config of a YAML file (Hydra-composed when it has ``defaults:``, data paths
    not checked), the resolved raw tree and the recipe it names
    (:func:`~rlinf.runners.registry.recipe_for`)."""
    with open(path, encoding="utf-8") as f:
        raw = yaml.safe_load(f)
    if isinstance(raw, dict) and "defaults" in raw:
        from hydra import compose, initialize_config_dir  # lazy: Hydra (~0.3 s) only for a file with defaults

        os.environ.setdefault("REPO_PATH", os.getcwd())
        with initialize_config_dir(os.path.dirname(os.path.abspath(path)), version_base="1.3"):
            raw = resolve_hydra(compose(os.path.splitext(os.path.basename(path))[0]))
    if not isinstance(raw, dict):
        raise ConfigError("", f"{path}: not a YAML mapping")
    recipe = recipe_for(raw)
    return recipe.config_cls.from_dict(raw, check_paths=False), raw, recipe


@register_file_estimator
def estimate_file(path: str):
    """The placement CLI's ``--memory``: the config's raw ``cluster:`` mapping and a function
    ``(plan, capacity) -> MemoryEstimate`` for it, from the recipe the file names."""
    cfg, raw, recipe = load_config(path)
    return raw["cluster"], lambda plan, capacity: estimate(recipe, cfg, plan, capacity)


def main(argv: list[str] | None = None) -> int:
    """``python -m rlinf.runners.memory_plan CONFIG [--device-memory-gib G]``: the estimate with
    the placement map (as ``python -m rlinf.scheduler.placement CONFIG --memory``)."""
    # lazy: placement --memory imports this module; at the top, placement's __main__ would load twice
    from rlinf.scheduler.placement.__main__ import main as placement_main

    return placement_main([*(argv if argv is not None else sys.argv[1:]), "--memory"])


if __name__ == "__main__":
    sys.exit(main())
