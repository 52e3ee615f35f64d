"""The off-policy actor worker: the replay buffer (and a demonstration buffer) next to a
:class:`~rlinf.objectives.sac.SACLearner`, so sampled batches never cross a process boundary.

Transitions arrive over the run's channel (:meth:`OffPolicyActorWorker.ingest`: one item per
rollout segment of each rollout worker, folded to n-step by the rollout side with
:class:`~rlinf.data.replay_buffer.NStepAccumulator`), or directly with :meth:`add_transitions`.
Items enter the buffer in (segment number, rollout rank) order, whatever order they arrived in;
sync mode and ``runner.deterministic`` take exactly the segments up to a given number per update.
:meth:`update` runs ``num_updates`` learner updates on batches of ``batch_size`` (half from the
demonstrations when there are some: RLPD's symmetric sampling), once the buffer holds
``min_buffer_size`` rows; :meth:`train_step` is ingest + update (+ in async mode the weight push).
The actor's weights reach the rollout side by the tensor link (:meth:`send_weights`, sync mode)
or by the channel (:meth:`push_weights`, async mode: the rollout workers pick them up between
policy steps). Each training step that updates makes a new policy *version*; weights travel with
their version and each transition carries the version that acted, so the staleness of what is
learned from (versions behind the learner when it is taken in) is measured here.
Checkpoints hold the learner (networks, targets, temperature, optimisers), the RNG, the counters
and the buffer itself (atomic, bounded by its capacity), so a resume continues with the same data.

One rank (the learner is small; the simulation is the cost on a CPU).

Example (without Ray a worker is a plain object)::

    worker = OffPolicyActorWorker(42, 4, SACSettings(), BufferSettings(capacity=100_000))  # doctest: +SKIP
    worker.add_transitions(rows)                                                           # doctest: +SKIP
    metrics = worker.update(num_updates=32)                                                # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

import torch

from rlinf.data.replay_buffer import ReplayBuffer, sample_mixed, transition_spec
from rlinf.objectives.sac import BufferSettings, SACLearner, SACSettings
from rlinf.scheduler import Worker
from rlinf.workers.links import POLICY_LINK, weights_key


class OffPolicyActorWorker(Worker):
    """The learner and its buffers (see the module docstring).

    Args:
        obs_dim, action_dim: sizes of the state observation and the action.
        settings: the learner's :class:`~rlinf.objectives.sac.SACSettings`.
        buffer: :class:`BufferSettings`.
        action_low, action_high: the env's action bounds.
        seed: seeds the networks, the sampling and the actor's noise.
        demos: demonstration transitions (the fields of ``transition_spec``), or None.
        channel: the run's channel (transitions in, pushed weights out), or None.
        queue: the channel key transitions arrive on (``actor.channel.queue_name``).
        rollout_world_size: rollout workers a weight push goes to.
        bootstrap_always: ``algorithm.bootstrap_type: always``: every transition bootstraps, a
            termination too (ManiSkill's ``bootstrap_at_done: always``).
        threads: torch threads of this process (``runner.learner_threads``, see
            :func:`~rlinf.runners.embodied_offpolicy.loop.learner_threads`); None: as launched.
    """

    def __init__(self, obs_dim: int, action_dim: int, settings: SACSettings, buffer: BufferSettings,
                 action_low=None, action_high=None, seed: int = 0, demos: dict[str, torch.Tensor] | None = None,
                 channel: Any = None, queue: str = "replay_buffer", rollout_world_size: int = 1,
                 bootstrap_always: bool = False, threads: int | None = None):
        buffer.validate()
        self.threads = threads
        self.channel, self.queue, self.rollout_world_size = channel, queue, rollout_world_size
        self.bootstrap_always = bootstrap_always
        self.version = 0        # training steps that updated: the learner's policy version
        self.received = 0       # transitions ingested from the channel (or added)
        self.env_steps = 0      # env steps those transitions came from
        self.chunks = 0         # rollout segments (chunks) taken in: numbers 0 .. chunks - 1
        self._held: list[dict] = []  # items taken from the channel, not yet in the buffer (see ingest)
        self._stale: list[torch.Tensor] = []  # versions behind of the rows ingested since the last report
        torch.manual_seed(seed)
        self.settings, self.buffer_settings = settings, buffer
        self.generator = torch.Generator().manual_seed(seed + 1)
        low = None if action_low is None else torch.as_tensor(action_low, dtype=torch.float32)
        high = None if action_high is None else torch.as_tensor(action_high, dtype=torch.float32)
        self.learner = SACLearner(obs_dim, action_dim, settings, low, high, generator=self.generator)
        spec = transition_spec(obs_dim, action_dim)
        self.buffer = ReplayBuffer(buffer.capacity, spec, sample_window=buffer.sample_window_size)
        self.demos = None
        if demos is not None:
            n = int(demos["reward"].shape[0])
            self.demos = ReplayBuffer(max(n, 1), spec)
            self.demos.add(demos)
        self.updates = 0
        self.buffer_note = ""

    # ---- data and updates -----------------------------------------------------------------------
    def add_transitions(self, rows: dict[str, torch.Tensor]) -> int:
        """Append transitions; returns the rows the buffer holds."""
        rows = dict(rows)
        if self.bootstrap_always:
            rows["terminated"] = torch.zeros_like(rows["terminated"])
        self.buffer.add(rows)
        self.received += int(rows["reward"].shape[0])
        return len(self.buffer)

    def ingest(self, items: int = 0, min_rows: int = 0, timeout: float | None = None,
               upto: int | None = None) -> int:
        """Take transitions from the channel into the buffer: at least ``items`` items, then
        (waiting) until ``min_rows`` transitions have been received in all, then whatever else is
        already queued. Each item is one rollout segment of one rollout worker: ``rows`` (the
        transition fields), ``versions`` (the policy version that acted, per row), ``env_steps``,
        and ``chunk`` / ``rank`` (the segment's number and the rollout worker's). Items enter the
        buffer in (chunk, rank) order, whatever order they arrived in, so its rows do not depend on
        which rollout worker finished first. With ``upto`` (sync mode and ``runner.deterministic``)
        exactly the segments numbered up to ``upto`` enter: it waits for every rollout worker's
        item of each, and holds back later segments' items until a later call. Returns the items
        taken into the buffer."""
        if self.channel is None:
            return 0
        if upto is not None:
            wanted = {(c, r) for c in range(self.chunks, upto + 1) for r in range(self.rollout_world_size)}
            while not wanted <= {_order(i) for i in self._held}:
                self._held.append(self.channel.get(key=self.queue, timeout=timeout))
            ready = [i for i in self._held if _order(i)[0] <= upto]
            self._held = [i for i in self._held if _order(i)[0] > upto]
        else:
            rows = sum(int(i["rows"]["reward"].shape[0]) for i in self._held)
            while len(self._held) < items or self.received + rows < min_rows:
                self._held.append(self.channel.get(key=self.queue, timeout=timeout))
                rows += int(self._held[-1]["rows"]["reward"].shape[0])
            while self.channel.qsize(self.queue) > 0:
                self._held.append(self.channel.get(key=self.queue, timeout=timeout))
            ready, self._held = self._held, []
        for item in sorted(ready, key=_order):  # stable: untagged items keep their arrival order
            self._absorb(item)
        return len(ready)

    def _absorb(self, item: dict) -> None:
        rows = {k: v.clone() for k, v in item["rows"].items()}  # channel tensors are shared memory
        if int(rows["reward"].shape[0]):
            self.add_transitions(rows)
            self._stale.append((self.version - item["versions"]).float())
        self.env_steps += int(item["env_steps"])
        self.chunks = max(self.chunks, _order(item)[0] + 1)

    def train_step(self, num_updates: int, items: int = 0, min_rows: int = 0, push_every: int = 0,
                   steps_done: int = 0, upto: int | None = None) -> dict[str, float]:
        """One training step of the off-policy loop: :meth:`ingest` (``items`` / ``min_rows`` /
        ``upto`` as there), then :meth:`update` with ``num_updates``; with ``push_every`` > 0 (async mode),
        :meth:`push_weights` when this is training step number ``steps_done + 1`` and that is a
        multiple of ``push_every``. Returns the update's metrics plus the ingest's (transitions
        received, the staleness of the rows taken, the update-to-data ratio, timings)."""
        t0 = time.perf_counter()
        taken = self.ingest(items, min_rows, upto=upto)
        t1 = time.perf_counter()
        metrics = self.update(num_updates)
        t2 = time.perf_counter()
        if metrics["actor/updates"] > 0:
            self.version += 1
            if push_every > 0 and (steps_done + 1) % push_every == 0:
                self.push_weights()
        stale = torch.cat(self._stale) if self._stale else torch.zeros(0)
        self._stale = []
        metrics.update({
            "replay/items": float(taken), "replay/received": float(self.received),
            "replay/env_steps": float(self.env_steps),
            "replay/utd": self.updates / max(self.received, 1),
            "rollout/staleness": float(stale.mean()) if stale.numel() else 0.0,
            "rollout/staleness_max": float(stale.max()) if stale.numel() else 0.0,
            "actor/version": float(self.version),
            "time/ingest": t1 - t0, "time/update": t2 - t1,
            "throughput/updates_per_s": metrics["actor/updates"] / max(t2 - t1, 1e-9)})
        if self.buffer_note:
            metrics["buffer/resumed_empty"] = 1.0
        return metrics

    def update(self, num_updates: int) -> dict[str, float]:
        """``num_updates`` learner updates (none before ``min_buffer_size`` rows); the metrics'
        means, with the buffer's size and memory. Unclipped gradient norms are those of the last
        update (computing them on every update costs ~8 % of a CPU update)."""
        b = self.buffer_settings
        if self.threads is not None:  # per calling thread under OpenMP: Ray runs calls on its own threads
            torch.set_num_threads(self.threads)
        out = {"buffer/size": float(len(self.buffer)), "buffer/memory_mb": self.buffer.memory_bytes / 2**20}
        if len(self.buffer) < b.min_buffer_size or num_updates < 1:
            return {**out, "actor/updates": 0.0}
        history = []
        for i in range(num_updates):
            batch = sample_mixed(self.buffer, self.demos, b.batch_size, b.demo_fraction, self.generator)
            history.append(self.learner.update(batch, norms=i == num_updates - 1))
        self.updates += num_updates
        for key in history[0]:
            values = [h[key] for h in history if not math.isnan(h[key])]
            out[f"actor/{key}"] = sum(values) / len(values) if values else math.nan
        return {**out, "actor/updates": float(num_updates), "actor/total_updates": float(self.updates)}

    # ---- weights ------------------------------------------------------------------------------------
    def policy_state(self) -> dict[str, torch.Tensor]:
        """The actor network's weights under the names of
        :class:`~rlinf.models.embodied.sac_policy.SACActorPolicy` (``actor.*``), which the rollout
        side acts with."""
        return {f"actor.{k}": v.detach().clone() for k, v in self.learner.actor.state_dict().items()}

    def send_weights(self) -> int:
        """Send :meth:`policy_state` over the policy link; returns the bytes sent."""
        return self.send_tensors(POLICY_LINK, self.policy_state())

    def push_weights(self) -> int:
        """Put :meth:`policy_state` and its version on the channel for every rollout worker (async
        mode: nobody waits for it); returns the version."""
        state = self.policy_state()
        for rank in range(self.rollout_world_size):
            self.channel.put({"version": self.version, "state": state}, key=weights_key(rank))
        return self.version

    def counters(self) -> dict[str, Any]:
        """The worker's counters and the buffer's size (for the driver's start-up line and resume)."""
        per_row = sum(math.prod(shape) or 1 for shape, _ in self.buffer.spec.values())
        return {"version": self.version, "received": self.received, "env_steps": self.env_steps,
                "chunks": self.chunks, "updates": self.updates, "capacity": self.buffer.capacity, "row_floats": per_row,
                "memory_mb": self.buffer.memory_bytes / 2**20, "size": len(self.buffer),
                "demos": 0 if self.demos is None else len(self.demos)}

    def save_policy(self, path: str) -> str:
        """The actor's weights (``sac_actor.pt``, the names :class:`~rlinf.models.embodied.sac_policy.
        SACActorPolicy` loads) and its sizes (``sac_actor.json``) in folder ``path``."""
        os.makedirs(path, exist_ok=True)
        torch.save(self.policy_state(), os.path.join(path, "sac_actor.pt"))
        actor = self.learner.actor
        with open(os.path.join(path, "sac_actor.json"), "w") as f:
            json.dump({"state_dim": actor.net[0].in_features, "action_dim": int(actor.scale.shape[0]),
                       "hidden_sizes": list(self.settings.hidden_sizes), "log_std_min": actor.log_std_min,
                       "log_std_max": actor.log_std_max}, f)
        return path

    # ---- checkpoints --------------------------------------------------------------------------------
    def save_checkpoint(self, path: str) -> None:
        """Learner state, RNG and counters (``learner.pt``) and the buffer (``replay_buffer.pt``)."""
        os.makedirs(path, exist_ok=True)
        torch.save({"learner": self.learner.state_dict(), "generator": self.generator.get_state(),
                    "torch": torch.get_rng_state(), "updates": self.updates, "version": self.version,
                    "received": self.received, "env_steps": self.env_steps, "chunks": self.chunks},
                   os.path.join(path, "learner.pt"))
        self.buffer.save(os.path.join(path, "replay_buffer.pt"))

    def load_checkpoint(self, path: str) -> None:
        """Restore :meth:`save_checkpoint`; a damaged buffer stops the resume or, with
        ``on_damaged_buffer: empty``, leaves the buffer empty (noted in :attr:`buffer_note`)."""
        state = torch.load(os.path.join(path, "learner.pt"), weights_only=True)
        self.learner.load_state_dict(state["learner"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch"])
        self.updates = int(state["updates"])
        self.version = int(state.get("version", 0))
        self.received = int(state.get("received", 0))
        self.env_steps = int(state.get("env_steps", 0))
        self.chunks = int(state.get("chunks", 0))
        try:
            self.buffer.load(os.path.join(path, "replay_buffer.pt"))
        except (ValueError, FileNotFoundError) as exc:
            if self.buffer_settings.on_damaged_buffer == "stop":
                raise ValueError(f"{exc} (set replay_buffer.on_damaged_buffer: empty to resume with an empty "
                                 "buffer)") from None
            self.buffer = ReplayBuffer(self.buffer.capacity, self.buffer.spec, sample_window=self.buffer.sample_window)
            self.buffer_note = f"resumed with an empty replay buffer: {exc}"


def _order(item: dict) -> tuple[int, int]:
    """Where a channel item goes in the buffer: (segment number, rollout rank); (-1, 0) for an
    item without them (added by hand)."""
    return int(item.get("chunk", -1)), int(item.get("rank", 0))
