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

import datetime
import inspect
import os
import time
import traceback
from typing import Any

from rlinf.scheduler.memory_report import worker_memory
from rlinf.scheduler.pipe import Pipe, PipeEnds
from rlinf.scheduler.transfer import join_link

# Keys of the environment a worker process is started with (see WorkerGroup).
ENV_GROUP = "RLINF_GROUP_NAME"
ENV_NODE_RANK = "RLINF_NODE_RANK"
ENV_ACCELERATORS = "RLINF_ACCELERATORS"
ENV_HAS_GPUS = "RLINF_HAS_GPUS"
#: local mode only: the CUDA index of the worker's first GPU (a Ray worker sees its GPUs as 0..n-1)
ENV_DEVICE_INDEX = "RLINF_DEVICE_INDEX"
#: the hidden keyword argument that carries the run's secret into a worker's construction
SECRET_KWARG = "_rlinf_secret"
_MISSING = object()


def _accepting_secret(init):
    """``init`` wrapped to take (and keep) the run's secret before the worker's own code runs."""

    def __init__(self, *args, _rlinf_secret=None, **kwargs):
        if _rlinf_secret is not None:
            self.__dict__["_rlinf_secret"] = _rlinf_secret
        init(self, *args, **kwargs)

    # Not functools.wraps: Ray reads the signature of inspect.unwrap(__init__), so no __wrapped__;
    # Ray validates constructor arguments against it: show the hidden keyword in it.
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(__init__, attr, getattr(init, attr, None))
    sig = inspect.signature(init)
    params = list(sig.parameters.values())
    hidden = inspect.Parameter(SECRET_KWARG, inspect.Parameter.KEYWORD_ONLY, default=None)
    at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
    __init__.__signature__ = sig.replace(parameters=[*params[:at], hidden, *params[at:]])
    __init__._rlinf_takes_secret = True
    return __init__


class Worker:
    """Base class of everything launched by a :class:`~rlinf.scheduler.WorkerGroup`.

    Attributes are read from the process environment, so subclasses need not call
    ``super().__init__()``. In local mode (``cluster.backend: local``) several workers share one
    process: each instance then carries its own mapping (``_rlinf_env``), consulted first.

    Every subclass's ``__init__`` also takes the run's secret as a hidden keyword argument (given
    by :class:`~rlinf.scheduler.WorkerGroup`), so :attr:`run_secret` is set before it runs.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_rlinf_takes_secret", False):
            cls.__init__ = _accepting_secret(init)

    def __init__(self, *, _rlinf_secret=None):
        if _rlinf_secret is not None:
            self.__dict__["_rlinf_secret"] = _rlinf_secret

    @property
    def run_secret(self):
        """The run's :class:`~rlinf.scheduler.secret.RunSecret` (set before ``__init__`` runs).

        Raises ``RuntimeError`` in an instance made outside a :class:`~rlinf.scheduler.WorkerGroup`.
        """
        secret = self.__dict__.get("_rlinf_secret")
        if secret is None:
            raise RuntimeError(f"{type(self).__name__} has no run secret: it was not started by a "
                               "WorkerGroup (the group hands the secret to each worker it starts)")
        return secret

    def _rlinf_env_value(self, key: str, default: Any = _MISSING) -> str:
        own = self.__dict__.get("_rlinf_env")
        if own is not None and key in own:
            return own[key]
        return os.environ[key] if default is _MISSING else os.environ.get(key, default)

    @property
    def rank(self) -> int:
        """Rank of this process in its group."""
        return int(self._rlinf_env_value("RANK"))

    @property
    def world_size(self) -> int:
        """Number of processes in the group."""
        return int(self._rlinf_env_value("WORLD_SIZE"))

    @property
    def local_rank(self) -> int:
        """Index among this group's processes on the same node."""
        return int(self._rlinf_env_value("LOCAL_RANK"))

    @property
    def group_name(self) -> str:
        """Name of the worker group (the component name by default)."""
        return self._rlinf_env_value(ENV_GROUP)

    @property
    def node_rank(self) -> int:
        """Placement rank of the node this process runs on."""
        return int(self._rlinf_env_value(ENV_NODE_RANK))

    @property
    def accelerators(self) -> tuple[int, ...]:
        """Node-local accelerator ids placed on this process (logical slots on CPU clusters)."""
        raw = self._rlinf_env_value(ENV_ACCELERATORS, "")
        return tuple(int(a) for a in raw.split(",") if a)

    @property
    def device(self):
        """``torch.device`` to compute on: ``cuda:0`` (first visible GPU) on GPU nodes, else ``cpu``."""
        # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
        import torch

        if self._rlinf_env_value(ENV_HAS_GPUS, None) == "1" and torch.cuda.is_available():
            return torch.device("cuda", int(self._rlinf_env_value(ENV_DEVICE_INDEX, "0")))
        return torch.device("cpu")

    def init_process_group(self, backend: str | None = None, timeout_s: float = 300.0) -> None:
        """Initialise ``torch.distributed`` over this group (gloo on CPU, NCCL on GPU).

        Idempotent: a second call does nothing.
        """
        # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
        import torch.distributed as dist

        if dist.is_initialized():
            return
        if backend is None:
            backend = "nccl" if self.device.type == "cuda" else "gloo"
        if backend == "nccl":
            # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
            import torch

            torch.cuda.set_device(self.device)
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))

    def send_tensors(self, link: str, tensors) -> int:
        """Send ``tensors`` (a dict name -> tensor, or a ``transfer.LazyTensors``) over link
        ``link``; this worker must be its source.

        The receivers call :meth:`recv_tensors` / :meth:`recv_tensor_stream` at the same time.
        Returns the bytes sent.
        """
        return self._rlinf_link(link).send(tensors)

    def recv_tensors(self, link: str) -> dict:
        """Receive the dict of tensors the link's source sends with :meth:`send_tensors`."""
        return self._rlinf_link(link).recv()

    def recv_tensor_stream(self, link: str):
        """Receive one bucket at a time: a :class:`~rlinf.scheduler.transfer_stream.TensorStream`
        of ``(name, tensor)`` pairs, each valid until the next bucket; use it in a ``with`` block
        (leaving it receives what was not consumed, keeping the link in step)."""
        return self._rlinf_link(link).recv_stream()

    def pipe(self, name: str, peer_rank: int):
        """This worker's end of pipe ``name`` to rank ``peer_rank`` of the other group
        (:class:`~rlinf.scheduler.pipe.Pipe`; connected on the driver with ``PipeLink.connect``)."""
        return self._rlinf_pipe_ends().get(name, peer_rank)

    def pipes(self, name: str) -> dict:
        """All of this worker's ends of pipe ``name``: peer rank -> pipe (raises if none)."""
        ends = self._rlinf_pipe_ends()
        if not ends.pipes.get(name):
            ends.get(name, -1)  # raises, naming the pipes this worker has
        return dict(ends.pipes[name])

    # ---- called by WorkerGroup; not part of the user API -------------------------------------
    def _rlinf_pipe_ends(self):
        if not hasattr(self, "_rlinf_pipes"):
            self._rlinf_pipes = PipeEnds(self.__dict__.get("_rlinf_secret"))
        return self._rlinf_pipes

    def _rlinf_pipe_refused(self) -> dict[str, int]:
        """Connections this worker's pipe listeners refused (failed handshakes), per pipe name."""
        return dict(self._rlinf_pipe_ends().refused)

    def _rlinf_pipe_listen(self, name, host, expected, peer_group):
        return self._rlinf_pipe_ends().listen(name, host, expected, peer_group)

    def _rlinf_pipe_accept(self, name, timeout_s):
        return self._rlinf_pipe_ends().accept(name, timeout_s)

    def _rlinf_pipe_connect(self, name, peer_rank, peer, host, port, timeout_s):
        self._rlinf_pipe_ends().connect(name, self.rank, peer_rank, peer, host, port, timeout_s)

    def _rlinf_pipe_install(self, name, ends):
        """This worker's ready-made ends of pipe ``name`` (peer rank -> (socket, peer name)),
        replacing the ones of that name (the local backend's socket pairs)."""
        pipes = self._rlinf_pipe_ends()
        pipes.close(name)
        pipes.pipes[name] = {peer_rank: Pipe(sock, name, peer) for peer_rank, (sock, peer) in ends.items()}

    def _rlinf_install_link(self, name, end):
        """This worker's ready-made end of tensor link ``name`` (the local backend's in-memory
        hand-over), placed on this worker's device."""
        end.device = self.device
        if not hasattr(self, "_rlinf_links"):
            self._rlinf_links = {}
        self._rlinf_links[name] = end

    def _rlinf_link(self, name: str):
        links = getattr(self, "_rlinf_links", {})
        if name not in links:
            known = ", ".join(links) or "none"
            raise KeyError(f"no tensor link named {name!r} on this worker (links: {known}); "
                           "create it on the driver with TensorLink.connect(...)")
        return links[name]

    def _rlinf_join_link(self, name, rank, world_size, addr, port, backend, bucket_bytes, timeout_s,
                         one_host=False):
        if not hasattr(self, "_rlinf_links"):
            self._rlinf_links = {}
        self._rlinf_links[name] = join_link(name, rank, world_size, addr, port, backend, bucket_bytes,
                                            timeout_s, self.device, one_host, self.__dict__.get("_rlinf_secret"))

    def _rlinf_link_path(self, name: str) -> str:
        """How link ``name`` moves tensors: ``in place`` (receivers read the source's memory),
        ``staging`` (two-slot shared memory), ``process group`` (broadcasts) or ``in process``
        (local mode)."""
        return self._rlinf_link(name).path

    def _rlinf_device_type(self) -> str:
        return self.device.type

    def _rlinf_call(self, _rlinf_method: str, /, *args: Any, **kwargs: Any) -> tuple:
        """Run one method; returns ``(value, formatted error or None, seconds, memory sample,
        CPU seconds)``.

        A plain tuple and Ray's own argument passing: this wrapper sits on every group call. The
        :class:`~rlinf.scheduler.memory_report.MemorySample` lets the driver name an out-of-memory
        failure (and the last peak of a worker that is gone). CPU seconds: the process's CPU time
        during the call on the Ray backend (each worker is its own process: every thread of it
        counts, its torch threads and any other call it runs at once too), the calling thread's on
        the local backend (groups are threads of the driver; torch's intra-op threads, one per
        call there unless ``OMP_NUM_THREADS`` says more, are not counted). The two CPU-clock reads
        add about 1.4 µs to a call (3.0 -> 4.4 µs for a no-op method, measured in-process).
        """
        clock = time.thread_time if "_rlinf_env" in self.__dict__ else time.process_time
        start, cpu = time.perf_counter(), clock()
        try:
            value = getattr(self, _rlinf_method)(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - the driver re-raises it with the worker's name
            cpu, wall = clock() - cpu, time.perf_counter() - start
            # Drop this wrapper's own frame: the traceback starts in the user's method.
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next))
            return None, text, wall, worker_memory(exc), cpu
        cpu, wall = clock() - cpu, time.perf_counter() - start
        return value, None, wall, worker_memory(), cpu

    def _rlinf_ping(self) -> tuple[str, int]:
        import ray  # lazy: Ray only on the Ray backend (local mode answers pings without calling this)

        return ray.get_runtime_context().get_node_id(), os.getpid()
