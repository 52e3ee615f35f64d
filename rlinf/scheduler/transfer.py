"""Group-to-group tensor transfer: one rank of a group sends a dict of tensors to ranks of another.

This is what actor -> rollout weight sync is built on. A :class:`TensorLink` is a dedicated
``torch.distributed`` process group (gloo on CPU, NCCL when every member has CUDA) made from a
``TCPStore``, so it coexists with each group's own default process group. The source is link
rank 0; a send is a broadcast of (1) the names, shapes and dtypes and (2) the tensors packed into
per-dtype buckets of at most ``bucket_bytes`` (a tensor larger than that goes alone, uncopied).

Driver side::

    link = TensorLink.connect("weights", actor_group, 0, rollout_group)

Worker side (both calls run concurrently, driven by two group calls)::

    # in the actor worker, rank 0
    self.send_tensors("weights", model.state_dict())
    # in every rollout worker
    state = self.recv_tensors("weights")

Example:
    >>> from rlinf.scheduler.transfer import plan_buckets
    >>> import torch
    >>> specs = [("a", torch.Size([4]), torch.float32), ("b", torch.Size([2]), torch.int64),
    ...          ("c", torch.Size([8]), torch.float32)]
    >>> plan_buckets(specs, bucket_bytes=32)
    [[0], [2], [1]]
"""

from __future__ import annotations

import datetime
import pickle
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from rlinf.scheduler.worker_group import WorkerGroup

DEFAULT_BUCKET_BYTES = 256 * 2**20


@dataclass
class _LinkState:
    name: str
    rank: int
    process_group: Any
    device: Any
    bucket_bytes: int
    backend: str


@dataclass(frozen=True)
class _Abort:
    """Sent instead of the specs when the sender cannot send: receivers raise at once."""

    reason: str


def _unsendable(tensors: Any, backend: str) -> str | None:
    """Why ``tensors`` cannot be sent (``None`` when it can): not a dict of tensors, or a dtype
    the backend cannot carry (gloo has no float8)."""
    import torch

    if not isinstance(tensors, dict):
        return f"expected a dict of tensors, got {type(tensors).__name__}"
    for name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            return f"{name!r} is a {type(value).__name__}, not a tensor (drop or convert it first)"
        if backend == "gloo" and "float8" in str(value.dtype):
            return f"{name!r} has dtype {value.dtype}, which gloo cannot send; cast it first"
    return None


def plan_buckets(specs: Sequence[tuple[str, Any, Any]], bucket_bytes: int) -> list[list[int]]:
    """Group tensor indices by dtype into buckets of at most ``bucket_bytes`` (order kept per dtype).

    A tensor of ``bucket_bytes`` or more gets a bucket of its own.
    """
    import math

    by_dtype: dict[Any, list[int]] = {}
    for i, (_, _, dtype) in enumerate(specs):
        by_dtype.setdefault(dtype, []).append(i)
    buckets: list[list[int]] = []
    for dtype, indices in by_dtype.items():
        current, size = [], 0
        itemsize = _itemsize(dtype)
        for i in indices:
            nbytes = math.prod(specs[i][1]) * itemsize
            if current and size + nbytes > bucket_bytes:
                buckets.append(current)
                current, size = [], 0
            current.append(i)
            size += nbytes
        if current:
            buckets.append(current)
    return buckets


def _itemsize(dtype) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


class TensorLink:
    """A driver-side handle on a link between ``src_group[src_rank]`` and ranks of ``dst_group``."""

    def __init__(self, name: str, members: list[tuple["WorkerGroup", int]]):
        self.name, self.members = name, members

    @classmethod
    def connect(
        cls,
        name: str,
        src_group: "WorkerGroup",
        src_rank: int,
        dst_group: "WorkerGroup",
        dst_ranks: Sequence[int] | None = None,
        *,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        timeout_s: float = 300.0,
    ) -> "TensorLink":
        """Build the link's process group on every member and return once all have joined.

        Args:
            name: link name, used by ``send_tensors(name, ...)`` / ``recv_tensors(name)``.
            src_group, src_rank: the sending worker.
            dst_group, dst_ranks: the receiving workers (default: every rank of ``dst_group``).
            bucket_bytes: largest packed bucket; bigger tensors travel alone.
            timeout_s: how long a member waits in a collective before raising.
        """
        from rlinf.scheduler.cluster import free_port_on

        dst_ranks = list(range(dst_group.world_size)) if dst_ranks is None else list(dst_ranks)
        members = [(src_group, src_rank)] + [(dst_group, r) for r in dst_ranks]
        seen = [(g.name, r) for g, r in members]
        for g, r in members:
            if not 0 <= r < g.world_size:
                raise IndexError(f"{g.name} has ranks 0-{g.world_size - 1}, not {r}")
        if len(set(seen)) != len(seen):
            raise ValueError(f"tensor link {name!r}: a worker appears twice in {seen}; a worker "
                             "cannot send to itself")
        devices = [g._execute("_rlinf_device_type", ranks=[r]) for g, r in members]
        backend = "nccl" if all(d.wait(timeout=60)[0] == "cuda" for d in devices) else "gloo"
        src_node = src_group.cluster.node(src_group.placement.processes[src_rank].node)
        port = free_port_on(src_node)
        calls = [
            g._execute("_rlinf_join_link", name, link_rank, len(members), src_node.ip, port,
                       backend, bucket_bytes, timeout_s, ranks=[r])
            for link_rank, (g, r) in enumerate(members)
        ]
        for call in calls:
            call.wait(timeout=timeout_s)
        return cls(name, members)


def join_link(name: str, rank: int, world_size: int, addr: str, port: int, backend: str,
              bucket_bytes: int, timeout_s: float, device) -> _LinkState:
    """Worker side of :meth:`TensorLink.connect`: build the link's process group."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(addr, port, world_size, is_master=(rank == 0), timeout=timeout)
    store = dist.PrefixStore(f"rlinf-link/{name}/", store)
    if backend == "nccl":
        group = dist.ProcessGroupNCCL(store, rank, world_size)
    else:
        group = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    return _LinkState(name, rank, group, device, bucket_bytes, backend)


def send_tensors(link: _LinkState, tensors: dict[str, Any]) -> int:
    """Broadcast ``tensors`` from link rank 0 to all members; returns the bytes sent."""
    import torch

    if link.rank != 0:
        raise RuntimeError(f"link {link.name!r}: only its source (rank 0) sends; this is rank {link.rank}")
    problem = _unsendable(tensors, link.backend)
    if problem:
        _broadcast_object(link, _Abort(problem))  # receivers fail now, not at the link timeout
        raise ValueError(f"link {link.name!r}: {problem}")
    names = list(tensors)
    specs = [(n, tuple(tensors[n].shape), tensors[n].dtype) for n in names]
    _broadcast_object(link, specs)
    sent = 0
    for bucket in plan_buckets(specs, link.bucket_bytes):
        if len(bucket) == 1:
            flat = tensors[names[bucket[0]]].detach().to(link.device).contiguous()
        else:
            flat = torch.cat([tensors[names[i]].detach().to(link.device).reshape(-1) for i in bucket])
        link.process_group.broadcast(flat, 0).wait()
        sent += flat.numel() * flat.element_size()
    return sent


def recv_tensors(link: _LinkState) -> dict[str, Any]:
    """Receive what the source's :func:`send_tensors` broadcasts; returns name -> tensor."""
    import math

    import torch

    if link.rank == 0:
        raise RuntimeError(f"link {link.name!r}: its source (rank 0) cannot receive")
    specs = _broadcast_object(link, None)
    if isinstance(specs, _Abort):
        raise RuntimeError(f"link {link.name!r}: the sender aborted: {specs.reason}")
    out: dict[str, Any] = {}
    for bucket in plan_buckets(specs, link.bucket_bytes):
        dtype = specs[bucket[0]][2]
        numels = [math.prod(specs[i][1]) for i in bucket]
        flat = torch.empty(sum(numels), dtype=dtype, device=link.device)
        link.process_group.broadcast(flat, 0).wait()
        for i, part in zip(bucket, torch.split(flat, numels)):
            out[specs[i][0]] = part.view(specs[i][1])
    return {name: out[name] for name, _, _ in specs}


def _broadcast_object(link: _LinkState, obj: Any) -> Any:
    """Broadcast a small picklable object from rank 0 (length first, then bytes)."""
    import torch

    if link.rank == 0:
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8).to(link.device)
        size = torch.tensor([data.numel()], dtype=torch.int64, device=link.device)
    else:
        size = torch.zeros(1, dtype=torch.int64, device=link.device)
    link.process_group.broadcast(size, 0).wait()
    if link.rank != 0:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=link.device)
    link.process_group.broadcast(data, 0).wait()
    return obj if link.rank == 0 else pickle.loads(data.cpu().numpy().tobytes())
