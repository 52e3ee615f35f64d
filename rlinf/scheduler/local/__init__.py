"""``cluster.backend: local``: every worker group inside the driver process, without Ray.

For debugging: a breakpoint in a worker method is hit in the driver's debugger
(``python -m pdb examples/math/main_grpo.py cluster.backend=local ...``). The worker code is the
same; what changes underneath is the backend (:class:`~rlinf.scheduler.backend.Backend`):

* :class:`~rlinf.scheduler.local.cluster.LocalCluster` stands in for the Ray cluster: one node
  (this machine), no Ray import. Its backend (:class:`~rlinf.scheduler.local.backend.LocalBackend`)
  runs one worker instance per group (world size 1) on its own thread(s) (:mod:`.executor`): calls
  to one group run in order, calls to different groups overlap as Ray actors do.
* channels are queues in this process (:mod:`.channel`), tensor links hand tensors over in memory
  and pipes are socket pairs (:mod:`.links`), behind the same interfaces.

This package imports nothing private of the Ray side (tests/scheduler/test_no_import_cycle.py).

Example:
    >>> from rlinf.scheduler.config import ClusterConfig
    >>> cfg = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 1,
    ...                                "component_placement": {"actor,rollout": 0}})
    >>> cfg.backend, cfg.plan().component("actor").world_size
    ('local', 1)
"""
