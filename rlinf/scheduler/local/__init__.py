"""``cluster.backend: local``: every worker group inside the driver process, without Ray.

For debugging: a breakpoint in a worker method is hit in the driver's debugger
(``python -m pdb examples/math/main_grpo.py cluster.backend=local ...``). The worker code is the
same; what changes underneath:

* :class:`~rlinf.scheduler.local.cluster.LocalCluster` stands in for the Ray cluster: one node
  (this machine), no Ray import. ``WorkerGroup.launch`` on it runs one worker instance per group
  (world size 1) on its own thread(s) (:mod:`.executor`): calls to one group run in order, calls
  to different groups overlap as Ray actors do.
* channels are queues in this process (:mod:`.channel`), tensor links hand tensors over in memory
  and pipes are socket pairs (:mod:`.links`), behind the same interfaces.

Example:
    >>> from rlinf.scheduler.config import ClusterConfig
    >>> cfg = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 1,
    ...                                "component_placement": {"actor,rollout": 0}})
    >>> cfg.backend, cfg.plan().component("actor").world_size
    ('local', 1)
"""

from __future__ import annotations

import weakref

_ACTIVE: weakref.ref | None = None


def is_active() -> bool:
    """True while the local cluster made last in this process is alive (and no Ray cluster was
    made after it): channels created then are in-process ones."""
    return _ACTIVE is not None and _ACTIVE() is not None


def set_active(cluster) -> None:
    """Make ``cluster`` (a local cluster) the active one; ``None``: none is."""
    global _ACTIVE
    _ACTIVE = None if cluster is None else weakref.ref(cluster)
