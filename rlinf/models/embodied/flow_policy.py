"""Flow-matching action policy on state observations (``model_type: flow_mlp``), trained with πRL's
log-probabilities (:mod:`rlinf.algorithms.flow_logprob`).

Networks: a state encoder ``state -> [Linear, Tanh] x n -> features``; a velocity field
``v(x_t, t, features)`` over the action chunk ``x_t`` ``[K, A]``: ``concat(flatten(x_t),
time_features(t), features) -> [Linear, SiLU] x m -> K * A``, with π0's sinusoidal time features
(periods ``4e-3 * 1000^linspace(0, 1, d/2)``, ``[sin(2 pi t / p), cos(2 pi t / p)]``), or with
``residual_velocity`` ``v = x_t - MLP(...)`` (the untrained field then shrinks ``x_0`` by
``(1 - 1/N)^N`` instead of passing it into the action, as noise no log-prob term accounts for); for
Flow-Noise a noise head on the velocity net's last hidden layer whose tanh-squashed output gives a
per-element std in ``noise_logvar_range`` (``[min_std, max_std]``); a value head (ReLU MLP) on the
encoder features (``detach_critic_input`` stops its gradient into the encoder), or with
``separate_critic`` a critic of its own on the state (``[Linear, Tanh] x n -> 1``, as
``model_type: mlp``'s), which leaves the encoder to the actor alone.

``act`` denoises ``x_0 ~ N(0, I)`` in ``num_steps`` steps; the env action is ``clamp(x_N)``.
``act(deterministic=True)`` runs the ODE (no stochastic step) from a sampled ``x_0``, as πRL
evaluates; on two PushCube checkpoints ``x_0 = 0`` succeeded less often (1 vs 2 and 1 vs 4 of 32).
``act``'s ``raw_actions`` ``[N, K, (S+1) * A + S]`` carry what ``evaluate`` needs to recompute the same
log-probs: for each action row ``k`` the chain's values ``x_0[k], ..., x_S[k]`` (``A`` each),
then the ``S`` step slots (the same in every row): 0 for a deterministic step, the Flow-SDE level
``a`` a stochastic step was sampled with (``noise_level``, or with ``noise_anneal`` RLinf's linear
schedule over ``noise_params`` at the training step :meth:`set_global_step` gave), 1 for
Flow-Noise. ``logprobs`` ``[N, K, A]`` are the
element-wise chain log-probs. ``evaluate`` recomputes them with one velocity call over the
stochastic ``(row, step)`` pairs (:func:`~rlinf.algorithms.flow_logprob.chain_logprob_gathered`):
Flow-SDE evaluates the network once per row, not once per step.

Example:
    >>> import torch
    >>> p = FlowPolicy(FlowPolicyConfig(state_dim=3, action_dim=2, num_action_chunks=4, num_steps=3))
    >>> out = p.act(states=torch.zeros(5, 3), generator=torch.Generator().manual_seed(0))
    >>> out.actions.shape, out.raw_actions.shape, out.logprobs.shape, out.values.shape
    (torch.Size([5, 4, 2]), torch.Size([5, 4, 11]), torch.Size([5, 4, 2]), torch.Size([5]))
    >>> again = p.evaluate(out.raw_actions, states=torch.zeros(5, 3))
    >>> bool(torch.allclose(again.logprobs, out.logprobs, atol=1e-5))
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from rlinf.algorithms.flow_logprob import (
    NOISE_METHODS,
    chain_logprob_gathered,
    flow_sde_level,
    pack_chain,
    sample_chain,
    squashed_std,
    stochastic_mask,
    unpack_chain,
    unpack_step_levels,
)
from rlinf.models.embodied.base import EmbodiedPolicy, PolicyOutput, layer_init, mlp, to_tensor
from rlinf.models.embodied.gaussian import GaussianActorCritic


@dataclass(frozen=True)
class FlowPolicyConfig:
    """Sizes and sampling settings of a :class:`FlowPolicy`.

    Attributes:
        state_dim, action_dim: ``D`` and ``A``.
        num_action_chunks: ``K``, actions per chunk (the flow's horizon).
        encoder_sizes: widths of the state encoder (the last is the feature width).
        hidden_sizes: widths of the velocity MLP.
        time_dim: width of the time features (even).
        num_steps: denoising steps ``S``.
        noise_method: flow_sde or flow_noise.
        noise_level: Flow-SDE ``a`` (without ``noise_anneal``).
        noise_anneal: the Flow-SDE level follows :func:`~rlinf.algorithms.flow_logprob.annealed_noise_level`
            over ``noise_params`` ``(start, end, anneal_steps)`` at the policy's ``global_step``.
        noise_params: ``(start, end, anneal_steps)`` of ``noise_anneal``.
        noise_logvar_range: Flow-Noise ``(min_std, max_std)`` of the noise head.
        joint_logprob: mean over ``[x_0, all steps]`` instead of the stochastic step alone.
        ignore_last: Flow-SDE never samples the last step.
        add_value_head: build the critic.
        detach_critic_input: the critic's gradient stops at the encoder features.
        residual_velocity: the velocity is ``x_t - MLP(...)`` instead of ``MLP(...)``, so the
            untrained field (output near 0) contracts ``x_0`` by ``(1 - 1/N)^N`` over the chain.
        separate_critic: the critic is its own Tanh MLP on the state instead of a head on the
            encoder features (then ``detach_critic_input`` has nothing to detach and must be False).
        critic_hidden_sizes: the critic's widths.
        action_low, action_high: env bounds the actions are clipped to.
    """

    state_dim: int
    action_dim: int
    num_action_chunks: int = 1
    encoder_sizes: tuple[int, ...] = (256, 256)
    hidden_sizes: tuple[int, ...] = (256, 256)
    time_dim: int = 32
    num_steps: int = 4
    noise_method: str = "flow_sde"
    noise_level: float = 0.5
    noise_anneal: bool = False
    noise_params: tuple[float, float, int] = (0.7, 0.3, 400)
    noise_logvar_range: tuple[float, float] = (0.08, 0.16)
    joint_logprob: bool = False
    ignore_last: bool = False
    add_value_head: bool = True
    detach_critic_input: bool = False
    separate_critic: bool = False
    residual_velocity: bool = False
    critic_hidden_sizes: tuple[int, ...] = (256, 256)
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None


def time_features(t: torch.Tensor, dim: int) -> torch.Tensor:
    """π0's sinusoidal features ``[B, dim]`` of times ``t`` ``[B]``.

    >>> time_features(torch.zeros(2), 4).tolist()
    [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]]
    """
    periods = 4e-3 * 1000.0 ** torch.linspace(0.0, 1.0, dim // 2, device=t.device)
    angle = 2.0 * math.pi * t.float()[:, None] / periods[None]
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)


class FlowPolicy(EmbodiedPolicy):
    """Flow-matching actor with a value head (see the module docstring). ``save_pretrained`` /
    ``from_pretrained`` write and read the same folder format as the Gaussian policies."""

    config_cls = FlowPolicyConfig
    CONFIG_FILE, WEIGHTS_FILE = GaussianActorCritic.CONFIG_FILE, GaussianActorCritic.WEIGHTS_FILE
    save_pretrained = GaussianActorCritic.save_pretrained
    from_pretrained = classmethod(GaussianActorCritic.from_pretrained.__func__)

    def __init__(self, config: FlowPolicyConfig):
        super().__init__()
        if config.state_dim < 1:
            raise ValueError(f"FlowPolicy needs state observations (state_dim >= 1), got {config.state_dim}")
        if config.noise_method not in NOISE_METHODS:
            raise ValueError(f"noise_method must be one of {NOISE_METHODS}, got {config.noise_method!r}")
        self.config = config
        self.action_dim, self.num_action_chunks = config.action_dim, config.num_action_chunks
        self.value_type = "chunk_level"
        flat = config.num_action_chunks * config.action_dim
        self.encoder = mlp(config.state_dim, config.encoder_sizes[:-1], config.encoder_sizes[-1], nn.Tanh,
                           out_std=math.sqrt(2.0))
        layers: list[nn.Module] = []
        width = flat + config.time_dim + config.encoder_sizes[-1]
        for h in config.hidden_sizes:
            layers += [layer_init(nn.Linear(width, h)), nn.SiLU()]
            width = h
        self.velocity_body = nn.Sequential(*layers)
        self.velocity_out = layer_init(nn.Linear(width, flat), std=0.01)
        if config.noise_method == "flow_noise":
            self.noise_head = layer_init(nn.Linear(width, flat), std=0.01)
        if config.separate_critic and config.detach_critic_input:
            raise ValueError("detach_critic_input needs the critic on the encoder (separate_critic False)")
        if config.add_value_head and config.separate_critic:
            self.critic = mlp(config.state_dim, config.critic_hidden_sizes, 1, nn.Tanh, out_std=1.0)
        elif config.add_value_head:
            self.critic = mlp(config.encoder_sizes[-1], config.critic_hidden_sizes, 1, nn.ReLU, out_std=1.0)
        low = torch.full((config.action_dim,), -1.0) if config.action_low is None else torch.tensor(config.action_low)
        high = torch.full((config.action_dim,), 1.0) if config.action_high is None else torch.tensor(config.action_high)
        self.register_buffer("action_low", low.float(), persistent=False)
        self.register_buffer("action_high", high.float(), persistent=False)

    # ---- pieces -----------------------------------------------------------------------------
    def _states(self, states) -> torch.Tensor:
        if states is None:
            raise ValueError("FlowPolicy needs states [N, D]")
        x = to_tensor(states, self.action_low.device).float()
        if x.dim() != 2 or x.shape[1] != self.config.state_dim:
            raise ValueError(f"states must be [N, {self.config.state_dim}], got {tuple(x.shape)}")
        return x

    def _velocity(self, x: torch.Tensor, t: torch.Tensor, features: torch.Tensor):
        """``(v, std or None)`` at points ``x`` ``[M, K, A]``, times ``t`` ``[M]``, features ``[M, F]``."""
        cfg = self.config
        h = self.velocity_body(torch.cat([x.flatten(1), time_features(t, cfg.time_dim), features], dim=-1))
        v = self.velocity_out(h).view_as(x)
        if cfg.residual_velocity:
            v = x - v
        if cfg.noise_method != "flow_noise":
            return v, None
        return v, squashed_std(self.noise_head(h), cfg.noise_logvar_range).view_as(x)

    def _velocity_fn(self, features: torch.Tensor):
        """The velocity for :func:`sample_chain`: the batch's rows in order."""
        return lambda x, t: self._velocity(x, t, features)

    def _rows_velocity_fn(self, features: torch.Tensor):
        """The velocity for :func:`chain_logprob_gathered`: point ``m`` reads row ``rows[m]``'s features."""
        return lambda x, t, rows: self._velocity(x, t, features[rows])

    def _values(self, states: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor | None:
        cfg = self.config
        if not cfg.add_value_head:
            return None
        if cfg.separate_critic:
            inp = states
        else:
            features = self.encoder(states) if features is None else features
            inp = features.detach() if cfg.detach_critic_input else features
        return self.critic(inp).squeeze(-1).float()

    def pack(self, chain: torch.Tensor, mask: torch.Tensor, noise_level: float = 1.0) -> torch.Tensor:
        """``raw_actions`` ``[B, K, (S+1) A + S]`` from a chain ``[B, S+1, K, A]``, mask ``[B, S]``
        and the level its stochastic steps were sampled with."""
        return pack_chain(chain, mask, rows=chain.shape[2], noise_level=noise_level)

    def unpack(self, raw_actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inverse of :meth:`pack`: ``(chain, mask)``."""
        return unpack_chain(raw_actions, self.config.num_steps, self.num_action_chunks, self.action_dim)

    # ---- EmbodiedPolicy ---------------------------------------------------------------------
    def act(self, states=None, images=None, wrist_images=None, instructions=None,
            deterministic: bool = False, generator: torch.Generator | None = None) -> PolicyOutput:
        cfg = self.config
        x = self._states(states)
        features = self.encoder(x)
        b = features.shape[0]
        x0 = torch.randn(b, self.num_action_chunks, self.action_dim, generator=generator, device=features.device)
        mask = stochastic_mask(cfg.noise_method, b, cfg.num_steps, cfg.ignore_last, deterministic,
                               generator, features.device)
        level = flow_sde_level(cfg.noise_level, cfg.noise_anneal, cfg.noise_params, self.global_step, x0.dtype)
        sample = sample_chain(self._velocity_fn(features), x0, cfg.noise_method, cfg.num_steps,
                              level, cfg.joint_logprob, mask, generator)
        actions = torch.maximum(torch.minimum(sample.chain[:, -1], self.action_high), self.action_low)
        raw = self.pack(sample.chain.detach(), mask, level if cfg.noise_method == "flow_sde" else 1.0)
        return PolicyOutput(actions.float(), raw, sample.logprobs, self._values(x, features), sample.entropy)

    def evaluate(self, raw_actions: torch.Tensor, states=None, images=None, wrist_images=None,
                 instructions=None) -> PolicyOutput:
        cfg = self.config
        x = self._states(states)
        features = self.encoder(x)
        raw = to_tensor(raw_actions, features.device)
        chain, mask = self.unpack(raw)
        logprobs, entropy = chain_logprob_gathered(self._rows_velocity_fn(features), chain, mask, cfg.noise_method,
                                                   unpack_step_levels(raw, cfg.num_steps), cfg.joint_logprob)
        actions = torch.maximum(torch.minimum(chain[:, -1], self.action_high), self.action_low)
        return PolicyOutput(actions, raw_actions, logprobs, self._values(x, features), entropy)

    def value(self, states=None, images=None, wrist_images=None, instructions=None) -> torch.Tensor:
        values = self._values(self._states(states), None)
        if values is None:
            raise ValueError("this FlowPolicy has no value head (add_value_head: false)")
        return values
