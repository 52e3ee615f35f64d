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

from collections.abc import Sequence
from typing import Any

from rlinf.scheduler.backend import Backend
from rlinf.scheduler.call_stats import CallStats
from rlinf.scheduler.errors import OutOfMemoryKilledError, WorkerDiedError
from rlinf.scheduler.group_call import GroupCall
from rlinf.scheduler.memory_report import judge_death
from rlinf.scheduler.nodes import ClusterBase
from rlinf.scheduler.placement import ComponentPlacement
from rlinf.scheduler.worker import Worker


class WorkerGroup:
    """The processes of one component: one worker per placed process, run by the cluster's
    backend (a Ray actor each, or one instance in this process in local mode).

    Create with :meth:`launch`. Any public method of the worker class can be called on the group:
    ``group.step(batch)`` is ``group.execute("step", batch)`` and returns a
    :class:`~rlinf.scheduler.GroupCall`.
    """

    def __init__(self, cluster: ClusterBase, placement: ComponentPlacement, name: str,
                 worker_cls: type[Worker], actors: list):
        self.cluster, self.placement, self.name = cluster, placement, name
        self.worker_cls = worker_cls
        self.actors = actors
        #: rank -> the :class:`~rlinf.scheduler.memory_report.MemorySample` of its last answer
        self.last_memory: dict = {}
        #: per method: calls, wall and CPU seconds inside the workers, per rank (the driver reads and resets it)
        self.call_stats = CallStats()
        self._last_method: dict[int, str] = {}
        self._deaths: dict = {}  # rank -> (DeathVerdict, method): a dead worker is examined once

    @classmethod
    def launch(
        cls,
        cluster: ClusterBase,
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
        actors = cluster.backend.start_workers(cluster, worker_cls, placement, name, tuple(args),
                                               dict(kwargs or {}), env, max_concurrency)
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

    @property
    def backend(self) -> Backend:
        """The backend that runs this group's workers (its cluster's)."""
        return self.cluster.backend

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

    def _submit(self, actor, method: str, args: tuple, kwargs: dict, control: bool = False):
        """One rank's ``_rlinf_call``: a ref of the backend (a Ray object ref, a future)."""
        return self.backend.submit(actor, method, args, kwargs, control)

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
        return self.backend.probe_node(self.cluster, node, pid, timeout)

    def shutdown(self) -> None:
        """End every worker of the group (local mode: stop its threads taking calls)."""
        actors, self.actors = self.actors, []
        self.backend.stop_workers(actors)
