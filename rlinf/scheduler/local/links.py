"""Tensor links and pipes of local mode.

A tensor link hands the source's tensors to each receiver through an in-memory queue: the source's
``send_tensors`` returns once every receiver has taken them (as a broadcast does), receivers copy
what they keep (``recv_tensors`` gives owned tensors; a stream's views are valid until the stream
ends, as on the shared-memory path). A pipe is a ``socket.socketpair`` per pair of workers: the
same :class:`~rlinf.scheduler.pipe.Pipe` code, messages pickled both ways, no TCP.
"""

from __future__ import annotations

import math
import queue
import socket
from dataclasses import dataclass, field
from typing import Any

from rlinf.scheduler.transfer_stream import Header, Piece, TensorStream, nbytes_of, send_order, specs_of


@dataclass(frozen=True)
class _Abort:
    reason: str


@dataclass
class _Hub:
    """What the members of one local link share: one inbox per receiver, one ack queue."""

    name: str
    receivers: int
    timeout_s: float
    inboxes: dict = field(default_factory=dict)  # link rank -> queue of (specs, tensors) / _Abort
    acks: queue.Queue = field(default_factory=queue.Queue)


@dataclass
class LocalLinkEnd:
    """A worker's end of a local link (what ``Worker._rlinf_link`` returns in local mode): the same
    methods as a Ray link's end (``rlinf.scheduler.transfer``)."""

    name: str
    rank: int
    hub: _Hub
    device: Any = None
    backend: str = "local"
    path: str = "in process"

    def send(self, tensors: Any) -> int:
        return send(self, tensors)

    def recv_stream(self, own: bool = False) -> LocalTensorStream:
        return recv_stream(self, own)

    def recv(self) -> dict:
        return recv(self)


def connect_tensor_link(name: str, members: list, timeout_s: float) -> None:
    """Driver side of ``TensorLink.connect`` for local groups: give every member its end."""
    hub = _Hub(name, len(members) - 1, timeout_s)
    for link_rank in range(1, len(members)):
        hub.inboxes[link_rank] = queue.Queue()
    calls = [g._execute("_rlinf_install_link", name, LocalLinkEnd(name, link_rank, hub), ranks=[r])
             for link_rank, (g, r) in enumerate(members)]
    for call in calls:
        call.wait(timeout=timeout_s)


def send(link: LocalLinkEnd, tensors: Any) -> int:
    """``send_tensors`` on a local link: hand the tensors to every receiver, wait until all took them."""
    if link.rank != 0:
        raise RuntimeError(f"link {link.name!r}: only its source (rank 0) sends; this is rank {link.rank}")
    specs, problem = specs_of(tensors, "local")
    hub = link.hub
    if problem:
        for inbox in hub.inboxes.values():
            inbox.put(_Abort(problem))
        raise ValueError(f"link {link.name!r}: {problem}")
    values = [None] * len(specs)
    for i in send_order(specs):  # a lazy source makes its tensors in this order
        values[i] = tensors[specs[i][0]].detach()
    for inbox in hub.inboxes.values():
        inbox.put((specs, values))
    for _ in range(hub.receivers):  # the tensors stay untouched until every receiver copied them
        try:
            hub.acks.get(timeout=hub.timeout_s)
        except queue.Empty:
            raise RuntimeError(f"link {link.name!r}: the receivers did not take the tensors within "
                               f"{hub.timeout_s:g} s (is recv_tensors running on every receiver?)") from None
    return sum(nbytes_of(spec) for spec in specs)


def recv_stream(link: LocalLinkEnd, own: bool = False) -> LocalTensorStream:
    """``recv_tensor_stream`` on a local link."""
    if link.rank == 0:
        raise RuntimeError(f"link {link.name!r}: its source (rank 0) cannot receive")
    try:
        got = link.hub.inboxes[link.rank].get(timeout=link.hub.timeout_s)
    except queue.Empty:
        raise RuntimeError(f"link {link.name!r}: nothing sent within {link.hub.timeout_s:g} s") from None
    if isinstance(got, _Abort):
        raise RuntimeError(f"link {link.name!r}: the sender aborted: {got.reason}")
    return LocalTensorStream(link, *got, own=own)


def recv(link: LocalLinkEnd) -> dict:
    """``recv_tensors`` on a local link: name -> owned tensor."""
    stream = recv_stream(link, own=True)
    got = dict(stream)
    return {name: got[name] for name, _, _ in stream.specs}


class LocalTensorStream(TensorStream):
    """A :class:`TensorStream` whose pieces are the source's whole tensors (no buckets)."""

    def __init__(self, link: LocalLinkEnd, specs: list, values: list, own: bool = False):
        self.link, self.own, self.staging = link, own, None
        self.header = Header(specs, 0)
        self.specs, self._values = specs, values
        self._started = self._finished = False

    def pieces(self):
        if self._started:
            raise RuntimeError(f"link {self.link.name!r}: a tensor stream can be read once")
        self._started = True
        for i in send_order(self.specs):
            name, shape, dtype = self.specs[i]
            data = self._values[i]
            if self.link.device is not None:
                data = data.to(self.link.device)
            yield Piece(name, tuple(shape), 0, math.prod(shape), dtype, data.reshape(-1))
        self._finish()

    def copy_into(self, target_of) -> None:
        for piece in self.pieces():
            piece.copy_to(target_of(piece))

    def drain(self) -> None:
        self._finish()

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._values = None
            self.link.hub.acks.put(self.link.rank)


def connect_pipes(name: str, group_a, group_b, pairs: list, timeout_s: float) -> None:
    """Driver side of ``PipeLink.connect`` for local groups: a socket pair per pair of ranks."""
    ends: dict = {}  # (group, rank) -> {peer rank: (socket, peer name)}
    for a, b in pairs:
        sock_a, sock_b = socket.socketpair()
        ends.setdefault((group_a, a), {})[b] = (sock_a, f"{group_b.name}[{b}]")
        ends.setdefault((group_b, b), {})[a] = (sock_b, f"{group_a.name}[{a}]")
    calls = [group._execute("_rlinf_pipe_install", name, mine, ranks=[rank])
             for (group, rank), mine in ends.items()]
    for call in calls:
        call.wait(timeout=timeout_s)
