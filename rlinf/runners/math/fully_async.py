"""The driver side of ``runner.rollout_mode: fully_async``: groups admitted by staleness, samples
taken as they finish.

Rollout ranks run their stream for the whole run (:mod:`rlinf.workers.rollout.continuous`). The
driver keeps two things going:

* a feeder thread: admits groups (one prompt, ``algorithm.group_size`` episodes) into the prompt
  queue while :meth:`~rlinf.algorithms.async_admission.AsyncLedger.can_start` allows at the
  rollout's current version, and records finished groups as they arrive;
* :meth:`FullyAsyncSource.take`, called by the training step ``s``: the ledger's choice of
  ``data.rollout_batch_size`` finished groups (earliest deadline first, never one older than
  ``algorithm.max_head_offpolicyness`` versions), waiting only while that choice is not possible.

After the step's update the weights go to the rollout ranks mid-generation
(:meth:`~rlinf.workers.rollout.generation_worker.GenerationWorker.receive_weights`) and
:meth:`FullyAsyncSource.set_version` lets more groups in.

Checkpoints: :meth:`FullyAsyncSource.state_dict` holds the loader position, the ledger and the
prompts of every group admitted but not yet trained (in flight or finished); a resumed run starts
those again first, from their prompts (their earlier samples are not saved), so no sample is lost
or trained twice.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque

from rlinf.algorithms.async_admission import AsyncLedger
from rlinf.config.math import MathConfig
from rlinf.data.prompt_dataset import Prompt, PromptLoader
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.runners.math.groups import MathGroups
from rlinf.scheduler import Channel

#: how long one wait on the finished-groups queue lasts before the feeder checks for a stop
_POLL_S = 0.2
#: how often a waiting training step checks that the rollout ranks are alive
_ALIVE_S = 5.0


class FullyAsyncSource:
    """Admission, arrival and selection of groups for a fully asynchronous run.

    Args:
        cfg: the run's config (``rollout_mode`` fully_async).
        groups: launched groups (the rollout group with two call threads per rank).
        loader: the training prompts.
        pad_token_id: padding id for joining groups.
    """

    def __init__(self, cfg: MathConfig, groups: MathGroups, loader: PromptLoader, pad_token_id: int):
        algo = cfg.algorithm
        self.cfg, self.groups, self.loader, self.pad_token_id = cfg, groups, loader, pad_token_id
        self.group_size = algo.group_size
        self.ledger = AsyncLedger(cfg.data.rollout_batch_size, algo.max_head_offpolicyness, cfg.max_groups_in_flight)
        self.version = 0
        self._cond = threading.Condition()
        self._buffer: deque[Prompt] = deque()  # prompts taken from the loader, not yet admitted
        self._restart: list[str] = []  # a resumed checkpoint's untrained groups, offered again first
        self._offered: dict[str, tuple[Prompt, int, int]] = {}  # admitted, not yet trained: prompt, seed, order
        self._arrived: dict[str, RolloutBatch] = {}
        self._count = 0
        self._error: BaseException | None = None
        self._stop = threading.Event()
        ch = cfg.rollout.channel
        self.channel = Channel.create(f"{ch.name}-fa-{uuid.uuid4().hex[:8]}", maxsize=ch.queue_size)
        self.in_key, self.out_key = "admitted", "finished"
        per_rank = -(-cfg.max_concurrent_rollouts // groups.rollout.world_size)
        self.stream_call = None
        self._feeder: threading.Thread | None = None
        self._per_rank = per_rank
        self.counts = {"admitted": 0, "taken": 0, "waits": 0, "wait_s": 0.0}

    # ---- start / stop ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the rollout ranks' streams and the feeder thread."""
        self.stream_call = self.groups.rollout.execute(
            "run_stream", self.channel, self.in_key, self.out_key, self.cfg.algorithm.sampling_params,
            self.group_size, self._per_rank)
        self._feeder = threading.Thread(target=self._feed, name="fully-async-feeder", daemon=True)
        self._feeder.start()

    def stop(self) -> dict:
        """Stop the streams and the feeder; returns the ranks' stream counts (empty if they died
        or never started). Safe to call twice."""
        if self._stop.is_set():
            return {}
        self._stop.set()
        if self._feeder is not None:
            self._feeder.join(timeout=30)
        stats: dict = {}
        if self.stream_call is not None:
            try:
                self.groups.rollout.execute("stop_stream").wait()
                stats = {"ranks": self.stream_call.wait()}
            except Exception:  # noqa: BLE001 - a dead rank was already reported by take()
                stats = {}
            self.stream_call = None
        self.channel.close()
        return stats

    # ---- the feeder thread -------------------------------------------------------------------------
    def _feed(self) -> None:
        try:
            while not self._stop.is_set():
                self._admit()
                try:
                    gid, batch = self.channel.get(self.out_key, timeout=_POLL_S)
                except Exception as exc:  # ChannelTimeout: nothing finished yet
                    if type(exc).__name__ != "ChannelTimeout":
                        raise
                    if self.stream_call is not None and self.stream_call.done():
                        self.stream_call.wait()  # raises the rank's error (or names it dead)
                        raise RuntimeError("a rollout rank's stream ended before the run did") from None
                    continue
                with self._cond:
                    if gid in self._offered:  # else: a group of a run state that was replaced
                        self._arrived[gid] = batch
                        self.ledger.finish(gid)
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _next_prompt(self) -> Prompt:
        if not self._buffer:
            self._buffer.extend(self.loader.next_batch().prompts)
        return self._buffer.popleft()

    def _admit(self) -> None:
        with self._cond:
            for gid in self._restart:
                prompt, seed, _ = self._offered[gid]
                self.channel.put((gid, prompt, seed), key=self.in_key)
            self._restart = []
            while self.ledger.can_start(self.version):
                prompt = self._next_prompt()
                gid = f"g{self._count}"
                seed = self.cfg.runner.seed * 100003 + self._count
                self._count += 1
                self.ledger.start(gid, self.version)
                self._offered[gid] = (prompt, seed, self._count)
                self.channel.put((gid, prompt, seed), key=self.in_key)
                self.counts["admitted"] += 1

    # ---- the training thread -----------------------------------------------------------------------
    def take(self, step: int) -> RolloutBatch:
        """The ``data.rollout_batch_size`` groups step ``step`` trains on, joined in admission order."""
        t = time.perf_counter()
        waited = False
        last_check = time.monotonic()
        with self._cond:
            while True:
                if self._error is not None:
                    raise self._error
                chosen = self.ledger.take(step)
                if chosen is not None:
                    break
                waited = True
                self._cond.wait(timeout=1.0)
                if time.monotonic() - last_check > _ALIVE_S:
                    last_check = time.monotonic()
                    self._cond.release()
                    try:
                        self.groups.rollout.check_alive()
                    finally:
                        self._cond.acquire()
            chosen = sorted(chosen, key=lambda g: self._offered[g][2])
            batches = [self._arrived.pop(g) for g in chosen]
            for g in chosen:
                self._offered.pop(g)
        self.counts["taken"] += len(chosen)
        self.counts["waits"] += waited
        self.counts["wait_s"] += time.perf_counter() - t
        return RolloutBatch.concat(batches, self.pad_token_id)

    def set_version(self, version: int) -> None:
        """The rollout ranks now hold ``version``: more groups may start."""
        with self._cond:
            self.version = version
            self._cond.notify_all()

    # ---- checkpoints ---------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """What a resumed run needs: the loader position, the ledger, and the prompts of the groups
        admitted but not trained (their samples are not saved: they restart from these prompts)."""
        with self._cond:
            return {"loader": self.loader.state_dict(), "ledger": self.ledger.state_dict(), "count": self._count,
                    "offered": {gid: [p.index, seed, order] for gid, (p, seed, order) in self._offered.items()},
                    "buffer": [p.index for p in self._buffer]}

    def load_state_dict(self, state: dict, step: int) -> None:
        """Resume at ``step`` (the rollout then holds version ``step``): every group admitted but
        not trained starts again from its prompt under that version, before any new one."""
        by_index = {p.index: p for p in self.loader.dataset.prompts}
        with self._cond:
            self.loader.load_state_dict(state["loader"])
            self.ledger.load_state_dict(state["ledger"])
            self._count = int(state["count"])
            self._buffer = deque(by_index[i] for i in state["buffer"])
            self.version = step
            self._offered, self._arrived = {}, {}
            for gid, (index, seed, order) in sorted(state["offered"].items(), key=lambda kv: kv[1][2]):
                self.ledger.restart(gid, step)
                self._offered[gid] = (by_index[index], seed, order)
                self._restart.append(gid)
