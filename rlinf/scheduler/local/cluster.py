"""The local cluster: this machine as one node, worker groups as in-process instances."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rlinf.scheduler.cluster import LOOPBACK, Cluster, NodeInfo, _bind_free_port, _local_gpu_count
from rlinf.scheduler.local import set_active
from rlinf.scheduler.secret import RunSecret

if TYPE_CHECKING:
    from rlinf.scheduler.config import ClusterConfig
    from rlinf.scheduler.placement import ComponentPlacement

ORIGIN = "local mode: every worker group runs in this process (cluster.backend: local; no Ray)"


class LocalCluster(Cluster):
    """``Cluster`` for ``cluster.backend: local``: one node (this machine), no Ray.

    Its accelerators are the GPUs this process sees, else logical slots
    (``cluster.accelerators_per_node``, default 1). Making one sets what ``torch.distributed``
    reads in this process (``RANK=0``, ``WORLD_SIZE=1``, ``MASTER_ADDR`` / ``MASTER_PORT``): every
    group has world size 1, so they all share one default process group of size 1.
    """

    is_local = True

    def __init__(self, accelerators_per_node: int | None = None, namespace: str = "rlinf"):
        self.namespace = namespace
        self._groups: list = []
        self.secret = RunSecret.new()
        self.origin = ORIGIN
        gpus = _local_gpu_count()
        count = accelerators_per_node if accelerators_per_node is not None else (gpus or 1)
        self.nodes = [NodeInfo(rank=0, node_id="local", ip=LOOPBACK, num_accelerators=count,
                               has_gpus=gpus > 0, is_head=True, num_cpus=_cores())]
        from rlinf.scheduler.placement import ClusterShape

        self.shape = ClusterShape(num_nodes=1, accelerators_per_node=count)
        _set_process_env()
        set_active(self)

    @classmethod
    def from_config(cls, cfg: ClusterConfig, address: str | None = None) -> LocalCluster:
        """The local cluster of a validated ``cluster:`` section (``address`` is ignored)."""
        check_local_config(cfg)
        cluster = cls(accelerators_per_node=cfg.accelerators_per_node)
        cluster.shape = cfg.shape(accelerators_per_node=cluster.shape.accelerators_per_node)
        check_local_plan(cfg, cfg.plan(cluster.shape))
        return cluster

    def launch(self, group_cls: type, worker_cls: type, placement: ComponentPlacement, name: str,
               args: Sequence[Any], kwargs: dict, env: dict | None, max_concurrency: int):
        """Called by ``WorkerGroup.launch``: one :class:`LocalActor` per placed process."""
        from rlinf.scheduler.local.executor import LocalActor
        from rlinf.scheduler.worker import ENV_ACCELERATORS, ENV_DEVICE_INDEX, ENV_GROUP, ENV_HAS_GPUS, ENV_NODE_RANK

        if placement.world_size != 1:
            raise ValueError(f"local mode runs one process per group; {name} is placed on "
                             f"{placement.world_size} processes")
        proc = placement.processes[0]
        node = self.node(proc.node)
        proc_env = {
            **(env or {}),
            "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": os.environ["MASTER_ADDR"], "MASTER_PORT": os.environ["MASTER_PORT"],
            ENV_GROUP: name,
            ENV_NODE_RANK: str(proc.node),
            ENV_ACCELERATORS: ",".join(map(str, proc.accelerators)),
            ENV_HAS_GPUS: "1" if node.has_gpus and proc.accelerators else "0",
            ENV_DEVICE_INDEX: str(proc.accelerators[0]) if node.has_gpus and proc.accelerators else "0",
        }
        threads = int(proc_env.get("OMP_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
                      or node.threads_for(len(proc.accelerators)))
        actor = LocalActor(worker_cls, f"{name}[0]", proc_env, tuple(args), dict(kwargs or {}),
                           max_concurrency=max_concurrency, threads=threads, secret=self.secret)
        group = group_cls(self, placement, name, worker_cls, [actor])
        self.register_group(group)
        return group


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _set_process_env() -> None:
    """What ``torch.distributed``'s env:// init reads: one process, rank 0 of 1 (left alone when
    the default process group exists already)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return
    except ImportError:  # pragma: no cover - torch is a base dependency
        pass
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                       "MASTER_ADDR": LOOPBACK, "MASTER_PORT": str(_bind_free_port())})


def check_local_config(cfg: ClusterConfig) -> None:
    """What local mode refuses before anything starts: more than one node."""
    from rlinf.utils.typed_config import ConfigError

    if cfg.num_nodes != 1:
        raise ConfigError("cluster.num_nodes", f"{cfg.num_nodes}, but local mode (cluster.backend: local) "
                                               "runs on this machine only: set cluster.num_nodes: 1")


def check_local_plan(cfg: ClusterConfig, plan) -> None:
    """Every group must be one process in local mode.

    Raises:
        ConfigError: naming ``cluster.component_placement.<component>`` and what would fit.
    """
    from rlinf.utils.typed_config import ConfigError

    everything = ",".join(plan.components)
    for name, component in plan.components.items():
        if component.world_size != 1:
            raise ConfigError(f"cluster.component_placement.{name}",
                              f"local mode runs one process per group; {name} is placed on "
                              f"{component.world_size} processes: place it on one accelerator, e.g. "
                              f"`{everything}: 0` with cluster.accelerators_per_node: 1")
