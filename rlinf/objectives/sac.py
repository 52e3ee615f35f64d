"""One off-policy update (SAC, CrossQ, RLPD) on a sampled batch of transitions.

:class:`SACLearner` owns the actor (:class:`~rlinf.models.embodied.q_heads.SquashedGaussianActor`),
the Q ensemble (:class:`~rlinf.models.embodied.q_heads.QEnsemble`), the target ensemble (not for
CrossQ), the temperature and three Adam optimisers. :meth:`SACLearner.update` runs, on a batch
with the fields of :data:`rlinf.data.replay_buffer.TRANSITION_FIELDS`:

    1. critic:  y = r + discount (1 - d) (min_{J} Q'(s', a') - alpha log pi(a'|s'))
                (J: every target head, or ``critic_subsample_size`` random ones; no entropy term
                without ``backup_entropy``; CrossQ: Q and Q' from one joint forward, no targets)
                loss = sum_k mean (Q_k(s, a) - y)^2
    2. actor (every ``critic_actor_ratio``-th call): mean(alpha log pi(a~|s) - agg_k Q_k(s, a~))
    3. temperature (with the actor, when ``autotune``): -mean(alpha (log pi + H_target))
    4. targets: Polyak with ``tau`` (not CrossQ)

the formulas of :mod:`rlinf.algorithms.sac`.

Example:
    >>> import torch
    >>> learner = SACLearner(obs_dim=3, action_dim=1, settings=SACSettings(hidden_sizes=(8,)))
    >>> batch = {"obs": torch.zeros(4, 3), "action": torch.zeros(4, 1), "reward": torch.ones(4),
    ...          "next_obs": torch.zeros(4, 3), "terminated": torch.zeros(4, dtype=torch.bool),
    ...          "discount": torch.full((4,), 0.9)}
    >>> metrics = learner.update(batch)
    >>> metrics["critic_loss"] > 0, metrics["alpha"]      # alpha moves with the first actor step
    (True, 1.0)
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch

from rlinf.algorithms.sac import (
    alpha_loss,
    alpha_value,
    crossq_split,
    sac_actor_loss,
    sac_critic_loss,
    sac_critic_target,
    soft_update,
    subsample_heads,
)
from rlinf.models.embodied.q_heads import QEnsemble, SquashedGaussianActor


@dataclass(frozen=True)
class SACSettings:
    """What one :class:`SACLearner` does (RLinf's key names where they exist).

    Attributes:
        gamma, tau: discount (used when a batch has no ``discount``), Polyak rate in (0, 1].
        hidden_sizes: actor hidden widths (and the critic's unless ``critic_hidden_sizes``).
        critic_hidden_sizes: each Q head's hidden widths; None = ``hidden_sizes``.
        q_head_type: ``default`` / ``layernorm`` / ``crossq``; num_q_heads: ensemble size.
        critic_subsample_size: target heads drawn per update (RLPD); None = all.
        agg_q: ``min`` or ``mean`` over heads in the actor loss.
        target_agg_q: ``min`` or ``mean`` over the (drawn) target heads in the critic target.
        backup_entropy: keep ``- alpha log pi'`` in the target (RLPD turns it off).
        critic_actor_ratio: critic updates per actor (and temperature) update.
        actor_lr, critic_lr, alpha_lr: Adam learning rates.
        adam_betas, adam_eps: the actor's and the critic's Adam moments and epsilon.
        alpha_type, initial_alpha, autotune, target_entropy: ``entropy_tuning.*``; target None =
            ``-action_dim``.
        log_std_min, log_std_max: the actor's log-std range.
        clip_grad: gradient-norm clip of the actor's and the critic's optimiser (0 = off).
        alpha_clip_grad: gradient-norm clip of the temperature's optimiser (0 = off).
        target_update_freq: Polyak-update the targets every this many critic updates.
    """

    gamma: float = 0.8
    tau: float = 0.01
    hidden_sizes: tuple[int, ...] = (256, 256, 256)
    critic_hidden_sizes: tuple[int, ...] | None = None
    q_head_type: str = "default"
    num_q_heads: int = 2
    critic_subsample_size: int | None = None
    agg_q: str = "min"
    target_agg_q: str = "min"
    backup_entropy: bool = True
    critic_actor_ratio: int = 1
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    alpha_type: str = "exp"
    initial_alpha: float = 1.0
    autotune: bool = True
    target_entropy: float | None = None
    log_std_min: float = -5.0
    log_std_max: float = 2.0
    clip_grad: float = 0.0
    alpha_clip_grad: float = 0.0
    target_update_freq: int = 1


def _alpha_param(initial: float, alpha_type: str) -> torch.Tensor:
    if initial <= 0:
        raise ValueError(f"entropy_tuning.initial_alpha must be > 0, got {initial}")
    raw = math.log(initial) if alpha_type == "exp" else math.log(math.expm1(initial))
    return torch.tensor(raw, dtype=torch.float32)


class SACLearner:
    """Networks, optimisers and :meth:`update` (see the module docstring).

    Args:
        obs_dim, action_dim: sizes.
        settings: :class:`SACSettings`.
        action_low, action_high: the env's bounds (default [-1, 1]).
        generator: draws the head subsets (RLPD) and the actor's noise.
    """

    def __init__(self, obs_dim: int, action_dim: int, settings: SACSettings,
                 action_low: torch.Tensor | None = None, action_high: torch.Tensor | None = None,
                 generator: torch.Generator | None = None):
        s = self.settings = settings
        if not 0 < s.tau <= 1:
            raise ValueError(f"algorithm.tau must be in (0, 1], got {s.tau}")
        if s.critic_actor_ratio < 1:
            raise ValueError(f"algorithm.critic_actor_ratio must be >= 1, got {s.critic_actor_ratio}")
        if s.target_update_freq < 1:
            raise ValueError(f"algorithm.target_update_freq must be >= 1, got {s.target_update_freq}")
        self.actor = SquashedGaussianActor(obs_dim, action_dim, s.hidden_sizes, s.log_std_min, s.log_std_max,
                                           action_low, action_high)
        self.critic = QEnsemble(obs_dim, action_dim, s.critic_hidden_sizes or s.hidden_sizes, s.num_q_heads,
                                s.q_head_type)
        self.crossq = s.q_head_type == "crossq"
        self.target = None if self.crossq else copy.deepcopy(self.critic).requires_grad_(False)
        self.alpha_param = _alpha_param(s.initial_alpha, s.alpha_type).requires_grad_(s.autotune)
        self.target_entropy = -float(action_dim) if s.target_entropy is None else float(s.target_entropy)
        # fused Adam: one kernel per step instead of one per tensor (~10 % of a CPU update here)
        adam = {"betas": tuple(s.adam_betas), "eps": s.adam_eps, "fused": True}
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=s.actor_lr, **adam)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=s.critic_lr, **adam)
        self.alpha_opt = torch.optim.Adam([self.alpha_param], lr=s.alpha_lr) if s.autotune else None
        self.generator = generator
        self.calls = 0

    @property
    def alpha(self) -> torch.Tensor:
        return alpha_value(self.alpha_param.detach(), self.settings.alpha_type)

    def _step(self, opt: torch.optim.Optimizer, loss: torch.Tensor, params, clip: float | None = None,
              norm: bool = True) -> float:
        """Backward and an optimiser step; returns the gradient norm (NaN when there is no clipping
        and ``norm`` is False: the norm alone costs ~8 % of a small CPU update)."""
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip = self.settings.clip_grad if clip is None else clip
        value = math.nan
        if clip or norm:
            value = float(torch.nn.utils.clip_grad_norm_(params, clip or float("inf")))
        opt.step()
        return value

    def update(self, batch: dict[str, torch.Tensor], norms: bool = True) -> dict[str, float]:
        """One critic update, and an actor / temperature update every ``critic_actor_ratio`` calls.
        ``norms=False``: the gradient norms are not computed where nothing is clipped (reported NaN)."""
        s, alpha = self.settings, self.alpha
        obs, act, next_obs = batch["obs"], batch["action"], batch["next_obs"]
        with torch.no_grad():
            next_act, next_logp = self.actor(next_obs, generator=self.generator)
        self.critic.train()
        if self.crossq:
            joint = self.critic(torch.cat([obs, next_obs]), torch.cat([act, next_act]))
            q, next_q = crossq_split(joint, obs.shape[0])
        else:
            q = self.critic(obs, act)
            with torch.no_grad():
                next_q = self.target(next_obs, next_act)
        next_q = subsample_heads(next_q, s.critic_subsample_size, self.generator)
        y = sac_critic_target(batch["reward"], batch["terminated"], next_q, next_logp if s.backup_entropy else None,
                              s.gamma, alpha, batch.get("discount"), s.target_agg_q)
        critic_loss = sac_critic_loss(q, y)
        critic_norm = self._step(self.critic_opt, critic_loss, self.critic.parameters(), norm=norms)
        metrics = {"critic_loss": float(critic_loss.detach()), "critic_grad_norm": critic_norm,
                   "q_mean": float(q.detach().mean()), "target_mean": float(y.mean()), "alpha": float(alpha)}
        self.calls += 1
        if self.calls % s.critic_actor_ratio == 0:
            if self.crossq:  # the critic's batch statistics are not updated by the actor's pass
                self.critic.eval()
            new_act, logp = self.actor(obs, generator=self.generator)
            self.critic.requires_grad_(False)  # the actor's loss moves the actor only
            try:
                actor_loss = sac_actor_loss(self.critic(obs, new_act), logp, alpha, s.agg_q)
                metrics["actor_grad_norm"] = self._step(self.actor_opt, actor_loss, self.actor.parameters(),
                                                             norm=norms)
            finally:
                self.critic.requires_grad_(True)
            metrics.update(actor_loss=float(actor_loss.detach()), entropy=float(-logp.detach().mean()))
            if self.alpha_opt is not None:
                loss = alpha_loss(self.alpha_param, logp, self.target_entropy, s.alpha_type)
                self._step(self.alpha_opt, loss, [self.alpha_param], s.alpha_clip_grad)
        else:
            metrics.update(actor_loss=math.nan, entropy=math.nan)
        if self.target is not None and self.calls % s.target_update_freq == 0:
            soft_update(list(self.target.parameters()), list(self.critic.parameters()), s.tau)
        return metrics

    def state_dict(self) -> dict:
        """Everything a resume needs (networks, target, temperature, optimisers, call count)."""
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "target": None if self.target is None else self.target.state_dict(),
                "alpha_param": self.alpha_param.detach().clone(), "calls": self.calls,
                "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                "alpha_opt": None if self.alpha_opt is None else self.alpha_opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        if self.target is not None:
            self.target.load_state_dict(state["target"])
        with torch.no_grad():
            self.alpha_param.copy_(state["alpha_param"])
        self.calls = int(state["calls"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        if self.alpha_opt is not None:
            self.alpha_opt.load_state_dict(state["alpha_opt"])


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
        if self.batch_size > self.capacity:
            raise ValueError(f"the batch ({self.batch_size}) is larger than replay_buffer.capacity ({self.capacity}) "
                             "can ever hold")
        if not 0 <= self.demo_fraction < 1:
            raise ValueError(f"demo_buffer.demo_fraction must be in [0, 1), got {self.demo_fraction}")
        if self.on_damaged_buffer not in ("stop", "empty"):
            raise ValueError("replay_buffer.on_damaged_buffer must be 'stop' or 'empty', "
                             f"got {self.on_damaged_buffer!r}")
