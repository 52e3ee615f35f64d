"""Fully asynchronous rollout on one rollout rank (``runner.rollout_mode: fully_async``).

The rank runs :meth:`StreamLoop.run` in one call thread for the whole run, while its other call
thread takes weights (:meth:`GenerationWorker.receive_weights`) and validation generations::

    loop:  take admitted groups from channel[in_key] while fewer than ``max_episodes`` episodes
           run (a group = ``n`` episodes of one prompt; the driver admits them by staleness)
           one generation round over the episodes that can generate; polled between tokens:
             - a weight update is waiting (after ``pause_grace_period`` s)  -> stop the round
             - new groups wait and there is room for them                  -> stop the round
           rows stopped mid-way keep every sampled token (log-prob, version) and continue in the
           next round from prompt + tokens so far (re-prefill)
           each group whose episodes all ended -> channel[out_key] as (group id, RolloutBatch)
    pause: receive_weights asks; the loop parks at a token boundary (``partial_rollout``) or once
           its in-flight episodes ended (``partial_rollout: false``: they finish on the old weights,
           no new one starts); weights load while it is parked — never during a round — then the
           version goes up and the loop goes on.

Every token records the version of the weights that sampled it; a finished group carries
``token_versions``, ``version_start`` and ``version_end`` (:class:`~rlinf.data.rollout_batch.RolloutBatch`).

Example (a worker is a plain object without Ray; ``channel`` any :class:`rlinf.scheduler.Channel`)::

    stats = worker.run_stream(channel, "prompts", "groups", SamplingParams(), n=4, max_episodes=16,
                              partial_rollout=True, grace_s=0.0)   # until worker.stop_stream()
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.data.prompt_dataset import Prompt
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.rollout.stops import cut_at_stop

#: how often a round asks the channel whether new groups wait (a remote call on Ray)
_PROBE_S = 0.1
#: how long the loop waits for new groups when nothing can generate
IDLE_S = 0.05


class PauseGate:
    """The hand-over between the stream loop (one thread) and a weight update (another).

    >>> gate = PauseGate(grace_s=0.0)
    >>> gate.pending(), gate.stop_now()
    (False, False)
    >>> gate.request()
    >>> gate.pending(), gate.stop_now()
    (True, True)
    """

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self._cond = threading.Condition()
        self._requested_at: float | None = None
        self._parked = False
        self.loop_running = False

    def request(self) -> None:
        with self._cond:
            self._requested_at = time.monotonic()

    def pending(self) -> bool:
        return self._requested_at is not None

    def stop_now(self) -> bool:
        """True once a pause was requested ``grace_s`` seconds ago (polled between tokens)."""
        at = self._requested_at
        return at is not None and time.monotonic() - at >= self.grace_s

    def park(self) -> None:
        """Loop side: say "parked" and wait until :meth:`resume`."""
        with self._cond:
            self._parked = True
            self._cond.notify_all()
            while self._requested_at is not None:
                self._cond.wait()
            self._parked = False

    def wait_parked(self, timeout_s: float | None = None) -> bool:
        """Updater side: wait until the loop parked (or is not running); False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self.loop_running and not self._parked:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.1 if left is None else min(left, 0.1))
            return True

    def resume(self) -> None:
        with self._cond:
            self._requested_at = None
            self._cond.notify_all()

    def set_running(self, running: bool) -> None:
        with self._cond:
            self.loop_running = running
            self._cond.notify_all()


@dataclass
class StreamRow:
    """One episode in flight: its group, the tokens sampled so far with their log-probs and the
    version that sampled each."""

    group: str
    prompt: Prompt
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass
class StreamGroup:
    """An admitted group: its id, prompt, seed and episodes (rows or agent episodes)."""

    gid: str
    prompt: Prompt
    seed: int
    members: list = field(default_factory=list)


class StreamLoop:
    """The stream of one rank for single-turn generation (see the module docstring); the tool
    agent's episodes subclass it (:class:`AgentStreamLoop`).

    Args:
        worker: the :class:`~rlinf.workers.rollout.generation_worker.GenerationWorker` (engine,
            tokenizer, ``policy_version``, ``cfg``).
        channel, in_key, out_key: admitted groups ``(gid, Prompt, seed)`` come from ``in_key``;
            finished ``(gid, RolloutBatch)`` go to ``out_key``.
        sampling: the run's sampling parameters; ``n`` episodes per group.
        max_episodes: episodes this rank keeps in flight.
        partial_rollout: stop rounds at a token boundary for weights (else finish episodes first).
        gate: the :class:`PauseGate` shared with ``receive_weights``.
    """

    def __init__(self, worker, channel, in_key: str, out_key: str, sampling: SamplingParams, n: int,
                 max_episodes: int, partial_rollout: bool, gate: PauseGate):
        self.worker, self.channel, self.in_key, self.out_key = worker, channel, in_key, out_key
        self.sampling, self.n, self.max_episodes = sampling, n, max(max_episodes, n)
        self.partial_rollout, self.gate = partial_rollout, gate
        self.groups: dict[str, StreamGroup] = {}
        self.stop_flag = threading.Event()
        self.stats = {"rounds": 0, "preempted_rounds": 0, "paused_rounds": 0, "groups": 0,
                      "generate_s": 0.0, "idle_s": 0.0, "paused_s": 0.0}
        #: (what, start, end) wall-clock intervals: generate rounds, idle waits, pauses for weights
        self.intervals: list[tuple[str, float, float]] = []
        self._probe_at = 0.0
        self._probe_result = False
        self._round = 0

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self) -> dict:
        self.gate.set_running(True)
        try:
            while not self.stop_flag.is_set():
                if self.gate.pending() and (self.partial_rollout or not self.groups):
                    t = time.time()
                    self.gate.park()
                    self._interval("paused", t)
                    continue
                waiting_since = time.time()
                if not self.gate.pending():
                    self._admit(block=not self._can_generate())
                if self._can_generate():
                    t = time.time()
                    self._one_round()
                    self._interval("generate", t)
                    self._emit_finished()
                else:  # idle since before the admission wait above (it blocked: nothing could generate)
                    self._wait_for_work()
                    self._interval("idle", waiting_since)
                    self._emit_finished()
        finally:
            self.gate.set_running(False)
        return {**self.stats, "intervals": self.intervals}

    def _interval(self, what: str, start: float) -> None:
        end = time.time()
        self.stats[f"{what}_s"] = self.stats.get(f"{what}_s", 0.0) + end - start
        if len(self.intervals) < 20000:
            self.intervals.append((what, start, end))

    def stop(self) -> None:
        self.stop_flag.set()

    @property
    def in_flight(self) -> int:
        return len(self.groups) * self.n

    def _admit(self, block: bool) -> None:
        """Take admitted groups while there is room (waiting up to ``IDLE_S`` when ``block``)."""
        while self.in_flight + self.n <= self.max_episodes:
            try:
                gid, prompt, seed = self.channel.get(self.in_key, timeout=IDLE_S if block else 0.0)
            except Exception as exc:  # ChannelTimeout: nothing admitted yet
                if type(exc).__name__ != "ChannelTimeout":
                    raise
                return
            self.groups[gid] = self._new_group(gid, prompt, seed)
            block = False

    def _new_group(self, gid: str, prompt: Prompt, seed: int) -> StreamGroup:
        return StreamGroup(gid, prompt, seed, [StreamRow(gid, prompt) for _ in range(self.n)])

    def _wait_for_work(self) -> None:
        """Nothing can generate (single turn: nothing in flight): the next admission is waited for
        in :meth:`_admit`; a subclass waits for tool results here."""

    def _should_stop(self, had_room: bool):
        """The poll a round runs between tokens (see the module docstring)."""
        def poll() -> bool:
            if self.stop_flag.is_set() or (self.partial_rollout and self.gate.stop_now()):
                self._stopped_for = "pause" if self.gate.pending() else "stop"
                return True
            if not had_room or self.gate.pending():
                return False
            now = time.monotonic()
            if now - self._probe_at >= _PROBE_S:
                self._probe_at = now
                self._probe_result = self.channel.qsize(self.in_key) > 0
                if self._probe_result:
                    self._stopped_for = "admit"
            return self._probe_result
        return poll

    # ---- single-turn rounds -----------------------------------------------------------------------
    def _can_generate(self) -> bool:
        return any(r.finish_reason is None for g in self.groups.values() for r in g.members)

    def _one_round(self) -> None:
        rows = [r for g in self.groups.values() for r in g.members if r.finish_reason is None]
        had_room = self.in_flight + self.n <= self.max_episodes
        self._stopped_for = None
        self._probe_result = False
        base = self.sampling
        # rows that still owe min_new_tokens run apart from the others (the EOS mask is per call)
        by_min: dict[int, list[StreamRow]] = {}
        for r in rows:
            by_min.setdefault(max(0, base.min_new_tokens - len(r.tokens)), []).append(r)
        version = self.worker.policy_version
        for min_new, part in by_min.items():
            room = [base.max_new_tokens - len(r.tokens) for r in part]
            sampling = replace(base, max_new_tokens=max(room), min_new_tokens=min_new)
            seed = (self.groups[part[0].group].seed + 7919 * self._round) % (2 ** 31)
            gens = self.worker.engine.generate([list(r.prompt.token_ids) + r.tokens for r in part], sampling,
                                               n=1, seed=seed, should_stop=self._should_stop(had_room))
            for g in gens:
                self._extend_row(part[g.prompt_index], g, room[g.prompt_index], version)
        self._count_round()

    def _count_round(self) -> None:
        """A round ended: count it, and why it stopped early (new groups, or weights)."""
        self._round += 1
        self.stats["rounds"] += 1
        if self._stopped_for == "admit":
            self.stats["preempted_rounds"] += 1
        elif self._stopped_for == "pause":
            self.stats["paused_rounds"] += 1

    def _extend_row(self, row: StreamRow, gen, room: int, version: int) -> None:
        ids, lps = list(gen.token_ids)[:room], list(gen.logprobs)[:room]
        row.tokens += ids
        row.logprobs += lps
        row.versions += [version] * len(ids)
        stops = self.sampling.stop
        cut = cut_at_stop(row.tokens, self.worker.tokenizer, stops) if stops else None
        if cut is not None:
            del row.tokens[cut:], row.logprobs[cut:], row.versions[cut:]
            row.finish_reason = "stop"
        elif gen.finish_reason == "stop" and len(gen.token_ids) <= room:
            row.finish_reason = "stop"
        elif len(row.tokens) >= self.sampling.max_new_tokens:
            row.finish_reason = "length"
        elif gen.finish_reason != "interrupted":
            row.finish_reason = gen.finish_reason

    # ---- finished groups --------------------------------------------------------------------------
    def _group_done(self, group: StreamGroup) -> bool:
        return all(r.finish_reason is not None for r in group.members)

    def _emit_finished(self) -> None:
        for gid in [gid for gid, g in self.groups.items() if self._group_done(g)]:
            group = self.groups.pop(gid)
            self.channel.put((gid, self._group_batch(group)), key=self.out_key)
            self.stats["groups"] += 1

    def _group_batch(self, group: StreamGroup) -> RolloutBatch:
        w, rows = self.worker, group.members
        batch = RolloutBatch.from_token_lists(
            [list(group.prompt.token_ids)] * len(rows), [r.tokens for r in rows], w.pad_token_id,
            group_size=self.n, logprobs=[r.logprobs for r in rows], answers=[group.prompt.answer] * len(rows),
            texts=[w.tokenizer.decode(r.tokens, skip_special_tokens=True) for r in rows] if w.cfg.detokenize else [],
            finish_reasons=[r.finish_reason for r in rows], prompt_texts=[group.prompt.text] * len(rows),
            group_ids=torch.full((len(rows),), group.prompt.index, dtype=torch.long))
        attach_versions(batch, [r.versions for r in rows], w.policy_version)
        return batch


def attach_versions(batch: RolloutBatch, versions: list[list[int]], current: int) -> None:
    """Set ``token_versions`` (-1 where no policy sampled), ``version_start`` / ``version_end``
    (a sample without sampled tokens: ``current``) and ``policy_version`` (the oldest start).

    >>> b = RolloutBatch.from_token_lists([[1], [1]], [[2, 3, 4], [5]], pad_token_id=0)
    >>> attach_versions(b, [[0, -1, 1], [2]], current=2)
    >>> b.token_versions.tolist(), b.version_start.tolist(), b.version_end.tolist(), b.policy_version
    ([[0, -1, 1], [2, -1, -1]], [0, 2], [1, 2], 0)
    """
    width = batch.response_ids.shape[1]
    tv = torch.full((len(versions), width), -1, dtype=torch.long)
    starts, ends = [], []
    for i, v in enumerate(versions):
        if v:
            tv[i, :len(v)] = torch.as_tensor(v, dtype=torch.long)
        sampled = [x for x in v if x >= 0]
        starts.append(sampled[0] if sampled else current)
        ends.append(sampled[-1] if sampled else current)
    batch.token_versions = tv
    batch.version_start = torch.tensor(starts, dtype=torch.long)
    batch.version_end = torch.tensor(ends, dtype=torch.long)
    batch.policy_version = min(starts) if starts else current
