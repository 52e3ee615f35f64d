"""The scheduler layer: placement, clusters, worker groups, channels, tensor transfer.

It knows nothing about RL. A run's cluster carries its backend (:mod:`rlinf.scheduler.backend`:
Ray, or ``cluster.backend: local`` in this process), chosen once; everything else asks it. Names
are imported lazily so that ``rlinf.scheduler.placement`` (pure Python) never imports Ray.

Example:
    >>> from rlinf.scheduler import plan_placement, ClusterShape
    >>> plan = plan_placement({"actor,rollout": "all"}, ClusterShape(num_nodes=1, accelerators_per_node=2))
    >>> plan.mode("actor", "rollout").value
    'collocated'
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Cluster": "rlinf.scheduler.cluster",
    "NodeInfo": "rlinf.scheduler.nodes",
    "Backend": "rlinf.scheduler.backend",
    "Worker": "rlinf.scheduler.worker",
    "WorkerGroup": "rlinf.scheduler.worker_group",
    "GroupCall": "rlinf.scheduler.group_call",
    "wait_first": "rlinf.scheduler.group_call",
    "Channel": "rlinf.scheduler.channel",
    "ChannelTimeout": "rlinf.scheduler.channel",
    "TensorLink": "rlinf.scheduler.links",
    "PipeLink": "rlinf.scheduler.links",
    "Pipe": "rlinf.scheduler.pipe",
    "PipeClosedError": "rlinf.scheduler.pipe",
    "PipePeerError": "rlinf.scheduler.pipe",
    "PipeTimeout": "rlinf.scheduler.pipe",
    "SchedulerError": "rlinf.scheduler.errors",
    "WorkerError": "rlinf.scheduler.errors",
    "WorkerDiedError": "rlinf.scheduler.errors",
    "PeerDiedError": "rlinf.scheduler.errors",
    "CallTimeoutError": "rlinf.scheduler.errors",
    "ClusterError": "rlinf.scheduler.errors",
    "plan_placement": "rlinf.scheduler.placement",
    "parse_cluster_shape": "rlinf.scheduler.placement",
    "PlacementError": "rlinf.scheduler.placement",
    "PlacementPlan": "rlinf.scheduler.placement",
    "ComponentPlacement": "rlinf.scheduler.placement",
    "ProcessPlacement": "rlinf.scheduler.placement",
    "ClusterShape": "rlinf.scheduler.placement",
    "NodeGroup": "rlinf.scheduler.placement",
    "Mode": "rlinf.scheduler.placement",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rlinf.scheduler' has no attribute {name!r}")
