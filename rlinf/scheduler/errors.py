"""Errors raised by the scheduler runtime to the driver.

Every error names the worker (group name and rank) and its node, so a failure in a 64-process
job points at one process.
"""

from __future__ import annotations


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
        SchedulerError.__init__(
            self, f"{dead.worker} on node {dead.node} is dead ({_detail(dead)}); "
                  f"{survivor_error.worker} noticed it in {survivor_error.method}(): "
                  f"{lines[-1] if lines else 'no message'}")


def _detail(err: WorkerDiedError) -> str:
    text = str(err)
    return text.split("): ", 1)[1] if "): " in text else text


class CallTimeoutError(SchedulerError, TimeoutError):
    """A group call did not finish within the timeout; names the ranks still running."""

    def __init__(self, group: str, method: str, pending_ranks: list[int], timeout: float):
        self.group, self.method, self.pending_ranks = group, method, pending_ranks
        super().__init__(
            f"{group}.{method}() still running on ranks {pending_ranks} after {timeout:g} s"
        )


class ClusterError(SchedulerError):
    """The Ray cluster does not match what the placement asks for."""
