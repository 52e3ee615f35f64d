"""The :class:`Worker` base class: one process of a worker group.

Subclass it and write plain methods; :class:`~rlinf.scheduler.WorkerGroup` launches one process
per placed rank and calls the methods on all (or chosen) ranks. Inside a worker, ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` are set,
so ``torch.distributed.init_process_group()`` (or :meth:`Worker.init_process_group`) works with no
arguments; on GPUs ``CUDA_VISIBLE_DEVICES`` holds exactly the placed devices.

Example:
    >>> from rlinf.scheduler import Worker
    >>> class Hello(Worker):
    ...     def hello(self, name):
    ...         return f"{self.group_name}[{self.rank}] of {self.world_size} greets {name}"
    >>> Hello.__mro__[1].__name__
    'Worker'
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass
from typing import Any

# Keys of the environment a worker process is started with (see WorkerGroup).
ENV_GROUP = "RLINF_GROUP_NAME"
ENV_NODE_RANK = "RLINF_NODE_RANK"
ENV_ACCELERATORS = "RLINF_ACCELERATORS"
ENV_HAS_GPUS = "RLINF_HAS_GPUS"


@dataclass
class CallResult:
    """What a worker returns for one call: the value or the formatted exception, and time spent."""

    value: Any = None
    error: str | None = None
    elapsed: float = 0.0


class Worker:
    """Base class of everything launched by a :class:`~rlinf.scheduler.WorkerGroup`.

    Attributes are read from the process environment, so subclasses need not call
    ``super().__init__()``.
    """

    @property
    def rank(self) -> int:
        """Rank of this process in its group."""
        return int(os.environ["RANK"])

    @property
    def world_size(self) -> int:
        """Number of processes in the group."""
        return int(os.environ["WORLD_SIZE"])

    @property
    def local_rank(self) -> int:
        """Index among this group's processes on the same node."""
        return int(os.environ["LOCAL_RANK"])

    @property
    def group_name(self) -> str:
        """Name of the worker group (the component name by default)."""
        return os.environ[ENV_GROUP]

    @property
    def node_rank(self) -> int:
        """Placement rank of the node this process runs on."""
        return int(os.environ[ENV_NODE_RANK])

    @property
    def accelerators(self) -> tuple[int, ...]:
        """Node-local accelerator ids placed on this process (logical slots on CPU clusters)."""
        raw = os.environ.get(ENV_ACCELERATORS, "")
        return tuple(int(a) for a in raw.split(",") if a)

    @property
    def device(self):
        """``torch.device`` to compute on: ``cuda:0`` (first visible GPU) on GPU nodes, else ``cpu``."""
        import torch

        if os.environ.get(ENV_HAS_GPUS) == "1" and torch.cuda.is_available():
            return torch.device("cuda", 0)
        return torch.device("cpu")

    def init_process_group(self, backend: str | None = None, timeout_s: float = 300.0) -> None:
        """Initialise ``torch.distributed`` over this group (gloo on CPU, NCCL on GPU).

        Idempotent: a second call does nothing.
        """
        import datetime

        import torch.distributed as dist

        if dist.is_initialized():
            return
        if backend is None:
            backend = "nccl" if self.device.type == "cuda" else "gloo"
        if backend == "nccl":
            import torch

            torch.cuda.set_device(self.device)
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))

    # ---- called by WorkerGroup; not part of the user API -------------------------------------
    def _rlinf_call(self, method: str, args: tuple, kwargs: dict) -> CallResult:
        start = time.perf_counter()
        try:
            value = getattr(self, method)(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - the driver re-raises it with the worker's name
            # Drop this wrapper's own frame: the traceback starts in the user's method.
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next))
            return CallResult(error=text, elapsed=time.perf_counter() - start)
        return CallResult(value=value, elapsed=time.perf_counter() - start)

    def _rlinf_ping(self) -> tuple[str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()
