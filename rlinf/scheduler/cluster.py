"""Attach to (or start) a Ray cluster and describe its nodes in placement terms.

Node ranks: if every node carries the label ``rlinf.io/node-rank`` (set with
``ray start --labels rlinf.io/node-rank=N``) that number is its rank; otherwise the head node is
rank 0 and the others follow in (IP, node id) order.

Accelerators: a node's ``GPU`` resource count. On a cluster without GPUs, accelerators are logical
slots (``accelerators_per_node``, default 1 per node) and workers use the CPU device.

Authentication: Ray's token authentication (``RAY_AUTH_MODE=token``) is on by default for the
private local cluster a run starts (the pinned Ray, >= 2.59); Ray never turns it on for a cluster
attached by address. A run attached without it says so in its one-line :attr:`Cluster.origin`, and
one that would spread over several nodes that way is refused unless
``cluster.allow_unauthenticated_ray: true`` (:func:`check_unauthenticated_attach`).
"""

from __future__ import annotations

import logging
import os

from rlinf.scheduler.config import ClusterConfig
from rlinf.scheduler.errors import ClusterError, UnauthenticatedRayError
from rlinf.scheduler.local.checks import check_local_config, check_local_plan
from rlinf.scheduler.local.cluster import LocalCluster
from rlinf.scheduler.nodes import LOOPBACK, ClusterBase, NodeInfo, local_gpu_count
from rlinf.scheduler.placement import ClusterShape, NodeGroup
from rlinf.scheduler.ray_backend import WORKER_ENV, RayBackend, free_port_on
from rlinf.scheduler.secret import RunSecret
from rlinf.utils.typed_config import ConfigError

__all__ = ["GCS_TASK_EVENTS_KEPT", "LOOPBACK", "NODE_RANK_LABEL", "RAY_AUTH_MODE_ENV", "WORKER_ENV", "Cluster",
           "NodeInfo", "check_cluster_before_start", "check_unauthenticated_attach", "free_port_on",
           "ray_authenticated", "ray_target"]

logger = logging.getLogger(__name__)

NODE_RANK_LABEL = "rlinf.io/node-rank"

#: Task events the GCS of a private local cluster keeps (Ray's default, 100 000, grows its RSS by
#: ~3.3 KB per actor call until then: ~330 MiB; bench/bench_soak.py saw +31 % over 300 math steps).
#: ``RAY_task_events_max_num_task_in_gcs`` in the environment wins.
GCS_TASK_EVENTS_KEPT = 10_000


class Cluster(ClusterBase):
    """A Ray cluster with nodes ranked for placement; its :attr:`backend` is a
    :class:`~rlinf.scheduler.ray_backend.RayBackend` (``cluster.backend: local``:
    :class:`~rlinf.scheduler.local.cluster.LocalCluster`, this process without Ray).

    Args:
        num_nodes: nodes the job uses (``cluster.num_nodes``); ``None`` = all alive nodes.
        accelerators_per_node: on GPU-less nodes, logical accelerator slots per node; on GPU
            nodes, an upper bound check against the node's GPUs (``None`` = what the node has).
        address: Ray address to attach to; ``None`` = ``RAY_ADDRESS`` if set, else a private
            local cluster started for this process (bound to 127.0.0.1, dashboard off; never a
            cluster someone else started on the machine); ``"local"`` always starts a private one.
            :attr:`origin` says which one the run uses.
        node_groups: labelled node groups from ``cluster.node_groups`` (see placement docs).
        namespace: Ray namespace for named actors (channels) of this job.
        allow_unauthenticated: attach to a cluster without Ray's token authentication even when
            the run uses several nodes (``cluster.allow_unauthenticated_ray``); a one-node run
            attaches either way and says so in :attr:`origin`.

    Example:
        >>> from rlinf.scheduler import Cluster
        >>> cluster = Cluster(num_nodes=1, accelerators_per_node=2)  # doctest: +SKIP
        >>> cluster.shape.num_nodes  # doctest: +SKIP
        1
    """

    def __init__(
        self,
        num_nodes: int | None = None,
        accelerators_per_node: int | None = None,
        address: str | None = None,
        node_groups: tuple[NodeGroup, ...] = (),
        namespace: str = "rlinf",
        allow_unauthenticated: bool = False,
    ):
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        self.namespace = namespace
        #: the run's key (:mod:`rlinf.scheduler.secret`): handed to every worker this cluster starts
        self.secret = RunSecret.new()
        self.backend = RayBackend(self.secret)
        joined = ray.is_initialized()
        if not joined:  # refused before Ray starts when the node count is known
            check_unauthenticated_attach(num_nodes, allow_unauthenticated, address)
        #: one line naming the Ray cluster in use (printed by the entry points)
        self.origin = _init_ray(address, namespace) if not joined else \
            "the Ray cluster this process had already joined"
        self.nodes = _rank_nodes(_alive_nodes(), accelerators_per_node)
        if num_nodes is not None:
            if num_nodes > len(self.nodes):
                raise ClusterError(
                    f"cluster.num_nodes={num_nodes} but the Ray cluster has {len(self.nodes)} "
                    "alive node(s); start the others with `ray start --address <head>`"
                )
            self.nodes = self.nodes[:num_nodes]
        elif not joined and len(self.nodes) > 1:  # "every alive node": known only now
            try:
                check_unauthenticated_attach(len(self.nodes), allow_unauthenticated, address)
            except ClusterError:
                ray.shutdown()
                raise
        self.shape = ClusterShape(
            num_nodes=len(self.nodes),
            accelerators_per_node=(
                accelerators_per_node
                if accelerators_per_node is not None
                else self.nodes[0].num_accelerators
            ),
            node_groups=tuple(node_groups),
        )
        self._check_shape(explicit=accelerators_per_node is not None)
        self._adopt()  # channels this process creates from now on are this cluster's

    @classmethod
    def from_config(cls, cfg: ClusterConfig, address: str | None = None) -> ClusterBase:
        """The run's cluster for a validated ``cluster:`` section: where its backend is chosen,
        once. ``cluster.backend: ray``: attach/start Ray and adopt the node groups;
        ``local``: a :class:`~rlinf.scheduler.local.cluster.LocalCluster` (Ray is not imported).

        Example:
            >>> cfg = ClusterConfig.from_dict({"num_nodes": 1, "accelerators_per_node": 2,
            ...                                "component_placement": {"a": "all"}})  # doctest: +SKIP
            >>> Cluster.from_config(cfg).shape.accelerators_per_node  # doctest: +SKIP
            2
        """
        if cfg.backend == "local":
            return LocalCluster.from_config(cfg, address)
        cluster = cls(num_nodes=cfg.num_nodes, accelerators_per_node=cfg.accelerators_per_node,
                      address=address, allow_unauthenticated=cfg.allow_unauthenticated_ray)
        cluster.shape = cfg.shape(accelerators_per_node=cluster.shape.accelerators_per_node)
        cluster._check_shape(explicit=cfg.accelerators_per_node is not None)
        return cluster

    def _check_shape(self, explicit: bool) -> None:
        """Declared counts must exist; without an explicit count, no GPU may go unused silently."""
        for node in self.nodes:
            declared = self.shape.accelerators_on(node.rank)
            if declared > node.num_accelerators:
                raise ClusterError(
                    f"node {node.rank} ({node.ip}) has {node.num_accelerators} accelerator(s) "
                    f"but the cluster config declares {declared}"
                )
            grouped = any(node.rank in g.node_ranks for g in self.shape.node_groups)
            if not explicit and not grouped and node.has_gpus and declared < node.num_accelerators:
                raise ClusterError(
                    f"node {node.rank} ({node.ip}) has {node.num_accelerators} GPUs but node 0 has "
                    f"{self.nodes[0].num_accelerators}: set cluster.accelerators_per_node, or "
                    "declare cluster.node_groups for nodes of different kinds"
                )

def check_cluster_before_start(cfg: ClusterConfig, address: str | None = None) -> None:
    """What can be known about the cluster before Ray starts: a private local cluster (no
    ``address``, no ``RAY_ADDRESS``) is this one machine, so ``cluster.num_nodes`` must be 1 and
    a declared GPU count must exist here. A named cluster is checked when attached.

    Raises:
        ConfigError: naming ``cluster.num_nodes`` or ``cluster.accelerators_per_node``.

    Example:
        >>> cfg = ClusterConfig.from_dict({"num_nodes": 2, "component_placement": {"a": "all"}})
        >>> check_cluster_before_start(cfg, address="local")
        Traceback (most recent call last):
        ...
        rlinf.utils.typed_config.ConfigError: cluster.num_nodes: 2, but the run starts a private local Ray cluster of 1 node (this machine); to use several nodes start Ray on them (ray start) and set RAY_ADDRESS
    """  # noqa: E501 - a doctest's expected output is one line

    if cfg.backend == "local":  # no Ray: this machine, one process per group
        check_local_config(cfg)
        gpus = local_gpu_count()
        if gpus and cfg.accelerators_per_node is not None and cfg.accelerators_per_node > gpus:
            raise ConfigError("cluster.accelerators_per_node", f"{cfg.accelerators_per_node}, but this "
                              f"machine has {gpus} GPU(s)")
        check_local_plan(cfg, cfg.plan(cfg.shape(accelerators_per_node=gpus or 1)))
        return
    target, _ = ray_target(address)
    if target != "local":  # attached: only what this process's Ray settings say is known now
        check_unauthenticated_attach(cfg.num_nodes, cfg.allow_unauthenticated_ray, address)
        return
    if cfg.num_nodes != 1:
        raise ConfigError("cluster.num_nodes", f"{cfg.num_nodes}, but the run starts a private local Ray "
                          "cluster of 1 node (this machine); to use several nodes start Ray on them "
                          "(ray start) and set RAY_ADDRESS")
    gpus = local_gpu_count()
    if gpus and cfg.accelerators_per_node is not None and cfg.accelerators_per_node > gpus:
        raise ConfigError("cluster.accelerators_per_node", f"{cfg.accelerators_per_node}, but this machine "
                          f"has {gpus} GPU(s)")


#: the environment variable Ray reads its authentication mode from (every Ray process, at start)
RAY_AUTH_MODE_ENV = "RAY_AUTH_MODE"


def ray_authenticated(target: str) -> bool:
    """Whether Ray's token authentication guards the cluster ``target`` (:func:`ray_target`) as
    this process will join it: a private local cluster (``"local"``) has it unless
    ``RAY_AUTH_MODE`` says otherwise (the pinned Ray turns it on for a new local cluster); an
    attached one only with ``RAY_AUTH_MODE=token`` (Ray never turns it on for an address).

    Example:
        >>> import os
        >>> saved = os.environ.pop(RAY_AUTH_MODE_ENV, None)
        >>> ray_authenticated("local"), ray_authenticated("10.0.0.5:6379")
        (True, False)
        >>> os.environ[RAY_AUTH_MODE_ENV] = "token"
        >>> ray_authenticated("10.0.0.5:6379")
        True
        >>> _ = os.environ.pop(RAY_AUTH_MODE_ENV) if saved is None else os.environ.update({RAY_AUTH_MODE_ENV: saved})
    """
    mode = os.environ.get(RAY_AUTH_MODE_ENV, "").strip().lower()
    return mode in ("", "token") if target == "local" else mode == "token"


def check_unauthenticated_attach(num_nodes: int | None, allowed: bool, address: str | None = None) -> None:
    """Refuse a run of several nodes on a Ray cluster attached without token authentication,
    unless ``allowed`` (``cluster.allow_unauthenticated_ray``): its ports would let anyone who
    reaches them run code on every node. Needs no Ray; a private local cluster passes.

    Raises:
        ConfigError: naming ``cluster.allow_unauthenticated_ray`` (a :class:`ClusterError` too).

    Example:
        >>> check_unauthenticated_attach(1, allowed=False, address="10.0.0.5:6379")  # one node: said, not refused
        >>> check_unauthenticated_attach(2, allowed=True, address="10.0.0.5:6379")
    """
    target, source = ray_target(address)
    if num_nodes is None or num_nodes <= 1 or allowed or ray_authenticated(target):
        return
    raise UnauthenticatedRayError(
        "cluster.allow_unauthenticated_ray",
        f"false, but the run would use {num_nodes} nodes of the Ray cluster at {target} (from {source}), "
        f"attached without Ray's token authentication ({RAY_AUTH_MODE_ENV} is not 'token' here): anyone "
        f"who reaches its ports can run code on every node. Start the cluster with {RAY_AUTH_MODE_ENV}=token "
        f"and set {RAY_AUTH_MODE_ENV}=token (and its token) for this run, or set "
        "cluster.allow_unauthenticated_ray: true on a network only you can reach")


def ray_target(address: str | None) -> tuple[str, str]:
    """``(address for ray.init, where it came from)``: the ``address`` argument, else
    ``RAY_ADDRESS``, else ``"local"`` (a private cluster). A cluster that happens to run on the
    machine (another user's, another job's) is never joined unless named."""
    if address:
        return address, "the address argument"
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env:
        return env, "RAY_ADDRESS"
    return "local", "default"


def _init_ray(address: str | None, namespace: str) -> str:
    """Start or join Ray; returns the one-line description of the cluster in use."""
    # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
    import ray

    kwargs = dict(namespace=namespace, runtime_env={"env_vars": dict(WORKER_ENV)}, log_to_driver=True)
    target, source = ray_target(address)
    if target == "local":
        # A private cluster for this run on the loopback interface, dashboard off; its GCS (a child
        # of this process) reads the task-event bound from the environment
        os.environ.setdefault("RAY_task_events_max_num_task_in_gcs", str(GCS_TASK_EVENTS_KEPT))
        ray.init(address="local", include_dashboard=False, _node_ip_address=LOOPBACK, **kwargs)
        return f"Ray: a private local cluster started by this run ({LOOPBACK}, {source})"
    logger.info("attaching to the Ray cluster at %s", target)
    ray.init(address=target, **kwargs)
    if not ray_authenticated(target):
        return (f"Ray: attached to the cluster at {target} (from {source}) WITHOUT authentication "
                f"({RAY_AUTH_MODE_ENV} is not 'token'): anyone who reaches its ports can run code in it")
    return f"Ray: attached to the cluster at {target} (from {source})"


def _alive_nodes() -> list[dict]:
    # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def _rank_nodes(raw: list[dict], accelerators_per_node: int | None) -> list[NodeInfo]:
    labelled = [n for n in raw if NODE_RANK_LABEL in n.get("Labels", {})]
    if labelled and len(labelled) == len(raw):
        ordered = sorted(raw, key=lambda n: _label_rank(n, len(raw)))
        ranks = [_label_rank(n, len(raw)) for n in ordered]
        if ranks != list(range(len(raw))):
            raise ClusterError(
                f"{NODE_RANK_LABEL} labels must be 0-{len(raw) - 1}, each once; got {ranks}")
    else:
        if labelled:
            logger.warning("only some nodes carry %s; ranking by head/IP instead", NODE_RANK_LABEL)
        ordered = sorted(
            raw,
            key=lambda n: (
                "node:__internal_head__" not in n["Resources"],
                tuple(int(p) if p.isdigit() else 0 for p in n["NodeManagerAddress"].split(".")),
                n["NodeID"],
            ),
        )
    nodes = []
    for rank, n in enumerate(ordered):
        gpus = int(n["Resources"].get("GPU", 0))
        count = gpus if gpus else (accelerators_per_node if accelerators_per_node is not None else 1)
        nodes.append(
            NodeInfo(
                rank=rank,
                node_id=n["NodeID"],
                ip=n["NodeManagerAddress"],
                num_accelerators=count,
                has_gpus=gpus > 0,
                is_head="node:__internal_head__" in n["Resources"],
                num_cpus=max(1, int(n["Resources"].get("CPU", 1))),
            )
        )
    return nodes


def _label_rank(node: dict, count: int) -> int:
    value = node["Labels"][NODE_RANK_LABEL]
    if not value.isdigit():
        raise ClusterError(
            f"node {node['NodeManagerAddress']} ({node['NodeID'][:8]}): {NODE_RANK_LABEL}={value!r} "
            f"is not a node rank; use 0-{count - 1}")
    return int(value)
