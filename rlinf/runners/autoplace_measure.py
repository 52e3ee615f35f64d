"""Measuring a placement profile on purpose (issue 46): ``python -m toolkits.autoplace CONFIG
--measure-steps K`` runs K training steps of the config as placed, with no validation during them,
no checkpoints, export or curves, and writes the profile the run's end measures
(:func:`rlinf.runners.autoplace_profile.advise`, which says what the figures are).

Example (from the repository root; a real run of a few steps)::

    from rlinf.runners.autoplace_measure import measure_profile
    measure_profile(recipe, raw_config, 3, "profile.yaml", config="my_config.yaml")   # doctest: +SKIP
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from typing import Any

from rlinf.runners.recipe import run_recipe

__all__ = ["measure_overrides", "measure_profile"]


def measure_overrides(steps: int) -> dict[str, object]:
    """The ``runner.*`` keys a measuring run sets: ``steps`` steps, no validation during them, no
    checkpoints, export or curves, no recovery (a failure fails the way a run does)."""
    return {"runner.max_steps": steps, "runner.max_epochs": steps, "runner.val_check_interval": -1,
            "runner.save_interval": -1, "runner.save_interval_secs": None, "runner.max_minutes": None,
            "runner.export_hf": False, "runner.plot_curves": False, "runner.only_eval": False,
            "runner.resume_dir": None, "runner.recover_mode": "disabled"}


def measure_profile(recipe: Any, raw: Mapping, steps: int, out: str, config: str = "CONFIG",
                    print_fn: Callable = print) -> str:
    """Run ``steps`` training steps of ``raw`` (a plain config tree of ``recipe``) as placed, with
    :func:`measure_overrides`, and write the measured profile to ``out``; returns ``out``.
    A config that cannot start raises what its run raises (a ConfigError naming the key, a
    SchedulerError for a worker that failed).

    Raises:
        ValueError: ``steps`` < 1, or the run measured nothing (the advice's note says why).
    """
    if steps < 1:
        raise ValueError(f"--measure-steps must be >= 1, got {steps}")
    tree = copy.deepcopy(dict(raw))
    for key, value in measure_overrides(steps).items():
        section, name = key.split(".")
        if not isinstance(tree.get(section), dict):
            tree[section] = {}
        tree[section][name] = value
    if os.path.exists(out):
        os.remove(out)
    run_recipe(recipe, tree, print_fn, profile_path=out, config=config)
    if not os.path.isfile(out):
        raise ValueError(f"{config}: the run measured no profile (see its last note)")
    return out
