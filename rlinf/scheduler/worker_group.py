"""Launch a :class:`~rlinf.scheduler.Worker` subclass on a component's placement and call it.

Example (needs Ray; see ``docs/scheduler.md`` for a full walk-through):

    >>> from rlinf.scheduler import Cluster, Worker, WorkerGroup, plan_placement
    >>> class Echo(Worker):
    ...     def whoami(self):
    ...         return self.rank, self.accelerators
    >>> cluster = Cluster(num_nodes=1, accelerators_per_node=2)            # doctest: +SKIP
    >>> plan = plan_placement({"echo": "0-1"}, cluster.shape)              # doctest: +SKIP
    >>> group = WorkerGroup.launch(cluster, Echo, plan.component("echo"))  # doctest: +SKIP
    >>> group.whoami().wait(timeout=30)                                    # doctest: +SKIP
    [(0, (0,)), (1, (1,))]
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

from rlinf.scheduler.cluster import WORKER_ENV, Cluster, free_port_on
from rlinf.scheduler.errors import OutOfMemoryKilledError, WorkerDiedError
from rlinf.scheduler.group_call import GroupCall
from rlinf.scheduler.placement import ComponentPlacement
from rlinf.scheduler.worker import (
    ENV_ACCELERATORS,
    ENV_GROUP,
    ENV_HAS_GPUS,
    ENV_NODE_RANK,
    SECRET_KWARG,
    Worker,
)

_CONTROL_GROUP = "rlinf_control"


class WorkerGroup:
    """The processes of one component, one Ray actor per placed process.

    Create with :meth:`launch`. Any public method of the worker class can be called on the group:
    ``group.step(batch)`` is ``group.execute("step", batch)`` and returns a
    :class:`~rlinf.scheduler.GroupCall`.
    """

    def __init__(self, cluster: Cluster, placement: ComponentPlacement, name: str,
                 worker_cls: type[Worker], actors: list):
        self.cluster, self.placement, self.name = cluster, placement, name
        self.worker_cls = worker_cls
        self.actors = actors
        #: rank -> the :class:`~rlinf.scheduler.memory_report.MemorySample` of its last answer
        self.last_memory: dict = {}
        self._last_method: dict[int, str] = {}
        self._deaths: dict = {}  # rank -> (DeathVerdict, method): a dead worker is examined once

    @classmethod
    def launch(
        cls,
        cluster: Cluster,
        worker_cls: type[Worker],
        placement: ComponentPlacement,
        *,
        name: str | None = None,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        max_concurrency: int = 1,
        start_timeout: float = 120.0,
        wait: bool = True,
    ) -> WorkerGroup:
        """Start one process per placed rank and wait until all have run ``__init__``.

        Args:
            cluster: the cluster the placement was planned for.
            worker_cls: a :class:`Worker` subclass.
            placement: the component's placement (``plan.component(name)``).
            name: group name (default: the component name).
            args, kwargs: passed to ``worker_cls(...)`` on every rank.
            env: extra environment variables for every rank.
            max_concurrency: calls one worker may run at once (threads).
            start_timeout: seconds to wait for every rank's ``__init__``.
            wait: False returns as soon as the processes are requested; call
                :meth:`wait_started` before using the group (lets several groups start at once).

        Raises:
            WorkerError / WorkerDiedError: a rank's ``__init__`` failed.
        """
        if not (isinstance(worker_cls, type) and issubclass(worker_cls, Worker)):
            raise TypeError(f"worker_cls must subclass rlinf.scheduler.Worker, got {worker_cls!r}")
        name = name or placement.name
        if getattr(cluster, "is_local", False):  # cluster.backend: local: instances in this process
            group = cluster.launch(cls, worker_cls, placement, name, args, kwargs, env, max_concurrency)
            if wait:
                group.wait_started(start_timeout)
            return group
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        master = cluster.node(placement.processes[0].node)
        master_port = free_port_on(master)
        # A separate one-thread concurrency group answers liveness pings while the worker is busy.
        remote_cls = ray.remote(concurrency_groups={_CONTROL_GROUP: 1})(worker_cls)
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
            actor = remote_cls.options(
                num_cpus=0,
                num_gpus=0,
                max_concurrency=max_concurrency,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                runtime_env={"env_vars": proc_env},
            ).remote(*args, **(kwargs or {}), **{SECRET_KWARG: cluster.secret})
            actors.append(actor)
        group = cls(cluster, placement, name, worker_cls, actors)
        cluster.register_group(group)
        if wait:
            group.wait_started(start_timeout)
        return group

    def wait_started(self, timeout: float = 120.0) -> WorkerGroup:
        """Wait until every rank has run ``__init__`` (after ``launch(..., wait=False)``); on a
        failure the group is shut down and the error raised."""
        try:
            self._execute("_rlinf_ping", _control=True).wait(timeout=timeout)
        except BaseException:
            self.shutdown()  # no half-started group left running
            raise
        return self

    @property
    def world_size(self) -> int:
        return len(self.actors)

    def execute(self, method: str, *args: Any, ranks: Sequence[int] | None = None,
                **kwargs: Any) -> GroupCall:
        """Run ``method(*args, **kwargs)`` on ``ranks`` (default: all) and return the call handle."""
        if method.startswith("_") or not callable(getattr(self.worker_cls, method, None)):
            raise AttributeError(f"{self.name} workers ({self.worker_cls.__name__}) have no public method {method!r}")
        return self._execute(method, *args, ranks=ranks, **kwargs)

    def execute_each(self, method: str, per_rank_args: Sequence[Sequence[Any]],
                     **kwargs: Any) -> GroupCall:
        """Run ``method(*per_rank_args[r], **kwargs)`` on every rank ``r`` at once (a scatter).

        All calls are issued before anything waits, so collective methods cannot deadlock.
        """
        if method.startswith("_") or not callable(getattr(self.worker_cls, method, None)):
            raise AttributeError(f"{self.name} workers ({self.worker_cls.__name__}) have no public method {method!r}")
        if len(per_rank_args) != self.world_size:
            raise ValueError(f"{self.name} has {self.world_size} ranks but {len(per_rank_args)} "
                             "argument tuples were given")
        refs = [self._submit(actor, method, tuple(args), kwargs)
                for actor, args in zip(self.actors, per_rank_args)]
        self._last_method.update(dict.fromkeys(range(self.world_size), method))
        return GroupCall(self, method, list(range(self.world_size)), refs)

    def _execute(self, method: str, *args: Any, ranks: Sequence[int] | None = None,
                 _control: bool = False, **kwargs: Any) -> GroupCall:
        ranks = list(range(self.world_size)) if ranks is None else list(ranks)
        for r in ranks:
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.world_size:
                raise IndexError(f"{self.name} has ranks 0-{self.world_size - 1}, not {r!r}")
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"ranks {ranks} of {self.name} name a rank twice")
        refs = [self._submit(self.actors[r], method, args, kwargs, _control) for r in ranks]
        if not _control:
            self._last_method.update(dict.fromkeys(ranks, method))
        return GroupCall(self, method, ranks, refs)

    @property
    def is_local(self) -> bool:
        """True for a group of ``cluster.backend: local`` (instances in this process)."""
        return bool(getattr(self.cluster, "is_local", False))

    def _submit(self, actor, method: str, args: tuple, kwargs: dict, control: bool = False):
        """One rank's ``_rlinf_call``: a Ray object ref, or a future in local mode."""
        if self.is_local:
            return actor.call(method, args, kwargs, control)
        call = actor._rlinf_call
        if control:
            call = call.options(concurrency_group=_CONTROL_GROUP)
        return call.remote(method, *args, **kwargs)

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.execute(method, *args, **kwargs)

    def check_alive(self, timeout: float = 10.0) -> None:
        """Raise :class:`WorkerDiedError` naming the first dead rank.

        Answers even while the workers are busy in a long call (pings run in their own thread).
        """
        self._execute("_rlinf_ping", _control=True).wait(timeout=timeout)

    def death_error(self, rank: int, method: str, ray_text: str, monitor: bool = False) -> WorkerDiedError:
        """The error for rank ``rank``, which Ray reports dead with ``ray_text`` (``monitor``:
        Ray's memory monitor killed it): :class:`~rlinf.scheduler.errors.OutOfMemoryKilledError`
        when it was killed for memory, else :class:`~rlinf.scheduler.errors.WorkerDiedError`.

        The first report examines the worker's node (:func:`~rlinf.scheduler.memory_report.
        judge_death`); later ones (other calls, liveness pings) repeat that verdict and the call it
        died in.
        """
        from rlinf.scheduler.memory_report import judge_death

        worker, node = f"{self.name}[{rank}]", self.placement.processes[rank].node
        if method.startswith("_rlinf_"):  # a ping noticed it: name the call it was running
            method = self._last_method.get(rank, method)
        last = self.last_memory.get(rank)
        if rank not in self._deaths:
            self._deaths[rank] = (judge_death(ray_text, monitor, last, lambda pid: self._probe(node, pid)), method)
        verdict, method = self._deaths[rank]  # later calls name the call it died in
        if not verdict.out_of_memory:
            return WorkerDiedError(worker, node, method, verdict.cause)
        return OutOfMemoryKilledError(
            worker, node, method, verdict.cause,
            memory=verdict.node_memory.describe(node) if verdict.node_memory is not None else None,
            peak=f"{last.describe_peak()} (at its last answer)" if last is not None else None)

    def _probe(self, node: int, pid: int | None, timeout: float = 20.0):
        """:func:`~rlinf.scheduler.memory_report.probe_node` on placement node ``node`` (a Ray
        task pinned there; in this process in local mode); None when it does not answer."""
        from rlinf.scheduler.memory_report import probe_node

        if self.is_local:
            return probe_node(pid)
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        try:
            task = _probe_task().options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(self.cluster.node(node).node_id, soft=False))
            return ray.get(task.remote(pid), timeout=timeout)
        except Exception:  # noqa: BLE001 - a node that is gone or slow: judged without it
            return None

    def shutdown(self) -> None:
        """Kill every process of the group (local mode: stop its threads taking calls)."""
        if self.is_local:
            for actor in self.actors:
                actor.shutdown()
            self.actors = []
            return
        import ray

        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already dead is fine
                pass
        self.actors = []


@functools.cache
def _probe_task():
    import ray

    from rlinf.scheduler.memory_report import probe_node

    return ray.remote(num_cpus=0, max_retries=0)(probe_node)
