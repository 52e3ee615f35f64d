"""The local cluster: this machine as one node, worker groups as in-process instances."""

from __future__ import annotations

import os
from typing import Any

from rlinf.scheduler.local.backend import LocalBackend
from rlinf.scheduler.local.checks import check_local_config, check_local_plan
from rlinf.scheduler.nodes import LOOPBACK, ClusterBase, NodeInfo, bind_free_port, cpu_cores, local_gpu_count
from rlinf.scheduler.placement import ClusterShape
from rlinf.scheduler.secret import RunSecret

ORIGIN = "local mode: every worker group runs in this process (cluster.backend: local; no Ray)"


class LocalCluster(ClusterBase):
    """The cluster of ``cluster.backend: local``: one node (this machine), no Ray; its
    :attr:`backend` is a :class:`~rlinf.scheduler.local.backend.LocalBackend`.

    Its accelerators are the GPUs this process sees, else logical slots
    (``cluster.accelerators_per_node``, default 1). Making one sets what ``torch.distributed``
    reads in this process (``RANK=0``, ``WORLD_SIZE=1``, ``MASTER_ADDR`` / ``MASTER_PORT``): every
    group has world size 1, so they all share one default process group of size 1.
    """

    def __init__(self, accelerators_per_node: int | None = None, namespace: str = "rlinf"):
        self.namespace = namespace
        self.secret = RunSecret.new()
        self.backend = LocalBackend()
        self.origin = ORIGIN
        gpus = local_gpu_count()
        count = accelerators_per_node if accelerators_per_node is not None else (gpus or 1)
        self.nodes = [NodeInfo(rank=0, node_id="local", ip=LOOPBACK, num_accelerators=count,
                               has_gpus=gpus > 0, is_head=True, num_cpus=cpu_cores())]
        self.shape = ClusterShape(num_nodes=1, accelerators_per_node=count)
        _set_process_env()
        self._adopt()

    @classmethod
    def from_config(cls, cfg: Any, address: str | None = None) -> LocalCluster:
        """The local cluster of a validated ``cluster:`` section (a
        :class:`~rlinf.scheduler.config.ClusterConfig`; ``address`` is ignored)."""
        check_local_config(cfg)
        cluster = cls(accelerators_per_node=cfg.accelerators_per_node)
        cluster.shape = cfg.shape(accelerators_per_node=cluster.shape.accelerators_per_node)
        check_local_plan(cfg, cfg.plan(cluster.shape))
        return cluster


def _set_process_env() -> None:
    """What ``torch.distributed``'s env:// init reads: one process, rank 0 of 1 (left alone when
    the default process group exists already)."""
    try:
        # lazy: torch only to see whether a process group exists; the local cluster loads without it
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return
    except ImportError:  # pragma: no cover - torch is a base dependency
        pass
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                       "MASTER_ADDR": LOOPBACK, "MASTER_PORT": str(bind_free_port())})
