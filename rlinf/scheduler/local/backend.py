"""The local backend (``cluster.backend: local``): every worker group inside the driver process.

:class:`LocalBackend` implements :class:`~rlinf.scheduler.backend.Backend` with in-process worker
instances (:mod:`.executor`), futures, an in-memory tensor hand-over and socket pairs
(:mod:`.links`) and queues on one event-loop thread (:mod:`.channel`). The worker code is the
same as on Ray.

Example:
    >>> backend = LocalBackend()
    >>> backend.name, backend.in_process
    ('local', True)
    >>> from concurrent.futures import Future
    >>> ref = Future()
    >>> backend.all_done([ref]), [len(refs) for refs in backend.wait_any([ref], timeout=0.01)]
    (False, [0, 1])
    >>> ref.set_result((1, None, 0.0, None))
    >>> backend.all_done([ref]), backend.result(ref)
    (True, (1, None, 0.0, None))
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED
from concurrent.futures import wait as wait_futures
from typing import Any

from rlinf.scheduler.backend import Backend, CallFailed
from rlinf.scheduler.local.channel import LocalChannel
from rlinf.scheduler.local.executor import InitFailed, LocalActor
from rlinf.scheduler.local.links import connect_pipes, connect_tensor_link
from rlinf.scheduler.memory_report import probe_node
from rlinf.scheduler.worker import ENV_ACCELERATORS, ENV_DEVICE_INDEX, ENV_GROUP, ENV_HAS_GPUS, ENV_NODE_RANK


class LocalBackend(Backend):
    """:class:`~rlinf.scheduler.backend.Backend` in this process (see the module docstring)."""

    name = "local"
    in_process = True

    # ---- workers ----------------------------------------------------------------------------
    def start_workers(self, cluster: Any, worker_cls: type, placement: Any, name: str, args: Sequence[Any],
                      kwargs: dict, env: dict | None, max_concurrency: int) -> list:
        """One :class:`~rlinf.scheduler.local.executor.LocalActor` (a group is one process here)."""
        if placement.world_size != 1:
            raise ValueError(f"local mode runs one process per group; {name} is placed on "
                             f"{placement.world_size} processes")
        proc = placement.processes[0]
        node = cluster.node(proc.node)
        proc_env = {
            **(env or {}),
            "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": os.environ["MASTER_ADDR"], "MASTER_PORT": os.environ["MASTER_PORT"],
            ENV_GROUP: name,
            ENV_NODE_RANK: str(proc.node),
            ENV_ACCELERATORS: ",".join(map(str, proc.accelerators)),
            ENV_HAS_GPUS: "1" if node.has_gpus and proc.accelerators else "0",
            ENV_DEVICE_INDEX: str(proc.accelerators[0]) if node.has_gpus and proc.accelerators else "0",
        }
        threads = int(proc_env.get("OMP_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
                      or node.threads_for(len(proc.accelerators)))
        return [LocalActor(worker_cls, f"{name}[0]", proc_env, tuple(args), dict(kwargs or {}),
                           max_concurrency=max_concurrency, threads=threads, secret=cluster.secret)]

    def submit(self, handle: LocalActor, method: str, args: tuple, kwargs: dict, control: bool = False) -> Any:
        return handle.call(method, args, kwargs, control)

    def stop_workers(self, handles: list) -> None:
        for actor in handles:
            actor.shutdown()

    def probe_node(self, cluster: Any, node: int, pid: int | None, timeout: float) -> Any:
        return probe_node(pid)  # the one node is this machine

    # ---- answers ----------------------------------------------------------------------------
    def wait_any(self, refs: list, timeout: float | None) -> tuple[list, list]:
        done, pending = wait_futures(refs, timeout=timeout, return_when=FIRST_COMPLETED)
        return list(done), list(pending)

    def all_done(self, refs: list) -> bool:
        return all(ref.done() for ref in refs)

    def result(self, ref: Any) -> tuple:
        try:
            return ref.result()
        except Exception as exc:  # noqa: BLE001 - every failure of delivery becomes a CallFailed
            raise _call_failed(exc) from None

    async def result_async(self, ref: Any) -> tuple:
        try:
            return await asyncio.wrap_future(ref)
        except Exception as exc:  # noqa: BLE001
            raise _call_failed(exc) from None

    # ---- links and channels -----------------------------------------------------------------
    def connect_tensor_link(self, name: str, members: list, *, bucket_bytes: int, timeout_s: float,
                            shared_memory: bool | None) -> None:
        connect_tensor_link(name, members, timeout_s)

    def connect_pipes(self, name: str, group_a: Any, group_b: Any, pairs: list, timeout_s: float) -> None:
        connect_pipes(name, group_a, group_b, pairs, timeout_s)

    def pipe_refused(self, name: str, group_b: Any, ranks: list[int]) -> int:
        return 0  # socket pairs made in this process: nothing listens

    def create_channel(self, name: str, maxsize: int, node_id: str | None) -> LocalChannel:
        return LocalChannel.create(name, maxsize, node_id)

    def connect_channel(self, name: str, timeout: float) -> LocalChannel:
        return LocalChannel.connect(name, timeout)


def _call_failed(exc: Exception) -> CallFailed:
    if isinstance(exc, InitFailed):  # the in-process worker's __init__ raised
        return CallFailed("init", exc.text)
    text = str(exc).strip().splitlines()  # e.g. a call to a shut-down group
    return CallFailed("stopped", text[0] if text else type(exc).__name__)
