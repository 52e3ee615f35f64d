"""What the planner CLI reads: the config (composed as the Hydra entries compose it), its recipe and
step, the profile, and the cluster to plan for.

* The config file is checked with the entries' strict reader (a duplicate key or a tab is one line
  naming the file and line), then composed with Hydra when it has a ``defaults:`` list (the
  shared ``config/`` folder found through ``REPO_PATH``, as the entries find it), resolved, and
  parsed into its recipe's typed config (data and model paths not checked: nothing runs).
* The profile is read with the placement CLI's strict loader (plain decimal ints, no duplicate
  keys) and parsed by :func:`~rlinf.scheduler.autoplace.parse_profile`.
* The cluster: ``--nodes`` / ``--accelerators-per-node`` win over the profile's ``nodes`` /
  ``accelerators_per_node``, which win over the config's ``cluster:``; ``node_groups`` come from
  the config. ``samples_per_step``: the profile's, else the config's batch (the recipe's
  workflow says it).

Example:
    >>> import os, rlinf
    >>> repo = os.path.dirname(os.path.dirname(rlinf.__file__))
    >>> run = load_run(os.path.join(repo, "examples/math/config/grpo_tiny_disaggregated.yaml"))
    >>> run.recipe.name, run.raw["cluster"]["component_placement"]
    ('math', {'actor': '0-1', 'rollout,reward': 2})
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from rlinf.config.root import resolve_hydra
from rlinf.config.yaml_check import ConfigFileError, check_config_files
from rlinf.runners.compose import REPO_ROOT
from rlinf.runners.registry import recipe_for
from rlinf.scheduler.autoplace import Profile, Workflow, parse_profile
from rlinf.scheduler.placement import ClusterShape
from rlinf.scheduler.placement.__main__ import CliError, load_yaml
from rlinf.scheduler.placement.shape import parse_cluster_shape
from rlinf.utils.typed_config import ConfigError

__all__ = ["Cluster", "LoadedRun", "load_run", "planning_profile", "read_profile", "resolve_cluster"]


@dataclass
class LoadedRun:
    """A config file ready to plan.

    Attributes:
        path: the file.
        raw: the composed, resolved config (a plain dict).
        written: the composed config as its files write it (interpolations kept), for ``--out``.
        hydra: the ``hydra:`` settings and hydra-only defaults the composed file keeps (``--out``).
        recipe: the recipe that runs it.
        cfg: the typed root config.
        workflow: the recipe's step (:meth:`~rlinf.runners.recipe.Recipe.placement_workflow`).
    """

    path: str
    raw: dict
    written: dict
    hydra: dict
    recipe: Any
    cfg: Any
    workflow: Workflow


def _compose(path: str) -> tuple[Any, dict]:
    """``(DictConfig without its hydra node, hydra_settings)`` of the file, composed by Hydra as an
    entry composes it (a file without ``defaults:`` composes to itself)."""
    # lazy: Hydra / OmegaConf (~0.3-2 s) only once a config file is read, not for --help
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    folder, name = os.path.split(os.path.abspath(path))
    stem, ext = os.path.splitext(name)
    if not os.path.isfile(path):
        raise CliError(f"cannot read {path}: no such file")
    if ext != ".yaml":
        raise CliError(f"{path}: a config file ends in .yaml (Hydra finds it by that name)")
    try:
        check_config_files(folder, stem, [os.path.join(REPO_ROOT, "config")])
    except ConfigFileError as exc:
        raise CliError(f"config {exc}") from None
    os.environ.setdefault("REPO_PATH", REPO_ROOT)  # the shared config/ folder (hydra.searchpath)
    try:
        with initialize_config_dir(folder, version_base="1.3"):
            cfg = compose(stem, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as exc:
        text = " ".join(str(exc).split()).split(" Config search path:")[0]
        raise CliError(f"{path}: cannot compose: {text}") from None
    hydra = _hydra_settings(cfg)
    OmegaConf.set_struct(cfg, False)
    del cfg["hydra"]
    return cfg, hydra


def _hydra_settings(cfg) -> dict:
    """What a self-contained copy keeps of Hydra's own settings: where a run writes (``run.dir``,
    ``output_subdir``) and the job logging it chose."""
    # lazy: OmegaConf is loaded by the caller's compose already
    from omegaconf import OmegaConf

    hydra = cfg.hydra
    out: dict[str, Any] = {}
    logging = hydra.runtime.choices.get("hydra/job_logging")
    if logging and logging != "default":
        out["defaults"] = [{"override hydra/job_logging": logging}, "_self_"]
    out["hydra"] = {"run": {"dir": OmegaConf.to_container(hydra.run, resolve=False)["dir"]},
                    "output_subdir": hydra.output_subdir}
    return out


def load_run(path: str, workflow: Workflow | None = None) -> LoadedRun:
    """Compose, resolve and parse the config file at ``path`` and ask its recipe for its step
    (``workflow`` given: that step instead, e.g. one written by hand for a recipe without the hook).

    Raises:
        CliError: the file cannot be read, composed, or its recipe does not plan its kind of run.
        ConfigError: a key of the config is invalid (the message names it).
    """
    # lazy: OmegaConf is loaded by _compose already
    from omegaconf import OmegaConf

    cfg, hydra = _compose(path)
    written = OmegaConf.to_container(cfg, resolve=False)
    raw = resolve_hydra(cfg)
    recipe = recipe_for(raw)
    typed = recipe.config_cls.from_dict(raw, check_paths=False)
    if workflow is None:
        workflow = recipe.placement_workflow(typed)
    if workflow is None:
        raise CliError(f"the planner does not plan {recipe.name} runs ({path})")
    return LoadedRun(path, raw, written, hydra, recipe, typed, workflow)


def read_profile(path: str) -> Profile:
    """The profile file at ``path`` (strict YAML, then :func:`parse_profile`)."""
    return parse_profile(load_yaml(path), source=path)


@dataclass(frozen=True)
class Cluster:
    """The cluster the planner plans for, and where each figure came from (for the output)."""

    shape: ClusterShape
    nodes_from: str
    accelerators_from: str


def _pick(flag: int | str | None, flag_name: str, figure: int | None, profile_name: str,
          config: dict, key: str) -> tuple[int | str | None, str, str]:
    if flag is not None:
        return flag, flag_name, flag_name
    if figure is not None:
        return figure, profile_name, "profile"
    return None, "", "config" if config.get(key) is not None else "default"


def resolve_cluster(run: LoadedRun, profile: Profile, nodes: int | str | None,
                    accelerators_per_node: int | str | None) -> Cluster:
    """The cluster shape: flags > profile > config (see the module docstring)."""
    cluster = run.raw.get("cluster") or {}
    n, n_name, n_from = _pick(nodes, "--nodes", profile.nodes, "profile.nodes", cluster, "num_nodes")
    a, a_name, a_from = _pick(accelerators_per_node, "--accelerators-per-node", profile.accelerators_per_node,
                              "profile.accelerators_per_node", cluster, "accelerators_per_node")
    names = {k: v for k, v in (("num_nodes", n_name), ("accelerators_per_node", a_name)) if v}
    shape = parse_cluster_shape(cluster, num_nodes=n, accelerators_per_node=a, override_names=names)
    return Cluster(shape, n_from, a_from)


def planning_profile(profile: Profile, workflow: Workflow) -> tuple[Profile, str]:
    """The profile with its ``samples_per_step`` filled in (the profile's, else the config's batch)
    and where that figure came from."""
    if profile.samples_per_step is not None:
        return profile, "profile"
    if workflow.samples_per_step is None:
        raise ConfigError("profile.samples_per_step", "missing, and the config gives no batch size to "
                          "default to; give the samples of one step")
    return dataclasses.replace(profile, samples_per_step=workflow.samples_per_step), "config"
