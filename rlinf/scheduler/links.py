"""Driver-side handles on the direct links between worker groups: tensor links and pipes.

Both check what they are asked for (ranks exist, no worker linked to itself) and then ask the
groups' backend (:class:`~rlinf.scheduler.backend.Backend`) to connect them: on Ray a
``torch.distributed`` process group per tensor link (:mod:`rlinf.scheduler.transfer`) and TCP
pipes that prove the run's secret (:mod:`rlinf.scheduler.pipe`); in local mode an in-memory
hand-over and socket pairs (:mod:`rlinf.scheduler.local.links`). Workers use them by name:
``self.send_tensors(name, ...)`` / ``self.recv_tensors(name)``, ``self.pipe(name, peer_rank)``.

Example (the worker side in docs/scheduler.md):
    >>> TensorLink.connect("weights", actor_group, 0, rollout_group)          # doctest: +SKIP
    >>> PipeLink.connect("env_policy", env_group, rollout_group, [(0, 0), (1, 0)])  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence

from rlinf.scheduler.transfer import DEFAULT_BUCKET_BYTES
from rlinf.scheduler.worker_group import WorkerGroup


class TensorLink:
    """A driver-side handle on a link between ``src_group[src_rank]`` and ranks of ``dst_group``."""

    def __init__(self, name: str, members: list[tuple[WorkerGroup, int]]):
        self.name, self.members = name, members

    @classmethod
    def connect(
        cls,
        name: str,
        src_group: WorkerGroup,
        src_rank: int,
        dst_group: WorkerGroup,
        dst_ranks: Sequence[int] | None = None,
        *,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        timeout_s: float = 300.0,
        shared_memory: bool | None = None,
    ) -> TensorLink:
        """Give every member its end of the link and return once all have joined.

        Args:
            name: link name, used by ``send_tensors(name, ...)`` / ``recv_tensors(name)``.
            src_group, src_rank: the sending worker.
            dst_group, dst_ranks: the receiving workers (default: every rank of ``dst_group``).
            bucket_bytes: largest packed bucket; bigger tensors travel alone (Ray).
            timeout_s: how long a member waits in a collective before raising.
            shared_memory: move buckets through ``/dev/shm`` (one-host CPU links on Ray only);
                default: whenever every member is on the source's node and the backend is gloo;
                False forces the process-group path (what a link across hosts uses).
        """
        dst_ranks = list(range(dst_group.world_size)) if dst_ranks is None else list(dst_ranks)
        members = [(src_group, src_rank)] + [(dst_group, r) for r in dst_ranks]
        seen = [(g.name, r) for g, r in members]
        for g, r in members:
            if not 0 <= r < g.world_size:
                raise IndexError(f"{g.name} has ranks 0-{g.world_size - 1}, not {r}")
        if len(set(seen)) != len(seen):
            raise ValueError(f"tensor link {name!r}: a worker appears twice in {seen}; a worker "
                             "cannot send to itself")
        src_group.backend.connect_tensor_link(name, members, bucket_bytes=bucket_bytes, timeout_s=timeout_s,
                                              shared_memory=shared_memory)
        return cls(name, members)


class PipeLink:
    """Driver-side handle on the pipes named ``name`` between ranks of two groups."""

    def __init__(self, name: str, group_a: WorkerGroup, group_b: WorkerGroup,
                 pairs: list[tuple[int, int]]):
        self.name, self.group_a, self.group_b, self.pairs = name, group_a, group_b, pairs

    @classmethod
    def connect(cls, name: str, group_a: WorkerGroup, group_b: WorkerGroup,
                pairs: Sequence[tuple[int, int]], timeout_s: float = 60.0) -> PipeLink:
        """Open one pipe per ``(rank in group_a, rank in group_b)`` pair; returns once every pipe
        is connected. Connecting a name again replaces that name's pipes.

        Afterwards ``group_a[a]`` reaches ``group_b[b]`` with ``self.pipe(name, b)`` and the other
        way round with ``self.pipe(name, a)``.
        """
        pairs = [(int(a), int(b)) for a, b in pairs]
        if group_a is group_b or group_a.name == group_b.name:
            raise ValueError(f"pipe {name!r}: both ends are in group {group_a.name!r}; a pipe joins "
                             "two different groups")
        if len(set(pairs)) != len(pairs):
            raise ValueError(f"pipe {name!r}: a pair appears twice in {pairs}")
        for group, ranks in ((group_a, [a for a, _ in pairs]), (group_b, [b for _, b in pairs])):
            for r in ranks:
                if not 0 <= r < group.world_size:
                    raise IndexError(f"{group.name} has ranks 0-{group.world_size - 1}, not {r}")
        group_a.backend.connect_pipes(name, group_a, group_b, pairs, timeout_s)
        return cls(name, group_a, group_b, pairs)

    def refused(self) -> int:
        """Connections to this pipe name's listeners that failed the handshake (closed unread), over
        the whole run: connecting the name again keeps counting (0 in local mode: nothing listens)."""
        return self.group_b.backend.pipe_refused(self.name, self.group_b, sorted({b for _, b in self.pairs}))
