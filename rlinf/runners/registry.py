"""Every recipe, found by its folder, and the one lookup from a raw config to its recipe.

A recipe is a :class:`~rlinf.runners.recipe.Recipe` instance defined at module level in
``rlinf/runners/<folder>/recipe.py``; :func:`all_recipes` imports each folder's ``recipe.py`` (by
the folder convention, so this shared module names no recipe) and collects them. A new recipe is
a new folder: nothing here changes.

:func:`recipe_for` asks every recipe whether a raw config is its own (:meth:`Recipe.claims`):
``runner.task_type`` names the recipe (the embodied family tells its on-policy and off-policy
recipes apart by ``algorithm.loss_type`` / ``adv_type``, RLinf's switch), the web-agent recipe
recognises WebGym's layout by its sections. A config without ``runner.task_type`` that no recipe
claims is the default task type's (:class:`~rlinf.config.runner.RunnerConfig`'s default).
Exactly one recipe must claim a config; otherwise it is one
:class:`~rlinf.utils.typed_config.ConfigError` on ``runner.task_type``.

Example:
    >>> recipe_for({"runner": {"task_type": "embodied"}, "algorithm": {"loss_type": "embodied_sac"}}).name
    'embodied_offpolicy'
    >>> recipe_for({"env_config": {}, "policy_config": {}}).name
    'web_agent'
    >>> recipe_for({"runner": {}}).name     # no task_type: RunnerConfig's default
    'math'
    >>> recipe_for({"runner": {"task_type": "chess"}})
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: runner.task_type: 'chess' names no recipe; expected one of embodied, math, tool_agent, or WebGym's layout (sections env_config / policy_config)
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Mapping
from functools import cache
from typing import Any

from omegaconf import OmegaConf

import rlinf.runners as package
from rlinf.config.runner import RunnerConfig
from rlinf.runners.recipe import Recipe, task_type_of
from rlinf.utils.typed_config import ConfigError

__all__ = ["all_recipes", "recipe_for", "recipe_of_config"]


@cache
def all_recipes() -> tuple[Recipe, ...]:
    """Every recipe instance of ``rlinf/runners/<folder>/recipe.py``, in folder order (an
    instance a module merely imports from another recipe counts once, where it is defined)."""
    found: list[Recipe] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        name = f"{package.__name__}.{info.name}.recipe"
        if not info.ispkg or importlib.util.find_spec(name) is None:
            continue
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, Recipe) and type(value).__module__ == name and value not in found:
                found.append(value)
    return tuple(found)


def _plain(raw: Any) -> Mapping:
    """A Hydra ``DictConfig`` as a plain mapping (unresolved values stay as written)."""
    if isinstance(raw, Mapping):
        return raw
    return OmegaConf.to_container(raw, resolve=False)


def recipe_for(raw: Any) -> Recipe:
    """The recipe a raw config (a mapping or Hydra ``DictConfig``, before parsing) asks for (see
    the module docstring); :class:`ConfigError` on ``runner.task_type`` when none or several claim it."""
    raw = _plain(raw)
    recipes = all_recipes()
    claiming = [r for r in recipes if r.claims(raw)]
    if len(claiming) == 1:
        return claiming[0]
    given = task_type_of(raw)
    if len(claiming) > 1:
        names = ", ".join(r.name for r in claiming)
        raise ConfigError("runner.task_type", f"{given!r} is claimed by several recipes ({names}); "
                                              "a config belongs to one")
    if given is None:  # the default task type's recipe (asked again, so its own rules still apply)
        runner = raw.get("runner")
        runner = {**(runner if isinstance(runner, Mapping) else {}), "task_type": RunnerConfig().task_type}
        default = [r for r in recipes if r.claims({**raw, "runner": runner})]
        if len(default) == 1:
            return default[0]
    types = ", ".join(sorted({r.task_type for r in recipes if r.task_type}))
    layouts = "".join(f", or {r.layout_hint}" for r in recipes if r.layout_hint)
    raise ConfigError("runner.task_type", f"{given!r} names no recipe; expected one of {types}{layouts}")


def recipe_of_config(cfg: Any) -> Recipe:
    """The recipe whose root config class ``cfg`` is an instance of (the most derived match)."""
    matches = [r for r in all_recipes() if isinstance(cfg, r.config_cls)]
    if not matches:
        raise TypeError(f"no recipe parses into {type(cfg).__name__}")
    return max(matches, key=lambda r: len(r.config_cls.__mro__))
