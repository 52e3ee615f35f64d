"""The Ray backend (``cluster.backend: ray``): one Ray actor per placed process.

:class:`RayBackend` implements :class:`~rlinf.scheduler.backend.Backend` with Ray actors, object
refs, tasks pinned to nodes, gloo / NCCL process groups for tensor links, TCP pipes and channel
actors. A :class:`~rlinf.scheduler.cluster.Cluster` makes one (holding the run's secret); a process
that made no cluster (a Ray worker) gets one without it from ``Channel.create``.

Example:
    >>> backend = RayBackend()
    >>> backend.name, backend.in_process
    ('ray', False)
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from typing import Any

from rlinf.scheduler.backend import Backend, CallFailed
from rlinf.scheduler.channel.ray_channel import RayChannel
from rlinf.scheduler.memory_report import probe_node
from rlinf.scheduler.nodes import NodeInfo, bind_free_port
from rlinf.scheduler.secret import RunSecret
from rlinf.scheduler.worker import (
    ENV_ACCELERATORS,
    ENV_GROUP,
    ENV_HAS_GPUS,
    ENV_NODE_RANK,
    SECRET_KWARG,
)

#: Environment every worker process starts with (on top of the user's runtime_env).
WORKER_ENV = {
    # rlinf sets CUDA_VISIBLE_DEVICES per worker from the placement plan.
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
}
#: a one-thread concurrency group of every worker actor: liveness pings while the worker is busy
CONTROL_GROUP = "rlinf_control"


class RayBackend(Backend):
    """:class:`~rlinf.scheduler.backend.Backend` on Ray (see the module docstring).

    Args:
        secret: the run's :class:`~rlinf.scheduler.secret.RunSecret` (the cluster's); channel
            keys are derived from it. None in a process that made no cluster: each channel it
            creates then gets a random key.
    """

    name = "ray"
    in_process = False

    def __init__(self, secret: RunSecret | None = None):
        self._secret = secret

    # ---- workers ----------------------------------------------------------------------------
    def start_workers(self, cluster: Any, worker_cls: type, placement: Any, name: str, args: Sequence[Any],
                      kwargs: dict, env: dict | None, max_concurrency: int) -> list:
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        master = cluster.node(placement.processes[0].node)
        master_port = free_port_on(master)
        remote_cls = ray.remote(concurrency_groups={CONTROL_GROUP: 1})(worker_cls)
        actors = []
        for proc in placement.processes:
            node = cluster.node(proc.node)
            proc_env = {
                **WORKER_ENV,
                **(env or {}),
                "RANK": str(proc.rank),
                "WORLD_SIZE": str(placement.world_size),
                "LOCAL_RANK": str(proc.local_rank),
                "LOCAL_WORLD_SIZE": str(proc.local_world_size),
                "MASTER_ADDR": master.ip,
                "MASTER_PORT": str(master_port),
                ENV_GROUP: name,
                ENV_NODE_RANK: str(proc.node),
                ENV_ACCELERATORS: ",".join(map(str, proc.accelerators)),
                ENV_HAS_GPUS: "1" if node.has_gpus and proc.accelerators else "0",
            }
            if node.has_gpus:
                proc_env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, proc.accelerators))
            # Ray gives a num_cpus=0 actor one OpenMP thread; a worker gets its slots' share of the
            # node's cores instead, unless the user set OMP_NUM_THREADS (in env= or the driver's).
            proc_env.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS")
                                or str(node.threads_for(len(proc.accelerators))))
            actors.append(remote_cls.options(
                num_cpus=0,
                num_gpus=0,
                max_concurrency=max_concurrency,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                runtime_env={"env_vars": proc_env},
            ).remote(*args, **(kwargs or {}), **{SECRET_KWARG: cluster.secret}))
        return actors

    def submit(self, handle: Any, method: str, args: tuple, kwargs: dict, control: bool = False) -> Any:
        call = handle._rlinf_call
        if control:
            call = call.options(concurrency_group=CONTROL_GROUP)
        return call.remote(method, *args, **kwargs)

    def stop_workers(self, handles: list) -> None:
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        for actor in handles:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already dead is fine
                pass

    def probe_node(self, cluster: Any, node: int, pid: int | None, timeout: float) -> Any:
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        try:
            task = _probe_task().options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(cluster.node(node).node_id, soft=False))
            return ray.get(task.remote(pid), timeout=timeout)
        except Exception:  # noqa: BLE001 - a node that is gone or slow: judged without it
            return None

    # ---- answers ----------------------------------------------------------------------------
    def wait_any(self, refs: list, timeout: float | None) -> tuple[list, list]:
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        return ray.wait(list(refs), num_returns=1, timeout=timeout)

    def all_done(self, refs: list) -> bool:
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        return len(ready) == len(refs)

    def result(self, ref: Any) -> tuple:
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:
            raise _call_failed(exc) from None

    async def result_async(self, ref: Any) -> tuple:
        # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
        import ray

        try:
            return await ref
        except ray.exceptions.RayError as exc:
            raise _call_failed(exc) from None

    # ---- links and channels -----------------------------------------------------------------
    def connect_tensor_link(self, name: str, members: list, *, bucket_bytes: int, timeout_s: float,
                            shared_memory: bool | None) -> None:
        src_group, src_rank = members[0]
        devices = [g._execute("_rlinf_device_type", ranks=[r]) for g, r in members]
        backend = "nccl" if all(d.wait(timeout=60)[0] == "cuda" for d in devices) else "gloo"
        src_node_rank = src_group.placement.processes[src_rank].node
        src_node = src_group.cluster.node(src_node_rank)
        one_host = backend == "gloo" and all(g.placement.processes[r].node == src_node_rank for g, r in members)
        if shared_memory and not one_host:
            raise ValueError(f"tensor link {name!r}: shared_memory=True needs every member on the source's "
                             "node and CPU workers (gloo)")
        one_host = one_host if shared_memory is None else bool(shared_memory)
        port = free_port_on(src_node)
        calls = [g._execute("_rlinf_join_link", name, link_rank, len(members), src_node.ip, port,
                            backend, bucket_bytes, timeout_s, one_host, ranks=[r])
                 for link_rank, (g, r) in enumerate(members)]
        for call in calls:
            call.wait(timeout=timeout_s)

    def connect_pipes(self, name: str, group_a: Any, group_b: Any, pairs: list, timeout_s: float) -> None:
        """group_b's ranks listen (one fresh port each), group_a's ranks connect; every connection
        proves the run's secret both ways before anything is read (:mod:`rlinf.scheduler.pipe`)."""
        b_ranks = sorted({b for _, b in pairs})
        expected = {b: sum(1 for _, bb in pairs if bb == b) for b in b_ranks}
        addresses = {}
        for b in b_ranks:
            node = group_b.cluster.node(group_b.placement.processes[b].node)
            addresses[b] = group_b._execute("_rlinf_pipe_listen", name, node.ip, expected[b],
                                            group_a.name, ranks=[b]).wait(timeout=timeout_s)[0]
        accepting = group_b._execute("_rlinf_pipe_accept", name, timeout_s, ranks=b_ranks)
        connecting = [group_a._execute("_rlinf_pipe_connect", name, b, f"{group_b.name}[{b}]",
                                       *addresses[b], timeout_s, ranks=[a]) for a, b in pairs]
        for call in connecting:
            call.wait(timeout=timeout_s + 10)
        accepting.wait(timeout=timeout_s + 10)

    def pipe_refused(self, name: str, group_b: Any, ranks: list[int]) -> int:
        counts = group_b._execute("_rlinf_pipe_refused", ranks=ranks).wait(timeout=30)
        return sum(c.get(name, 0) for c in counts)

    def create_channel(self, name: str, maxsize: int, node_id: str | None) -> RayChannel:
        key = self._secret.derive(f"channel/{name}") if self._secret is not None else RunSecret.new()
        return RayChannel.create(name, maxsize, node_id, key=key)

    def connect_channel(self, name: str, timeout: float) -> RayChannel:
        return RayChannel.connect(name, timeout)


def _call_failed(exc: Exception) -> CallFailed:
    """The :class:`CallFailed` for a Ray error of a worker call."""
    # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
    import ray

    if isinstance(exc, ray.exceptions.RayActorError):
        if exc.actor_init_failed:  # the worker's __init__ raised
            return CallFailed("init", _strip_ansi(exc.error_msg))
        return CallFailed("died", _strip_ansi(str(exc)))
    if isinstance(exc, ray.exceptions.OutOfMemoryError):  # Ray's memory monitor killed the worker
        return CallFailed("died", str(exc), monitor=True)
    return CallFailed("error", str(exc))


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@functools.cache
def _probe_task():
    # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
    import ray

    return ray.remote(num_cpus=0, max_retries=0)(probe_node)


_ISSUED_PORTS: dict[str, set[int]] = {}


def free_port_on(node: NodeInfo) -> int:
    """A TCP port that is free right now on ``node`` and was not handed out before by this driver.

    The port is picked below the node's ephemeral range (``ip_local_port_range``), so that the
    outgoing connections Ray and gloo keep opening cannot take it between the pick and the worker's
    ``listen``; and a port handed out once (to a group that may still be starting, or to one whose
    killed process the kernel has not released yet) is never handed out again by this driver.
    """
    # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    issued = _ISSUED_PORTS.setdefault(node.node_id, set())
    task = _free_port_task().options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False))
    port = ray.get(task.remote(sorted(issued), node.ip))
    issued.add(port)
    return port


@functools.cache
def _free_port_task():
    # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
    import ray

    return ray.remote(num_cpus=0)(bind_free_port)
