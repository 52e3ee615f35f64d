"""What crosses the embodied components: a time-major :class:`Trajectory` from a rollout and the
flat :class:`EmbodiedBatch` of samples the actor trains on.

Shapes: ``T`` policy steps (action chunks), ``N`` environments, ``K`` actions per chunk, ``A``
action dimensions. Observations have ``T + 1`` rows: the last is the observation after the final
step, used to bootstrap values.

Example:
    >>> import torch
    >>> traj = Trajectory(states=torch.zeros(3, 2, 4), raw_actions=torch.zeros(2, 2, 1, 3),
    ...                   logprobs=torch.zeros(2, 2, 1, 3), rewards=torch.ones(2, 2, 1),
    ...                   dones=torch.zeros(2, 2, dtype=torch.bool))
    >>> batch = traj.to_batch(advantages=torch.ones(2, 2), returns=torch.ones(2, 2))
    >>> batch.size, batch.states.shape, batch.advantages.shape
    (4, torch.Size([4, 4]), torch.Size([4]))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class Trajectory:
    """A rollout of ``T`` steps over ``N`` environments.

    Attributes:
        states: ``[T+1, N, D]`` float, or None.
        images: camera -> ``[T+1, N, H, W, 3]`` uint8 (``main``; ``wrist`` when present).
        instructions: ``T+1`` lists of one instruction per environment (a reset may switch an
            environment's task), or None.
        raw_actions, logprobs: ``[T, N, K, A]`` what the policy sampled and its log-probs.
        values: ``[T+1, N]`` (chunk-level) or ``[T+1, N, K]`` (action-level), or None.
        rewards: ``[T, N, K]`` one per executed action (0 after an episode ended mid-chunk).
        dones: ``[T, N]`` the episode ended during step t.
        terminations: ``[T, N]`` it ended because the task ended (not a time limit).
        bootstrap_values: ``[T, N]`` value of the final observation of an episode cut by the
            time limit at step t (0 elsewhere); added, discounted, to that step's reward.
        reset_state_ids: ``[N]`` initial state of each environment's first episode.
    """

    raw_actions: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    states: torch.Tensor | None = None
    images: dict[str, torch.Tensor] = field(default_factory=dict)
    instructions: list[list[str]] | None = None
    values: torch.Tensor | None = None
    terminations: torch.Tensor | None = None
    bootstrap_values: torch.Tensor | None = None
    reset_state_ids: torch.Tensor | None = None

    @property
    def num_steps(self) -> int:
        return int(self.raw_actions.shape[0])

    @property
    def num_envs(self) -> int:
        return int(self.raw_actions.shape[1])

    @classmethod
    def concat_envs(cls, parts: Sequence[Trajectory]) -> Trajectory:
        """Join trajectories of equal length along the environment axis."""
        if not parts:
            raise ValueError("nothing to join")
        changes = {}
        for f in dataclasses.fields(cls):
            values = [getattr(p, f.name) for p in parts]
            if values[0] is None:
                changes[f.name] = None
            elif f.name == "images":
                changes[f.name] = {k: torch.cat([v[k] for v in values], dim=1) for k in values[0]}
            elif f.name == "instructions":
                changes[f.name] = [[x for v in values for x in v[t]] for t in range(len(values[0]))]
            elif f.name == "reset_state_ids":
                changes[f.name] = torch.cat(values)
            else:
                changes[f.name] = torch.cat(values, dim=1)
        return cls(**changes)

    def to_batch(self, advantages: torch.Tensor, returns: torch.Tensor,
                 mask: torch.Tensor | None = None) -> EmbodiedBatch:
        """Flatten the ``T x N`` steps into samples (step-major), keeping those where ``mask``
        ``[T, N]`` is true (default all)."""
        T, N = self.num_steps, self.num_envs
        keep = torch.ones(T, N, dtype=torch.bool) if mask is None else mask.bool()
        flat = keep.reshape(-1)

        def rows(x: torch.Tensor) -> torch.Tensor:
            return x[:T].reshape(T * N, *x.shape[2:])[flat]

        return EmbodiedBatch(
            raw_actions=rows(self.raw_actions), old_logprobs=rows(self.logprobs),
            advantages=rows(advantages), returns=rows(returns),
            old_values=None if self.values is None else rows(self.values),
            states=None if self.states is None else rows(self.states),
            images={k: rows(v) for k, v in self.images.items()},
            instructions=None if self.instructions is None
            else [self.instructions[i // N][i % N] for i in torch.nonzero(flat).view(-1).tolist()])


@dataclass
class EmbodiedBatch:
    """Training samples (one per policy step of one environment).

    Attributes:
        raw_actions, old_logprobs: ``[M, K, A]``.
        advantages, returns, old_values: ``[M]`` (chunk-level) or ``[M, K]`` (action-level);
            ``old_values`` None without a value head.
        states: ``[M, D]`` or None; images: camera -> ``[M, H, W, 3]``; instructions: ``M`` strings
            or None.
        prox_logprobs: ``[M, K, A]`` or None: the log-probs under the weights at the start of the
            update (``algorithm.loss_type: decoupled_ppo``; the actor fills them in).
    """

    raw_actions: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    old_values: torch.Tensor | None = None
    states: torch.Tensor | None = None
    images: dict[str, torch.Tensor] = field(default_factory=dict)
    instructions: list[str] | None = None
    prox_logprobs: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return int(self.raw_actions.shape[0])

    def select(self, index: torch.Tensor | Sequence[int]) -> EmbodiedBatch:
        idx = torch.as_tensor(index, dtype=torch.long)
        changes = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None:
                changes[f.name] = None
            elif f.name == "images":
                changes[f.name] = {k: t[idx] for k, t in v.items()}
            elif f.name == "instructions":
                changes[f.name] = [v[i] for i in idx.tolist()]
            else:
                changes[f.name] = v[idx]
        return EmbodiedBatch(**changes)

    def split(self, parts: int) -> list[EmbodiedBatch]:
        """``parts`` equal consecutive slices (the size must divide evenly)."""
        if parts < 1 or self.size % parts:
            raise ValueError(f"cannot split {self.size} samples into {parts} equal parts")
        n = self.size // parts
        return [self.select(range(i * n, (i + 1) * n)) for i in range(parts)]

    def policy_inputs(self, device: torch.device | str = "cpu") -> dict:
        """Keyword arguments for ``EmbodiedPolicy.act / evaluate / value``."""
        return {"states": None if self.states is None else self.states.to(device),
                "images": self.images["main"].to(device) if "main" in self.images else None,
                "wrist_images": self.images["wrist"].to(device) if "wrist" in self.images else None,
                "instructions": self.instructions}
