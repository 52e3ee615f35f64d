"""What both backends' clusters share: nodes as the placement sees them, the launched groups, and
facts about this machine (loopback, free ports, GPUs, cores). No Ray.

A cluster is made once per run (``Cluster.from_config``): a Ray one
(:class:`~rlinf.scheduler.cluster.Cluster`) or a local one
(:class:`~rlinf.scheduler.local.cluster.LocalCluster`). Both derive from :class:`ClusterBase` and
carry their :attr:`~ClusterBase.backend` (:class:`~rlinf.scheduler.backend.Backend`), which worker
groups, group calls, links and channels ask for everything that differs between the two.

Example:
    >>> NodeInfo(0, "local", LOOPBACK, num_accelerators=2, has_gpus=False, is_head=True,
    ...          num_cpus=8).threads_for(1)
    4
"""

from __future__ import annotations

import os
import random
import socket
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinf.scheduler.backend import Backend, note_cluster

#: where a private local cluster listens (nothing outside this machine can reach it)
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class NodeInfo:
    """One node as the placement sees it."""

    rank: int
    node_id: str
    ip: str
    num_accelerators: int
    has_gpus: bool
    is_head: bool
    num_cpus: int = 1

    def threads_for(self, accelerators: int) -> int:
        """Torch threads for a worker holding ``accelerators`` of this node's slots: the node's
        cores shared out per slot (collocated workers take turns, so each gets its slots' share).

        Example:
            >>> NodeInfo(0, "n", "127.0.0.1", num_accelerators=2, has_gpus=False, is_head=True,
            ...          num_cpus=16).threads_for(1)
            8
        """
        return max(1, self.num_cpus * accelerators // max(1, self.num_accelerators))


class ClusterBase:
    """The nodes a run uses, the groups launched on them, and the backend that runs them.

    Subclasses set :attr:`nodes`, :attr:`shape`, :attr:`secret`, :attr:`origin` and
    :attr:`backend`, then call :meth:`_adopt` (the channels this process creates from then on use
    this cluster's backend).

    Attributes:
        backend: the :class:`~rlinf.scheduler.backend.Backend` chosen for this run.
        secret: the run's :class:`~rlinf.scheduler.secret.RunSecret`.
        origin: one line naming where the run's workers run (printed by the entry points).
    """

    nodes: list[NodeInfo]
    backend: Backend
    origin: str

    def _adopt(self) -> None:
        self._groups: list = []  # weak references to the worker groups launched on this cluster
        note_cluster(self)

    def register_group(self, group: Any) -> None:
        """Remember a launched :class:`~rlinf.scheduler.WorkerGroup` (weakly), so a failure
        can check whether a peer group's worker died."""
        self._groups = [ref for ref in self._groups if ref() is not None] + [weakref.ref(group)]

    def live_groups(self) -> list:
        """The registered groups not shut down yet."""
        groups = [ref() for ref in getattr(self, "_groups", [])]
        return [g for g in groups if g is not None and g.actors]

    def node(self, rank: int) -> NodeInfo:
        """The node with placement rank ``rank``."""
        return self.nodes[rank]

    def describe(self) -> str:
        """One line per node: rank, IP, accelerators."""
        lines = []
        for n in self.nodes:
            kind = "GPU" if n.has_gpus else "logical slot"
            lines.append(f"node {n.rank}: {n.ip} ({n.num_accelerators} {kind}(s){', head' if n.is_head else ''})")
        return "\n".join(lines)


def local_gpu_count() -> int:
    """CUDA devices this process can see (0 without torch or CUDA)."""
    try:
        import torch  # lazy: torch (~2 s) only to count GPUs, and it may be absent (placement CLI, Ray driver)
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cpu_cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def ephemeral_range() -> tuple[int, int]:
    """This host's ``ip_local_port_range`` (the ports outgoing connections take)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def bind_free_port(avoid: list[int] | tuple = (), host: str = LOOPBACK) -> int:
    """A port this host can bind on ``host`` now (the address its listener will use; the probe
    socket never listens): random below the ephemeral range, else any the kernel gives.

    Example:
        >>> 1024 <= bind_free_port() < 65536
        True
    """
    low, _ = ephemeral_range()
    avoid = set(avoid)
    candidates = [p for p in range(max(1024, low - 12000), low) if p not in avoid]
    random.SystemRandom().shuffle(candidates)
    for port in candidates[:200]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port
    raise OSError("no free TCP port on this host")
