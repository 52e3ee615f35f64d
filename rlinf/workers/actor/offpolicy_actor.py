"""The off-policy actor worker: the replay buffer (and a demonstration buffer) next to a
:class:`~rlinf.objectives.sac.SACLearner`, so sampled batches never cross a process boundary.

Transitions arrive with :meth:`OffPolicyActorWorker.add_transitions` (the rollout side folds its
steps with :class:`~rlinf.data.replay_buffer.NStepAccumulator` first); :meth:`update` runs
``num_updates`` learner updates on batches of ``batch_size`` (half from the demonstrations when
there are some: RLPD's symmetric sampling), once the buffer holds ``min_buffer_size`` rows;
:meth:`policy_state` / :meth:`send_weights` hand the actor's weights to the rollout side.
Checkpoints hold the learner (networks, targets, temperature, optimisers), the RNG and the
buffer itself (atomic, bounded by its capacity), so a resume continues with the same data.

One rank (the learner is small; the simulation is the cost on a CPU).

Example (without Ray a worker is a plain object)::

    worker = OffPolicyActorWorker(42, 4, SACSettings(), BufferSettings(capacity=100_000))  # doctest: +SKIP
    worker.add_transitions(rows)                                                           # doctest: +SKIP
    metrics = worker.update(num_updates=32)                                                # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from rlinf.data.replay_buffer import ReplayBuffer, sample_mixed, transition_spec
from rlinf.objectives.sac import SACLearner, SACSettings
from rlinf.scheduler import Worker

#: The tensor link the actor sends the policy's weights on (the same name as the PPO actor's).
POLICY_LINK = "actor_to_rollout_policy"


@dataclass(frozen=True)
class BufferSettings:
    """``replay_buffer.*`` / ``demo_buffer.*`` and the batch.

    Attributes:
        capacity: rows kept. min_buffer_size: rows before the first update.
        sample_window_size: sample from the newest rows only (None: all).
        batch_size: rows per update. demo_fraction: share of each batch from the demonstrations.
        on_damaged_buffer: a resume whose saved buffer cannot be read: ``stop`` (raise) or
            ``empty`` (start with an empty buffer, said in the metrics).
    """

    capacity: int = 1_000_000
    min_buffer_size: int = 1_000
    sample_window_size: int | None = None
    batch_size: int = 256
    demo_fraction: float = 0.5
    on_damaged_buffer: str = "stop"

    def validate(self) -> None:
        if self.min_buffer_size > self.capacity:
            raise ValueError(f"replay_buffer.min_buffer_size ({self.min_buffer_size}) exceeds replay_buffer.capacity "
                             f"({self.capacity}): learning would never start")
        if self.batch_size < 1:
            raise ValueError(f"algorithm.batch_size must be >= 1, got {self.batch_size}")
        if not 0 <= self.demo_fraction < 1:
            raise ValueError(f"demo_buffer.demo_fraction must be in [0, 1), got {self.demo_fraction}")
        if self.on_damaged_buffer not in ("stop", "empty"):
            raise ValueError("replay_buffer.on_damaged_buffer must be 'stop' or 'empty', "
                             f"got {self.on_damaged_buffer!r}")


class OffPolicyActorWorker(Worker):
    """The learner and its buffers (see the module docstring).

    Args:
        obs_dim, action_dim: sizes of the state observation and the action.
        settings: the learner's :class:`~rlinf.objectives.sac.SACSettings`.
        buffer: :class:`BufferSettings`.
        action_low, action_high: the env's action bounds.
        seed: seeds the networks, the sampling and the actor's noise.
        demos: demonstration transitions (the fields of ``transition_spec``), or None.
    """

    def __init__(self, obs_dim: int, action_dim: int, settings: SACSettings, buffer: BufferSettings,
                 action_low=None, action_high=None, seed: int = 0, demos: dict[str, torch.Tensor] | None = None):
        buffer.validate()
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
        self.buffer.add(rows)
        return len(self.buffer)

    def update(self, num_updates: int) -> dict[str, float]:
        """``num_updates`` learner updates (none before ``min_buffer_size`` rows); the metrics'
        means, with the buffer's size and memory."""
        b = self.buffer_settings
        out = {"buffer/size": float(len(self.buffer)), "buffer/memory_mb": self.buffer.memory_bytes / 2**20}
        if len(self.buffer) < b.min_buffer_size or num_updates < 1:
            return {**out, "actor/updates": 0.0}
        history = []
        for _ in range(num_updates):
            batch = sample_mixed(self.buffer, self.demos, b.batch_size, b.demo_fraction, self.generator)
            history.append(self.learner.update(batch))
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

    # ---- checkpoints --------------------------------------------------------------------------------
    def save_checkpoint(self, path: str) -> None:
        """Learner state, RNG and counters (``learner.pt``) and the buffer (``replay_buffer.pt``)."""
        os.makedirs(path, exist_ok=True)
        torch.save({"learner": self.learner.state_dict(), "generator": self.generator.get_state(),
                    "torch": torch.get_rng_state(), "updates": self.updates}, os.path.join(path, "learner.pt"))
        self.buffer.save(os.path.join(path, "replay_buffer.pt"))

    def load_checkpoint(self, path: str) -> None:
        """Restore :meth:`save_checkpoint`; a damaged buffer stops the resume or, with
        ``on_damaged_buffer: empty``, leaves the buffer empty (noted in :attr:`buffer_note`)."""
        state = torch.load(os.path.join(path, "learner.pt"), weights_only=True)
        self.learner.load_state_dict(state["learner"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch"])
        self.updates = int(state["updates"])
        try:
            self.buffer.load(os.path.join(path, "replay_buffer.pt"))
        except (ValueError, FileNotFoundError) as exc:
            if self.buffer_settings.on_damaged_buffer == "stop":
                raise ValueError(f"{exc} (set replay_buffer.on_damaged_buffer: empty to resume with an empty "
                                 "buffer)") from None
            self.buffer = ReplayBuffer(self.buffer.capacity, self.buffer.spec, sample_window=self.buffer.sample_window)
            self.buffer_note = f"resumed with an empty replay buffer: {exc}"
