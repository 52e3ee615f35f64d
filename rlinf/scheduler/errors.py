"""Errors raised by the scheduler runtime to the driver.

Every error names the worker (group name and rank) and its node, so a failure in a 64-process
job points at one process.
"""

from __future__ import annotations

from rlinf.utils.typed_config import ConfigError


class SchedulerError(RuntimeError):
    """Base class of runtime errors raised by :mod:`rlinf.scheduler`."""


class WorkerError(SchedulerError):
    """A worker method raised an exception.

    Attributes:
        worker: ``"<group>[<rank>]"``.
        node: node rank the worker runs on.
        method: the method that failed.
        remote_traceback: the traceback printed in the worker process.
    """

    def __init__(self, worker: str, node: int, method: str, remote_traceback: str):
        self.worker, self.node, self.method = worker, node, method
        self.remote_traceback = remote_traceback
        super().__init__(
            f"{worker} on node {node} raised in {method}():\n{remote_traceback.rstrip()}"
        )


class WorkerDiedError(SchedulerError):
    """A worker process died (killed, out of memory, segfault) before answering a call."""

    def __init__(self, worker: str, node: int, method: str, detail: str):
        self.worker, self.node, self.method = worker, node, method
        super().__init__(f"{worker} on node {node} died during {method}(): {detail}")


class PeerDiedError(WorkerDiedError):
    """A worker raised because a peer it talks to (a collective, a tensor link, a pipe) died: the
    dead worker is named first, the survivor's error follows.

    Attributes:
        worker, node: the dead worker and its node.
        noticed_by, method: the surviving worker and the method that failed.
        survivor_error: the survivor's :class:`WorkerError` (its traceback included).
    """

    def __init__(self, dead: WorkerDiedError, survivor_error: WorkerError):
        self.worker, self.node, self.method = dead.worker, dead.node, survivor_error.method
        self.noticed_by = survivor_error.worker
        self.survivor_error = survivor_error
        lines = [line for line in survivor_error.remote_traceback.strip().splitlines() if line.strip()]
        head = str(dead) if isinstance(dead, OutOfMemoryError) else \
            f"{dead.worker} on node {dead.node} is dead ({_detail(dead)})"
        SchedulerError.__init__(
            self, f"{head}; {survivor_error.worker} noticed it in {survivor_error.method}(): "
                  f"{lines[-1] if lines else 'no message'}")


def _detail(err: WorkerDiedError) -> str:
    text = str(err)
    return text.split("): ", 1)[1] if "): " in text else text


class OutOfMemoryError(SchedulerError):
    """A worker ran out of memory: killed for it (:class:`OutOfMemoryKilledError`) or a call
    raised it (:class:`OutOfMemoryRaisedError`). Its message is one line::

        actor[1] on node 0 ran out of memory in update() (killed by the kernel's OOM killer: ...;
        node 0: 22.9/23.5 GiB used, 0.6 available; actor[1]'s last peak 20.1 GiB RSS)

    Attributes:
        worker, node, method: who and in which call.
        device: True for GPU memory.
        cause: what killed it or what it raised (one phrase).
        memory: the node's (or GPU's) memory figures, e.g. ``node 0: 22.9/23.5 GiB used, 0.6
            available`` (None when unknown).
        peak: the worker's last peak, e.g. ``20.1 GiB RSS`` (None when it never answered).
        hint: the sizes the step was given and what to lower (None when the step gave none).
        steps_done: training steps finished when it happened (set by the runner; None: unknown).
    """

    def _setup(self, worker: str, node: int, method: str, cause: str, *, device: bool = False,
               memory: str | None = None, peak: str | None = None, hint: str | None = None) -> None:
        self.worker, self.node, self.method = worker, node, method
        self.device, self.cause, self.memory, self.peak, self.hint = device, cause, memory, peak, hint
        self.steps_done: int | None = None
        SchedulerError.__init__(self, self.summary())

    def summary(self) -> str:
        """The parenthesis of the message: cause; memory figures; hint; last peak."""
        parts = [self.cause, self.memory or "node memory unknown", self.hint,
                 f"{self.worker}'s last peak {self.peak}" if self.peak else f"{self.worker}'s peak unknown"]
        return "; ".join(p for p in parts if p)

    def __str__(self) -> str:
        what = "GPU memory" if self.device else "memory"
        when = f" after {self.steps_done} training steps" if self.steps_done is not None else ""
        return f"{self.worker} on node {self.node} ran out of {what} in {self.method}(){when} ({self.summary()})"


class OutOfMemoryKilledError(OutOfMemoryError, WorkerDiedError):
    """A worker killed for memory: by Ray's memory monitor, or by the kernel's OOM killer (told by
    the kernel log or a kill counter of its node; a plain SIGKILL stays a :class:`WorkerDiedError`)."""

    def __init__(self, worker: str, node: int, method: str, cause: str, **figures):
        self._setup(worker, node, method, cause, **figures)


class OutOfMemoryRaisedError(OutOfMemoryError, WorkerError):
    """A worker's call raised ``MemoryError`` or a CUDA out-of-memory error; the process lives.

    Attributes (besides :class:`OutOfMemoryError`'s): remote_traceback.
    """

    def __init__(self, worker: str, node: int, method: str, cause: str, remote_traceback: str, **figures):
        self.remote_traceback = remote_traceback
        self._setup(worker, node, method, cause, **figures)


class CallTimeoutError(SchedulerError, TimeoutError):
    """A group call did not finish within the timeout; names the ranks still running."""

    def __init__(self, group: str, method: str, pending_ranks: list[int], timeout: float):
        self.group, self.method, self.pending_ranks = group, method, pending_ranks
        super().__init__(
            f"{group}.{method}() still running on ranks {pending_ranks} after {timeout:g} s"
        )


class ClusterError(SchedulerError):
    """The Ray cluster does not match what the placement asks for."""


class UnauthenticatedRayError(ConfigError, ClusterError):
    """A run of several nodes would use a Ray cluster attached without token authentication; the
    message names ``cluster.allow_unauthenticated_ray`` (a :class:`ConfigError` for the config
    key, a :class:`ClusterError` for ``Cluster(...)``)."""
