"""What ``cluster.backend: local`` refuses before anything starts (read by the config's
validation and by the preflight, so it imports nothing of the local runtime).

Example:
    >>> from types import SimpleNamespace
    >>> check_local_config(SimpleNamespace(num_nodes=2))
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: cluster.num_nodes: 2, but local mode (cluster.backend: local) runs on this machine only: set cluster.num_nodes: 1
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

from typing import Any

from rlinf.utils.typed_config import ConfigError


def check_local_config(cfg: Any) -> None:
    """What local mode refuses before anything starts: more than one node."""
    if cfg.num_nodes != 1:
        raise ConfigError("cluster.num_nodes", f"{cfg.num_nodes}, but local mode (cluster.backend: local) "
                                               "runs on this machine only: set cluster.num_nodes: 1")


def check_local_plan(cfg: Any, plan: Any) -> None:
    """Every group must be one process in local mode.

    Raises:
        ConfigError: naming ``cluster.component_placement.<component>`` and what would fit.
    """
    everything = ",".join(plan.components)
    for name, component in plan.components.items():
        if component.world_size != 1:
            raise ConfigError(f"cluster.component_placement.{name}",
                              f"local mode runs one process per group; {name} is placed on "
                              f"{component.world_size} processes: place it on one accelerator, e.g. "
                              f"`{everything}: 0` with cluster.accelerators_per_node: 1")
