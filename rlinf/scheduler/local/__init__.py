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
    >>> from rlinf.scheduler import Cluster
    >>> cfg = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 1,
    ...                                "component_placement": {"actor,rollout": 0}})
    >>> cluster = Cluster.from_config(cfg)
    >>> cluster.origin
    'local mode: every worker group runs in this process (cluster.backend: local; no Ray)'
"""

from __future__ import annotations

_ACTIVE = False


def is_active() -> bool:
    """True after a local cluster was made in this process (and no Ray cluster since): channels
    created then are in-process ones."""
    return _ACTIVE


def set_active(active: bool) -> None:
    global _ACTIVE
    _ACTIVE = active
