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
    rlinf.utils.typed_config.ConfigError: cluster.component_placment: unknown key; allowed keys are accelerator_memory_gib, accelerators_per_node, allow_unauthenticated_ray, backend, component_placement, memory_check, node_groups, num_nodes
    >>> local = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 2,
    ...                                  "component_placement": {"actor,rollout": "all"}})
    >>> [(c.world_size, c.processes[0].accelerators) for c in local.plan().components.values()]
    [(1, (0, 1)), (1, (0, 1))]
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rlinf.scheduler.local.checks import check_local_config, check_local_plan
from rlinf.scheduler.placement import ClusterShape, PlacementPlan, parse_cluster_shape, plan_placement
from rlinf.scheduler.placement.fold import fold_to_one_process
from rlinf.utils.typed_config import ConfigError, check, parse_section

__all__ = ["ClusterConfig", "ConfigError"]


@dataclass(frozen=True)
class ClusterConfig:
    """``cluster:`` — where every component runs.

    Attributes:
        component_placement: component names -> placement values (see docs/placement_grammar.md).
        num_nodes: nodes the job uses (``cluster.num_nodes``).
        accelerators_per_node: our key. On GPU nodes ``None`` means "what each node has"; on a
            CPU-only cluster it is the number of logical accelerator slots per node (default 1).
        node_groups: labelled node groups for heterogeneous clusters (list of
            ``{label, node_ranks, accelerators_per_node}``).
        backend: our key. ``ray`` (default): one process per placed rank on a Ray cluster.
            ``local``: for debugging without Ray: every worker group runs inside the driver
            process (one worker per group, on its own thread; channels, tensor links and pipes in
            memory), so a breakpoint in a worker method fires under ``python -m pdb``. Needs one
            node (``num_nodes: 1``). A group placed on several processes is folded to one that
            holds all their accelerators, so groups placed apart stay apart (said in one line at
            start; :mod:`rlinf.scheduler.placement.fold`).
        memory_check: our key. Before Ray starts, every run estimates each role's memory per rank
            (weights, gradients, optimizer state, activations, log-softmax over the vocabulary, KV
            cache, simulators; docs/memory.md) and sums it per accelerator and per node.
            ``warn`` (default): prints the estimate and a warning for a device it exceeds; ``error``:
            refuses such a plan before Ray starts, naming the role and the keys that would bring it
            under; ``off`` (or ``false``: YAML 1.1 and OmegaConf read a bare ``off`` so): neither estimates nor prints.
        accelerator_memory_gib: our key. Memory of one accelerator in GiB for that check; null =
            what ``torch.cuda`` reports on the driver's node (no GPU there: the run is planned on
            CPU, against the node's RAM shared by its ranks).
        allow_unauthenticated_ray: our key (default false). A run attached to a Ray cluster
            (``RAY_ADDRESS``) without Ray's token authentication (``RAY_AUTH_MODE`` is not
            ``token``) says so in its one-line cluster origin; one that would use several nodes
            so (``num_nodes > 1``) is refused before Ray starts unless this is true. Only for a
            network only you can reach (docs/security.md); refused where it cannot matter
            (``backend: local``, ``num_nodes: 1``).
    """

    component_placement: dict[str, Any]
    num_nodes: int = 1
    accelerators_per_node: int | None = None
    node_groups: tuple[dict[str, Any], ...] = ()
    backend: Literal["ray", "local"] = "ray"
    memory_check: Literal["warn", "error", "off", False] = "warn"
    accelerator_memory_gib: float | None = None
    allow_unauthenticated_ray: bool = False

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], key: str = "cluster") -> ClusterConfig:
        """Validate the ``cluster:`` mapping; unknown keys and bad values raise :class:`ConfigError`."""
        return parse_section(cls, raw, key)

    def validate(self, path: str) -> None:
        """Cross-field checks, run once by :func:`parse_section`."""
        check(self.num_nodes >= 1, f"{path}.num_nodes", f"expected an int >= 1, got {self.num_nodes}")
        check(self.accelerators_per_node is None or self.accelerators_per_node >= 0,
              f"{path}.accelerators_per_node",
              f"expected an int >= 0 or null, got {self.accelerators_per_node}")
        check(self.accelerator_memory_gib is None or self.accelerator_memory_gib > 0,
              f"{path}.accelerator_memory_gib", f"must be > 0 or null, got {self.accelerator_memory_gib}")
        check(bool(self.component_placement), f"{path}.component_placement",
              "empty; place at least one component, e.g. {actor,rollout: all}")
        check(not self.allow_unauthenticated_ray or (self.backend == "ray" and self.num_nodes > 1),
              f"{path}.allow_unauthenticated_ray",
              "true has no effect here: it only lets a run of several nodes (num_nodes > 1) attach to a "
              "Ray cluster without token authentication (backend: local starts no Ray; one node attaches "
              "either way and says so); remove it")
        if self.backend == "local":
            check_local_config(self)
        if self.accelerators_per_node is not None:
            plan = self.plan()  # the cluster shape is fully known: check the placement now
            if self.backend == "local":
                check_local_plan(self, plan)

    def shape(self, accelerators_per_node: int | None = None) -> ClusterShape:
        """The shape this config declares (``accelerators_per_node`` fills in a ``null`` count)."""
        raw = {"num_nodes": self.num_nodes, "node_groups": list(self.node_groups) or None,
               "accelerators_per_node": self.accelerators_per_node}
        return parse_cluster_shape(raw, accelerators_per_node=(
            accelerators_per_node if self.accelerators_per_node is None else None))

    def plan(self, shape: ClusterShape | None = None) -> PlacementPlan:
        """Plan the placement on ``shape`` (default: :meth:`shape`). ``backend: local``: each
        group folded to one process on the accelerators its processes had
        (:func:`~rlinf.scheduler.placement.fold.fold_to_one_process`)."""
        plan = plan_placement(self.component_placement, shape or self.shape())
        return fold_to_one_process(plan) if self.backend == "local" else plan
