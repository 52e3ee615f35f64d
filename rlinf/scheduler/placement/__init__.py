"""Placement: which process of which component runs on which node and accelerators.

``cluster.component_placement`` maps component names to placement values (see
``docs/placement_grammar.md``); :func:`plan_placement` turns it into a :class:`PlacementPlan` for a
:class:`ClusterShape` (from :func:`parse_cluster_shape`). Pure Python: no Ray, no torch.

Example: on 2 nodes x 8, actor and rollout share every accelerator, and the reward model runs two
processes on each of the last two accelerators of node 1:

>>> from rlinf.scheduler.placement import parse_cluster_shape, plan_placement
>>> cluster = parse_cluster_shape({"num_nodes": 2, "accelerators_per_node": 8})
>>> plan = plan_placement({"actor,rollout": "all", "reward": "14-15:0-3"}, cluster)
>>> [(p.rank, p.node, p.accelerators, p.local_rank) for p in plan.component("reward").processes]
[(0, 1, (6,), 0), (1, 1, (6,), 1), (2, 1, (7,), 2), (3, 1, (7,), 3)]
>>> plan.mode("actor", "rollout").value, plan.mode("rollout", "reward").value
('collocated', 'hybrid')
"""

from rlinf.scheduler.placement.builder import plan_placement
from rlinf.scheduler.placement.grammar import PlacementError
from rlinf.scheduler.placement.plan import (
    ClusterShape,
    ComponentPlacement,
    Mode,
    NodeGroup,
    PlacementPlan,
    ProcessPlacement,
)
from rlinf.scheduler.placement.render import plan_to_json, render_grid
from rlinf.scheduler.placement.shape import parse_cluster_shape

__all__ = [
    "ClusterShape",
    "ComponentPlacement",
    "Mode",
    "NodeGroup",
    "PlacementError",
    "PlacementPlan",
    "ProcessPlacement",
    "parse_cluster_shape",
    "plan_placement",
    "plan_to_json",
    "render_grid",
]
