"""The typed ``cluster:`` section of a config, parsed once at start.

Example:
    >>> cfg = ClusterConfig.from_dict({
    ...     "num_nodes": 1, "accelerators_per_node": 4,
    ...     "component_placement": {"env": "0-1", "rollout": "2-3", "actor": "all"}})
    >>> plan = cfg.plan()
    >>> plan.mode("env", "rollout").value, plan.mode("actor", "rollout").value
    ('disaggregated', 'hybrid')
    >>> ClusterConfig.from_dict({"num_nodes": 1, "component_placment": {}})
    Traceback (most recent call last):
    ...
    rlinf.scheduler.config.ConfigError: cluster.component_placment: unknown key; allowed keys are accelerators_per_node, component_placement, node_groups, num_nodes
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from rlinf.scheduler.placement import ClusterShape, PlacementPlan, parse_cluster_shape, plan_placement


class ConfigError(ValueError):
    """A config key is unknown, missing or has a bad value; the message starts with the key path."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


@dataclass(frozen=True)
class ClusterConfig:
    """``cluster:`` — where every component runs.

    Attributes:
        num_nodes: nodes the job uses (``cluster.num_nodes``).
        component_placement: component names -> placement values (see docs/placement_grammar.md).
        accelerators_per_node: our key. On GPU nodes ``None`` means "what each node has"; on a
            CPU-only cluster it is the number of logical accelerator slots per node (default 1).
        node_groups: labelled node groups for heterogeneous clusters (list of
            ``{label, node_ranks, accelerators_per_node}``).
    """

    num_nodes: int
    component_placement: Mapping[str, Any]
    accelerators_per_node: int | None = None
    node_groups: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)

    _KEYS = ("num_nodes", "component_placement", "accelerators_per_node", "node_groups")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], key: str = "cluster") -> "ClusterConfig":
        """Validate the ``cluster:`` mapping; unknown keys and bad values raise :class:`ConfigError`."""
        if not isinstance(raw, Mapping):
            raise ConfigError(key, f"expected a mapping, got {type(raw).__name__}")
        for k in raw:
            if k not in cls._KEYS:
                raise ConfigError(f"{key}.{k}", "unknown key; allowed keys are " + ", ".join(sorted(cls._KEYS)))
        if "component_placement" not in raw or raw["component_placement"] is None:
            raise ConfigError(f"{key}.component_placement", "missing; e.g. {actor,rollout: all}")
        if not isinstance(raw["component_placement"], Mapping):
            raise ConfigError(f"{key}.component_placement", "expected a mapping of component names to placements")
        num_nodes = raw.get("num_nodes", 1)
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
            raise ConfigError(f"{key}.num_nodes", f"expected an int >= 1, got {num_nodes!r}")
        apn = raw.get("accelerators_per_node")
        if apn is not None and (isinstance(apn, bool) or not isinstance(apn, int) or apn < 0):
            raise ConfigError(f"{key}.accelerators_per_node", f"expected an int >= 0 or null, got {apn!r}")
        cfg = cls(
            num_nodes=num_nodes,
            component_placement=dict(raw["component_placement"]),
            accelerators_per_node=apn,
            node_groups=tuple(raw.get("node_groups") or ()),
        )
        if apn is not None:
            cfg.plan()  # the cluster shape is fully known: check the placement now
        return cfg

    def shape(self, accelerators_per_node: int | None = None) -> ClusterShape:
        """The shape this config declares (``accelerators_per_node`` fills in a ``null`` count)."""
        raw = {"num_nodes": self.num_nodes, "node_groups": list(self.node_groups) or None,
               "accelerators_per_node": self.accelerators_per_node}
        return parse_cluster_shape(raw, accelerators_per_node=(
            accelerators_per_node if self.accelerators_per_node is None else None))

    def plan(self, shape: ClusterShape | None = None) -> PlacementPlan:
        """Plan the placement on ``shape`` (default: :meth:`shape`)."""
        return plan_placement(self.component_placement, shape or self.shape())
