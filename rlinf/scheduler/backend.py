"""The scheduler's one seam between "what a run does" and "where its workers run".

A run chooses its backend once, when it makes its cluster (``Cluster.from_config``:
``cluster.backend: ray`` or ``local``); the cluster carries it as ``cluster.backend``. Worker
groups, group calls, tensor links, pipes and channels ask that object for everything that differs
between the two, and never test which one it is:

==========================  =======================================  =====================================
:class:`Backend` method     Ray (:mod:`rlinf.scheduler.ray_backend`)  local (:mod:`rlinf.scheduler.local`)
==========================  =======================================  =====================================
``start_workers``           one Ray actor per placed process         one in-process instance per group
``submit``                  actor method call -> object ref          call on the instance's thread -> future
``wait_any`` / ``all_done``  ``ray.wait``                             ``concurrent.futures.wait``
``result``                  ``ray.get`` (Ray errors -> CallFailed)   ``future.result()``
``stop_workers``            ``ray.kill``                             stop taking calls, close pipes
``probe_node``              a Ray task pinned to the node            this process
``connect_tensor_link``     a gloo / NCCL process group per link     an in-memory hand-over
``connect_pipes``           TCP with the HMAC handshake              socket pairs in this process
``create_channel``          a channel actor (+ same-node socket)     queues on one event-loop thread
==========================  =======================================  =====================================

:class:`CallFailed` is how a backend reports that a call brought back no answer of the worker's;
the group call turns it into the scheduler's errors (:mod:`rlinf.scheduler.errors`).

Which backend ``Channel.create`` / ``Channel.connect`` use (they take no cluster): that of the
cluster this process made last and still holds (:func:`current_backend`); a process that made
none (a Ray worker) uses Ray.

Example:
    >>> from rlinf.scheduler.local.backend import LocalBackend
    >>> from rlinf.scheduler.ray_backend import RayBackend
    >>> [(b.name, b.in_process, isinstance(b, Backend)) for b in (RayBackend(), LocalBackend())]
    [('ray', False, True), ('local', True, True)]
"""

from __future__ import annotations

import abc
import weakref
from collections.abc import Sequence
from typing import Any

from rlinf.scheduler.errors import SchedulerError


class CallFailed(SchedulerError):
    """A call's answer did not come back from the worker.

    Attributes:
        kind: ``"init"`` (the worker's ``__init__`` raised; ``text`` is its traceback),
            ``"died"`` (its process is gone: the group examines why), ``"stopped"`` (it was shut
            down, or cannot take calls) or ``"error"`` (the backend failed to deliver it).
        text: what the backend says.
        monitor: ``"died"`` only: Ray's memory monitor killed it.
    """

    KINDS = ("init", "died", "stopped", "error")

    def __init__(self, kind: str, text: str, monitor: bool = False):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}")
        super().__init__(text)
        self.kind, self.text, self.monitor = kind, text, monitor


class Backend(abc.ABC):
    """How worker groups run: the interface both backends implement (see the module docstring).

    ``handle`` is one worker (a Ray actor handle, or a local instance's executor); ``ref`` is one
    pending answer (a Ray object ref, or a ``concurrent.futures.Future``). A ``ref`` resolves to
    ``Worker._rlinf_call``'s ``(value, error, seconds, memory sample, CPU seconds)`` tuple, or
    ``(value, error, seconds)`` for control calls.
    """

    #: ``"ray"`` or ``"local"`` (what ``cluster.backend`` in the config says)
    name: str = ""
    #: every worker runs in the driver's process
    in_process: bool = False

    # ---- workers ----------------------------------------------------------------------------
    @abc.abstractmethod
    def start_workers(self, cluster: Any, worker_cls: type, placement: Any, name: str, args: Sequence[Any],
                      kwargs: dict, env: dict | None, max_concurrency: int) -> list:
        """Start one worker per process of ``placement``; returns their handles in rank order
        (their ``__init__`` may still be running)."""

    @abc.abstractmethod
    def submit(self, handle: Any, method: str, args: tuple, kwargs: dict, control: bool = False) -> Any:
        """Run ``Worker._rlinf_call(method, *args, **kwargs)`` on ``handle``; returns a ref at once.
        ``control``: a scheduler call (liveness ping) answered even while the worker is busy."""

    @abc.abstractmethod
    def stop_workers(self, handles: list) -> None:
        """End these workers (those already gone are fine)."""

    @abc.abstractmethod
    def probe_node(self, cluster: Any, node: int, pid: int | None, timeout: float) -> Any:
        """:func:`~rlinf.scheduler.memory_report.probe_node` on placement node ``node``; None when
        the node does not answer within ``timeout`` seconds."""

    # ---- answers ----------------------------------------------------------------------------
    @abc.abstractmethod
    def wait_any(self, refs: list, timeout: float | None) -> tuple[list, list]:
        """``(ready, pending)`` once at least one of ``refs`` is ready or ``timeout`` passed."""

    @abc.abstractmethod
    def all_done(self, refs: list) -> bool:
        """True when every one of ``refs`` is ready (without waiting)."""

    @abc.abstractmethod
    def result(self, ref: Any) -> tuple:
        """The answer of a ready ``ref``; raises :class:`CallFailed`."""

    @abc.abstractmethod
    async def result_async(self, ref: Any) -> tuple:
        """``await`` form of :meth:`result`."""

    # ---- links and channels -----------------------------------------------------------------
    @abc.abstractmethod
    def connect_tensor_link(self, name: str, members: list, *, bucket_bytes: int, timeout_s: float,
                            shared_memory: bool | None) -> None:
        """Give every member ``(group, rank)`` its end of tensor link ``name`` (member 0 sends);
        returns once all have it."""

    @abc.abstractmethod
    def connect_pipes(self, name: str, group_a: Any, group_b: Any, pairs: list, timeout_s: float) -> None:
        """One pipe ``name`` per ``(rank in group_a, rank in group_b)`` pair; returns once all are
        connected."""

    @abc.abstractmethod
    def pipe_refused(self, name: str, group_b: Any, ranks: list[int]) -> int:
        """Connections to pipe ``name``'s listeners on ``ranks`` of ``group_b`` refused so far."""

    @abc.abstractmethod
    def create_channel(self, name: str, maxsize: int, node_id: str | None) -> Any:
        """Channel ``name`` (made, or opened when it exists with the same ``maxsize``)."""

    @abc.abstractmethod
    def connect_channel(self, name: str, timeout: float) -> Any:
        """Open existing channel ``name``, waiting up to ``timeout`` seconds for it."""


#: the clusters this process made, oldest first (weakly: a cluster nobody holds is gone)
_CLUSTERS: list[weakref.ref] = []


def note_cluster(cluster: Any) -> None:
    """Called by a cluster when it is made: from now on, the channels this process creates
    without naming a cluster use its backend."""
    _CLUSTERS[:] = [r for r in _CLUSTERS if r() is not None and r() is not cluster] + [weakref.ref(cluster)]


def forget_cluster(cluster: Any = None) -> None:
    """Stop using ``cluster``'s backend for new channels (``None``: every in-process one; for
    tests that make a local cluster while a Ray one lives on)."""
    def keep(c):
        return c is not None and (c is not cluster if cluster is not None else not c.backend.in_process)

    _CLUSTERS[:] = [r for r in _CLUSTERS if keep(r())]


def current_backend() -> Backend | None:
    """The backend of the cluster this process made last and still holds; None when none."""
    for ref in reversed(_CLUSTERS):
        cluster = ref()
        if cluster is not None:
            return cluster.backend
    return None
