"""The data path of a :class:`~rlinf.scheduler.links.TensorLink` send: buckets, staging, streams.

A send is (1) a header broadcast over the link's process group: the names, shapes and dtypes of
the tensors (and, on one host, where the staging memory is), then (2) the tensors in buckets of
one dtype, in :func:`send_order`. A bucket holds whole tensors or one *piece* of a tensor larger
than a bucket (a contiguous run of its flattened elements), so memory in flight is bounded by
the bucket size whatever the largest tensor. Two ways to move a bucket:

* **process group** (across hosts, and for CUDA / NCCL): one ``broadcast`` per bucket into a
  buffer the receiver reuses.
* **one host, CPU** (every member on the source's node, gloo): a shared-memory staging file in
  ``/dev/shm`` with two slots of one bucket each. The source writes bucket ``i`` into slot
  ``i % 2`` while the receivers copy bucket ``i - 1`` out of the other; two barriers per bucket
  keep the turns. No bytes cross a socket and nothing is allocated per send once the staging
  exists.

Receivers get a :class:`TensorStream`: :meth:`TensorStream.pieces` for consumers that can copy a
piece into place (an HF rollout engine), or plain iteration for whole ``(name, tensor)`` pairs (a
tensor that came in pieces is assembled). Either way a view is valid until the stream moves to
the next bucket.

Example (the order is independent of bucket sizes: dtypes by first appearance, then as given):
    >>> import torch
    >>> specs = [("a", (4,), torch.float32), ("b", (2,), torch.int64), ("c", (8,), torch.float32)]
    >>> send_order(specs)
    [0, 2, 1]
    >>> plan_send(specs, bucket_bytes=16)   # c (32 bytes) travels in two pieces
    [[(0, 0, 4)], [(2, 0, 4)], [(2, 4, 4)], [(1, 0, 2)]]
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rlinf.scheduler.cma import read_into


@dataclass(frozen=True)
class Header:
    """What a send announces before any tensor data: specs plus the staging to read from."""

    specs: list
    bucket_bytes: int
    staging_path: str | None = None
    source_pid: int | None = None  # cross-memory attach: read each tensor at its address
    addresses: tuple = ()


@dataclass(frozen=True)
class Piece:
    """Elements ``[start, start + numel)`` of the flattened tensor ``name``: either ``data`` (a
    1-D view of a buffer) or, on a cross-memory-attach link, where they sit in the source
    process (``remote = (pid, address)``), read on demand."""

    name: str
    shape: tuple
    start: int
    numel: int
    dtype: Any
    data: Any = None
    remote: tuple | None = None

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.numel == math.prod(self.shape)

    def read(self):
        """The piece as a 1-D tensor (a view for buffered pieces, a fresh tensor for remote ones)."""
        if self.remote is None:
            return self.data
        # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
        import torch

        out = torch.empty(self.numel, dtype=self.dtype)
        self.copy_to(out)
        return out

    def copy_to(self, target) -> None:
        """Copy into ``target`` (``numel`` elements; cast as ``copy_`` does); a remote piece goes
        straight from the source process into a contiguous CPU target of the same dtype."""
        if self.remote is None:
            target.copy_(self.data)
        elif target.dtype == self.dtype and target.device.type == "cpu" and target.is_contiguous():
            read_into(self.remote[0], self.remote[1], target)
        else:
            target.copy_(self.read())


def send_order(specs: Sequence[tuple[str, Any, Any]]) -> list[int]:
    """Indices of ``specs`` in the order a send materialises and ships them."""
    first: dict[Any, int] = {}
    for i, (_, _, dtype) in enumerate(specs):
        first.setdefault(dtype, i)
    return sorted(range(len(specs)), key=lambda i: (first[specs[i][2]], i))


def itemsize(dtype) -> int:
    # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
    import torch

    return torch.empty((), dtype=dtype).element_size()


def nbytes_of(spec) -> int:
    """Bytes of a ``(name, shape, dtype)`` spec."""
    return math.prod(spec[1]) * itemsize(spec[2])


def specs_of(tensors: Any, backend: str) -> tuple[list | None, str | None]:
    """``(specs, None)`` for a sendable source, ``(None, reason)`` otherwise: not a dict of
    tensors (or a lazy source with ``tensor_specs()``), or a dtype the backend cannot carry (gloo
    has no float8).

    Example:
        >>> import torch
        >>> specs_of({"w": torch.zeros(2, 3)}, "gloo")
        ([('w', (2, 3), torch.float32)], None)
        >>> specs_of({"w": 1.0}, "gloo")[1]
        "'w' is a float, not a tensor (drop or convert it first)"
    """
    # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
    import torch

    if hasattr(tensors, "tensor_specs"):
        specs = [(n, tuple(shape), dtype) for n, shape, dtype in tensors.tensor_specs()]
    elif isinstance(tensors, dict):
        for name, value in tensors.items():
            if not isinstance(value, torch.Tensor):
                return None, f"{name!r} is a {type(value).__name__}, not a tensor (drop or convert it first)"
        specs = [(n, tuple(v.shape), v.dtype) for n, v in tensors.items()]
    else:
        return None, f"expected a dict of tensors, got {type(tensors).__name__}"
    if backend == "gloo":
        for name, _, dtype in specs:
            if "float8" in str(dtype):
                return None, f"{name!r} has dtype {dtype}, which gloo cannot send; cast it first"
    return specs, None


def plan_send(specs: list, bucket_bytes: int) -> list[list[tuple[int, int, int]]]:
    """Buckets in send order; each a list of ``(spec index, start element, element count)``.

    One dtype per bucket, at most ``bucket_bytes``; a tensor larger than that is cut into pieces
    of ``bucket_bytes`` (each piece a bucket of its own)."""
    buckets: list[list[tuple[int, int, int]]] = []
    current: list[tuple[int, int, int]] = []
    size, dtype = 0, None
    for i in send_order(specs):
        step = itemsize(specs[i][2])
        numel = math.prod(specs[i][1])
        if current and (specs[i][2] != dtype or size + numel * step > bucket_bytes):
            buckets.append(current)
            current, size = [], 0
        dtype = specs[i][2]
        if numel * step <= bucket_bytes:
            current.append((i, 0, numel))
            size += numel * step
            continue
        per_piece = max(1, bucket_bytes // step)
        for start in range(0, numel, per_piece):
            buckets.append([(i, start, min(per_piece, numel - start))])
    if current:
        buckets.append(current)
    return buckets


class Staging:
    """Two slots of ``slot_bytes`` in one shared-memory file that every member maps.

    The source creates the file; receivers map it from the header of a send; the source removes
    the name once every receiver has mapped it (the memory stays until the last mapping goes)."""

    def __init__(self, path: str, slot_bytes: int, create: bool):
        # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
        import torch

        self.path, self.slot_bytes = path, slot_bytes
        self.buffer = torch.from_file(path, shared=True, size=2 * slot_bytes, dtype=torch.uint8)
        self.unlinked = not create

    @classmethod
    def create(cls, link_name: str, slot_bytes: int) -> Staging:
        safe = "".join(c if c.isalnum() else "-" for c in link_name)
        return cls(f"/dev/shm/rlinf-link-{safe}-{uuid.uuid4().hex[:12]}", slot_bytes, create=True)

    def slot(self, index: int):
        start = (index % 2) * self.slot_bytes
        return self.buffer[start:start + self.slot_bytes]

    def unlink(self) -> None:
        if not self.unlinked:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            self.unlinked = True


class SourceReader:
    """Makes each source tensor once, however many pieces it travels in (a gather is a collective)."""

    def __init__(self, tensors, specs: list):
        self.tensors, self.specs = tensors, specs
        self._index, self._flat = None, None

    def piece(self, index: int, start: int, numel: int):
        if index != self._index:
            self._index, self._flat = None, None  # drop the previous tensor first
            self._flat = self.tensors[self.specs[index][0]].detach().reshape(-1)
            self._index = index
        return self._flat[start:start + numel]


def write_bucket(slot, reader: SourceReader, bucket: list[tuple[int, int, int]]) -> int:
    """Copy the bucket's pieces into ``slot`` (a uint8 tensor); returns the bytes written."""
    offset = 0
    for index, start, numel in bucket:
        dtype = reader.specs[index][2]
        nbytes = numel * itemsize(dtype)
        slot[offset:offset + nbytes].view(dtype).copy_(reader.piece(index, start, numel))
        offset += nbytes
    return offset


def bucket_buffers(link) -> list:
    """The link's two reused bucket buffers (uint8, ``link.bucket_bytes`` each, on its device)."""
    # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
    import torch

    if link.buffers is None:
        link.buffers = [torch.empty(link.bucket_bytes, dtype=torch.uint8, device=link.device) for _ in range(2)]
    return link.buffers


def pack_bucket(reader: SourceReader, bucket: list[tuple[int, int, int]], buffer):
    """The bucket's bytes as one flat uint8 tensor: the piece itself when it is one contiguous
    piece on the buffer's device, else packed into ``buffer`` (as :func:`write_bucket` does)."""
    # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
    import torch

    if len(bucket) == 1:
        part = reader.piece(*bucket[0])
        if part.device == buffer.device and part.is_contiguous():
            return part.view(torch.uint8)
    return buffer[:write_bucket(buffer, reader, bucket)]


def bucket_pieces(flat_bytes, specs: list, bucket: list[tuple[int, int, int]]) -> list[Piece]:
    """The bucket's pieces as views of ``flat_bytes`` (laid out as :func:`write_bucket` does)."""
    out, offset = [], 0
    for index, start, numel in bucket:
        name, shape, dtype = specs[index]
        nbytes = numel * itemsize(dtype)
        out.append(Piece(name, tuple(shape), start, numel, dtype, flat_bytes[offset:offset + nbytes].view(dtype)))
        offset += nbytes
    return out


class TensorStream:
    """Receiver side of one send; :attr:`specs` is known before any tensor arrives.

    Iterate it for whole ``(name, tensor)`` pairs, or :meth:`pieces` for :class:`Piece` s. A view
    is valid until the stream moves to the next bucket (copy it, or use ``recv_tensors`` for a
    dict of owned tensors). Leaving the ``with`` block, or :meth:`drain`, receives whatever the
    consumer did not take, so the link stays in step with its source even when the consumer stops
    early (for example on a shape error)."""

    def __init__(self, link, header: Header, staging: Staging | None, own: bool = False):
        self.link, self.header, self.staging, self.own = link, header, staging, own
        self.specs = header.specs
        self._buckets = plan_send(self.specs, header.bucket_bytes)
        self._next = 0  # next bucket to receive
        self._finished = not self._buckets and header.source_pid is None
        self._pending = None
        self._started = False

    def __enter__(self) -> TensorStream:
        return self

    def __exit__(self, *exc) -> None:
        self.drain()

    def pieces(self) -> Iterator[Piece]:
        """Every piece in send order (a tensor up to a bucket's size is one whole piece)."""
        if self._started:
            raise RuntimeError(f"link {self.link.name!r}: a tensor stream can be read once")
        self._started = True
        while self._next < len(self._buckets):
            yield from self._receive_next()
        self._finish()

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
        import torch

        assembling, filled = None, 0
        for piece in self.pieces():
            if piece.whole:
                data = piece.read()
                if self.own and piece.remote is None:
                    data = data.clone()
                yield piece.name, data.view(piece.shape)
                continue
            if piece.start == 0:
                assembling, filled = torch.empty(math.prod(piece.shape), dtype=piece.dtype,
                                                 device=self.link.device), 0
            piece.copy_to(assembling[piece.start:piece.start + piece.numel])
            filled += piece.numel
            if filled == assembling.numel():
                yield piece.name, assembling.view(piece.shape)
                assembling = None

    def copy_into(self, target_of) -> None:
        """Copy every piece into ``target_of(piece)`` (a tensor of ``piece.numel`` elements, e.g.
        a slice of a flattened parameter). On a cross-memory-attach link the reads run in
        parallel threads, the host's cores shared among the receivers (the source only waits
        meanwhile; each read releases the GIL)."""
        if self.header.source_pid is None:
            for piece in self.pieces():
                piece.copy_to(target_of(piece))
            return

        # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
        import torch

        if self._started:
            raise RuntimeError(f"link {self.link.name!r}: a tensor stream can be read once")
        self._started = True
        pieces = []
        while self._next < len(self._buckets):
            pieces += self._receive_next()  # remote pieces: addresses only, nothing read yet
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = max(1, torch.get_num_threads(), cores // max(1, self.link.process_group.size() - 1))
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda piece: piece.copy_to(target_of(piece)), pieces))
        self._finish()

    def drain(self) -> None:
        """Receive (and drop) the buckets not consumed yet; idempotent."""
        while self._next < len(self._buckets):
            self._receive_next()
        self._finish()

    def _finish(self) -> None:
        """One-host path: tell the source the last slot is free (it waits for that)."""
        if not self._finished:
            self._finished = True
            if self.staging is not None or self.header.source_pid is not None:
                self.link.process_group.barrier().wait()

    def _receive_next(self) -> list[Piece]:
        index, bucket = self._next, self._buckets[self._next]
        self._next += 1
        if self.header.source_pid is not None:  # cross-memory attach: read when asked
            return [Piece(self.specs[i][0], tuple(self.specs[i][1]), start, numel, self.specs[i][2],
                          remote=(self.header.source_pid,
                                  self.header.addresses[i] + start * itemsize(self.specs[i][2])))
                    for i, start, numel in bucket]
        group = self.link.process_group
        if self.staging is not None:
            if index > 0:
                group.barrier().wait()  # done with bucket index - 1: its slot may be refilled
            group.barrier().wait()  # bucket `index` is in its slot
            return bucket_pieces(self.staging.slot(index), self.specs, bucket)
        # Two reused buffers: the next bucket's broadcast is posted before this one is consumed.
        if self._pending is None:
            self._pending = self._post(index)
        work, flat = self._pending
        work.wait()
        self._pending = self._post(index + 1) if index + 1 < len(self._buckets) else None
        return bucket_pieces(flat, self.specs, bucket)

    def _post(self, index: int):
        nbytes = sum(n * itemsize(self.specs[i][2]) for i, _, n in self._buckets[index])
        flat = bucket_buffers(self.link)[index % 2][:nbytes]
        return self.link.process_group.broadcast(flat, 0), flat
