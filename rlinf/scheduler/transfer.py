"""Group-to-group tensor transfer: one rank of a group sends a dict of tensors to ranks of another.

This is what actor -> rollout weight sync is built on. On Ray, a
:class:`~rlinf.scheduler.links.TensorLink` is a dedicated ``torch.distributed`` process group (gloo
on CPU, NCCL when every member has CUDA) made from a ``TCPStore``, so it coexists with each
group's own default process group. The source is link rank 0; a send is a broadcast of (1) the
names, shapes and dtypes and (2) the tensors packed into per-dtype buckets of at most
``bucket_bytes`` (a larger tensor goes in pieces). When every
member sits on the source's node and the link is on CPU, the buckets go through a two-slot
shared-memory staging file instead of the process group (see :mod:`rlinf.scheduler.transfer_stream`).

A source may be a dict or a :class:`LazyTensors` (names, shapes and dtypes known up front, each
tensor made only when its bucket is packed: an FSDP actor gathers one parameter at a time). A
receiver may take a dict (``recv_tensors``) or a :class:`~rlinf.scheduler.transfer_stream.TensorStream`
(``recv_tensor_stream``: one bucket at a time, no full extra copy of the weights).

Driver side (:class:`~rlinf.scheduler.links.TensorLink`, which asks the run's backend: this module
is the Ray backend's worker side; ``cluster.backend: local`` hands tensors over in memory,
:mod:`rlinf.scheduler.local.links`)::

    link = TensorLink.connect("weights", actor_group, 0, rollout_group)

Worker side (both calls run concurrently, driven by two group calls)::

    # in the actor worker, rank 0
    self.send_tensors("weights", model.state_dict())
    # in every rollout worker
    state = self.recv_tensors("weights")
    # ... or one bucket at a time, straight into the engine
    with self.recv_tensor_stream("weights") as stream:
        engine.load_weights(stream, specs=stream.specs)

Example:
    >>> from rlinf.scheduler.transfer import plan_send
    >>> import torch
    >>> specs = [("a", torch.Size([4]), torch.float32), ("b", torch.Size([2]), torch.int64),
    ...          ("c", torch.Size([8]), torch.float32)]
    >>> plan_send(specs, bucket_bytes=32)
    [[(0, 0, 4)], [(2, 0, 8)], [(1, 0, 2)]]
"""

from __future__ import annotations

import datetime
import hmac
import os
import pickle
from dataclasses import dataclass
from typing import Any, Protocol

from rlinf.scheduler.cma import probe
from rlinf.scheduler.errors import SchedulerError
from rlinf.scheduler.transfer_stream import (
    Header,
    Piece,
    SourceReader,
    Staging,
    TensorStream,
    bucket_buffers,
    nbytes_of,
    pack_bucket,
    plan_send,
    send_order,
    specs_of,
    write_bucket,
)

_MAC_BYTES = 32  # HMAC-SHA256 after each header (RunSecret.mac)

__all__ = ["DEFAULT_BUCKET_BYTES", "LazyTensors", "Piece", "TensorStream", "plan_send", "recv_tensor_stream",
           "recv_tensors", "send_order", "send_tensors"]

DEFAULT_BUCKET_BYTES = 64 * 2**20
#: Piece size of cross-memory-attach reads (receivers read pieces in parallel threads).
CMA_PIECE_BYTES = 16 * 2**20
#: Bucket size of the one-host shared-memory path (the staging holds two).
STAGING_BUCKET_BYTES = 64 * 2**20


class LazyTensors(Protocol):
    """A source whose tensors are made on demand, in :func:`send_order` of its specs."""

    def tensor_specs(self) -> list[tuple[str, tuple, Any]]:
        """``(name, shape, dtype)`` of every tensor, without making any."""

    def __getitem__(self, name: str) -> Any:
        """The tensor ``name`` (may be a collective: called in the same order on every rank)."""


@dataclass
class _LinkState:
    name: str
    rank: int
    process_group: Any
    device: Any
    bucket_bytes: int
    backend: str
    one_host: bool = False
    staging: Staging | None = None
    cma: bool = False  # every receiver can read the source's memory (cross-memory attach)
    buffers: list | None = None  # two reused bucket buffers (process-group path), made on first use
    secret: Any = None  # the run's RunSecret: headers carry its MAC, checked before unpickling

    # what a worker's link end offers, whichever backend made it (local: rlinf.scheduler.local.links)
    def send(self, tensors: dict[str, Any] | LazyTensors) -> int:
        return send_tensors(self, tensors)

    def recv_stream(self, own: bool = False) -> TensorStream:
        return recv_tensor_stream(self, own)

    def recv(self) -> dict[str, Any]:
        return recv_tensors(self)

    @property
    def path(self) -> str:
        """``in place`` (receivers read the source's memory), ``staging`` (two-slot shared
        memory) or ``process group`` (broadcasts)."""
        return "in place" if self.cma else "staging" if self.one_host else "process group"


@dataclass(frozen=True)
class _Abort:
    """Sent instead of the specs when the sender cannot send: receivers raise at once."""

    reason: str


def join_link(name: str, rank: int, world_size: int, addr: str, port: int, backend: str,
              bucket_bytes: int, timeout_s: float, device, one_host: bool = False, secret=None) -> _LinkState:
    """Worker side of :meth:`~rlinf.scheduler.links.TensorLink.connect` on Ray: build the link's process group."""
    # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(addr, port, world_size, is_master=(rank == 0), timeout=timeout)
    store = dist.PrefixStore(f"rlinf-link/{name}/", store)
    if backend == "nccl":
        group = dist.ProcessGroupNCCL(store, rank, world_size)
    else:
        group = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    link = _LinkState(name, rank, group, device, bucket_bytes, backend, one_host, secret=secret)
    if one_host:
        link.cma = _probe_cma(link)
    return link


def _probe_cma(link: _LinkState) -> bool:
    """Can every receiver read the source's memory? (one read of a random probe, then a MIN
    all-reduce so that all members agree)."""
    # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
    import torch
    import torch.distributed as dist

    if link.rank == 0:
        sample = torch.randint(0, 256, (64,), dtype=torch.uint8)
        _broadcast_object(link, (os.getpid(), sample.data_ptr(), bytes(sample.numpy().tobytes())))
        ok = torch.ones(1, dtype=torch.int32)
    else:
        pid, address, expected = _broadcast_object(link, None)
        ok = torch.tensor([1 if probe(pid, address, expected) else 0], dtype=torch.int32)
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.MIN
    link.process_group.allreduce([ok], opts).wait()
    return bool(ok.item())


def send_tensors(link: _LinkState, tensors: dict[str, Any] | LazyTensors) -> int:
    """Send ``tensors`` from link rank 0 to all members; returns the bytes sent.

    Returns when every receiver has the data (one-host path: has copied the last bucket out)."""
    if link.rank != 0:
        raise RuntimeError(f"link {link.name!r}: only its source (rank 0) sends; this is rank {link.rank}")
    specs, problem = specs_of(tensors, link.backend)
    if problem:
        _broadcast_object(link, _Abort(problem))  # receivers fail now, not at the link timeout
        raise ValueError(f"link {link.name!r}: {problem}")
    reader = SourceReader(tensors, specs)
    if not link.one_host:
        # Two reused buffers: bucket i is packed while bucket i - 1 is still on the wire.
        _broadcast_object(link, Header(specs, link.bucket_bytes))
        buffers, sent, pending, in_flight = bucket_buffers(link), 0, None, None
        for index, bucket in enumerate(plan_send(specs, link.bucket_bytes)):
            flat = pack_bucket(reader, bucket, buffers[index % 2])
            if pending is not None:
                pending.wait()
            # `in_flight` keeps a bucket that is a view of a gathered temporary alive until sent
            pending, in_flight = link.process_group.broadcast(flat, 0), flat
            sent += flat.numel()
        if pending is not None:
            pending.wait()
        del in_flight
        return sent
    addresses = _stable_addresses(tensors, specs) if link.cma else None
    if addresses is not None:  # receivers read each tensor where it is: one copy in all
        _broadcast_object(link, Header(specs, CMA_PIECE_BYTES, source_pid=os.getpid(), addresses=addresses))
        link.process_group.barrier().wait()  # every receiver has read what it needs
        return sum(nbytes_of(spec) for spec in specs)
    bucket_bytes = min(link.bucket_bytes, STAGING_BUCKET_BYTES)
    if link.staging is None or link.staging.slot_bytes != bucket_bytes:
        if link.staging is not None:
            link.staging.unlink()
        link.staging = Staging.create(link.name, bucket_bytes)
    staging = link.staging
    _broadcast_object(link, Header(specs, bucket_bytes, staging.path))
    group, sent = link.process_group, 0
    buckets = plan_send(specs, bucket_bytes)
    for index, bucket in enumerate(buckets):
        sent += write_bucket(staging.slot(index), reader, bucket)
        if index > 0:
            group.barrier().wait()  # receivers are done with bucket index - 1
        group.barrier().wait()  # bucket `index` is ready
        if index == 0:
            staging.unlink()  # every receiver has mapped the file by now
    if buckets:
        group.barrier().wait()  # the last slot is free again
    return sent


def _stable_addresses(tensors, specs: list) -> tuple | None:
    """Addresses of the source's tensors when receivers may read them in place: a dict, or a lazy
    source that says its tensors are its own memory (``stable_memory``), every tensor a
    contiguous CPU tensor of the announced shape. ``None`` otherwise (then buckets are staged)."""
    if not (isinstance(tensors, dict) or getattr(tensors, "stable_memory", False)):
        return None
    out = []
    for name, shape, dtype in specs:
        value = tensors[name].detach()
        if value.device.type != "cpu" or not value.is_contiguous() or tuple(value.shape) != tuple(shape) \
                or value.dtype != dtype:
            return None
        out.append(value.data_ptr())
    return tuple(out)


def recv_tensor_stream(link: _LinkState, own: bool = False) -> TensorStream:
    """Start receiving what the source's :func:`send_tensors` sends: the header now, the tensors as
    the returned stream is iterated (``own=True``: each tensor is a fresh copy that stays valid)."""
    if link.rank == 0:
        raise RuntimeError(f"link {link.name!r}: its source (rank 0) cannot receive")
    header = _broadcast_object(link, None)
    if isinstance(header, _Abort):
        raise RuntimeError(f"link {link.name!r}: the sender aborted: {header.reason}")
    if header.staging_path and (link.staging is None or link.staging.path != header.staging_path):
        link.staging = Staging(header.staging_path, header.bucket_bytes, create=False)
    return TensorStream(link, header, link.staging if header.staging_path else None, own=own)


def recv_tensors(link: _LinkState) -> dict[str, Any]:
    """Receive what the source's :func:`send_tensors` sends; returns name -> tensor (owned)."""
    stream = recv_tensor_stream(link, own=True)
    got = dict(stream)
    return {name: got[name] for name, _, _ in stream.specs}


def _broadcast_object(link: _LinkState, obj: Any) -> Any:
    """Broadcast a small picklable object from rank 0 (length first, then bytes).

    The bytes end with an HMAC of the pickle under the run's secret; a receiver checks it before
    unpickling, so a process that slipped into the link's rendezvous (an open TCP store) cannot
    make a worker unpickle its bytes."""
    # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
    import torch

    if link.secret is None:
        raise SchedulerError(f"link {link.name!r}: no run secret in this worker (not started by a WorkerGroup)")
    if link.rank == 0:
        blob = pickle.dumps(obj)
        blob += link.secret.mac(b"link", link.name.encode(), blob)
        data = torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(link.device)
        size = torch.tensor([data.numel()], dtype=torch.int64, device=link.device)
    else:
        size = torch.zeros(1, dtype=torch.int64, device=link.device)
    link.process_group.broadcast(size, 0).wait()
    if link.rank != 0:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=link.device)
    link.process_group.broadcast(data, 0).wait()
    if link.rank == 0:
        return obj
    blob = data.cpu().numpy().tobytes()
    blob, mac = blob[:-_MAC_BYTES], blob[-_MAC_BYTES:]
    if not hmac.compare_digest(mac, link.secret.mac(b"link", link.name.encode(), blob)):
        raise SchedulerError(f"link {link.name!r}: a header without the run's proof arrived; refused unread "
                             "(is a process outside the run on the link's rendezvous port?)")
    return pickle.loads(blob)
