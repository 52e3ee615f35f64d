"""Gaussian actor-critic shared by :class:`~rlinf.models.embodied.mlp_policy.MLPPolicy` and
:class:`~rlinf.models.embodied.cnn_policy.CNNPolicy`.

Action distribution: the actor outputs ``K * A`` means; the standard deviation is
``exp(log_std)`` with ``log_std`` a state-independent parameter ``[K * A]`` (CleanRL's continuous
PPO). Each action dimension is an independent Gaussian.

Bounds: **clip, not squash.** The raw action ``u ~ N(mean, std)`` is what log-probs and entropy
are defined on (``raw_actions``); the env action is ``clamp(u, low, high)``. Clipping happens
outside the distribution, so ``evaluate(raw_actions)`` reproduces ``act``'s log-probs exactly and
the entropy is the closed-form Gaussian entropy ``0.5 * log(2 pi e) + log_std`` per dimension.
The Gaussian lives in env action units (for ManiSkill / LIBERO those are already [-1, 1]).

Example:
    >>> import torch
    >>> from rlinf.models.embodied.mlp_policy import MLPPolicy, MLPPolicyConfig
    >>> policy = MLPPolicy(MLPPolicyConfig(state_dim=3, action_dim=2, num_action_chunks=4))
    >>> out = policy.act(states=torch.zeros(5, 3))
    >>> out.actions.shape, bool(out.actions.abs().max() <= 1)
    (torch.Size([5, 4, 2]), True)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from torch import nn

from rlinf.models.embodied.base import (
    EmbodiedPolicy,
    PolicyOutput,
    check_value_type,
    gaussian_entropy,
    gaussian_log_prob,
)


class GaussianActorCritic(EmbodiedPolicy):
    """Gaussian policy head + optional critic over features a subclass computes.

    Subclasses build ``self.actor_mean`` (features -> ``K * A``) and ``self.critic`` (features
    -> ``1`` for chunk_level or ``K`` for action_level; None without a value head) and implement
    :meth:`features`.

    Args:
        action_dim: ``A``.
        num_action_chunks: ``K``.
        value_type: chunk_level or action_level.
        init_log_std: initial ``log_std`` of every dimension.
        action_low, action_high: bounds the env actions are clipped to; None = [-1, 1].
    """

    #: the config dataclass of the subclass (saved with :meth:`save_pretrained`).
    config_cls: type = type(None)
    CONFIG_FILE = "policy_config.json"
    WEIGHTS_FILE = "policy.pt"

    def __init__(self, action_dim: int, num_action_chunks: int, value_type: str = "chunk_level",
                 init_log_std: float = 0.0, action_low=None, action_high=None):
        super().__init__()
        if action_dim < 1 or num_action_chunks < 1:
            raise ValueError(f"action_dim and num_action_chunks must be >= 1, got {action_dim}, "
                             f"{num_action_chunks}")
        self.action_dim = int(action_dim)
        self.num_action_chunks = int(num_action_chunks)
        self.value_type = check_value_type(value_type)
        self.log_std = nn.Parameter(torch.full((num_action_chunks * action_dim,), float(init_log_std)))
        low = torch.full((action_dim,), -1.0) if action_low is None else torch.as_tensor(action_low).float()
        high = torch.full((action_dim,), 1.0) if action_high is None else torch.as_tensor(action_high).float()
        if low.shape != (action_dim,) or high.shape != (action_dim,):
            raise ValueError(f"action bounds must have {action_dim} entries")
        self.register_buffer("action_low", low, persistent=False)
        self.register_buffer("action_high", high, persistent=False)
        self.critic: nn.Module | None = None

    @property
    def value_out_dim(self) -> int:
        """Outputs of the critic: 1 (chunk_level) or ``K`` (action_level)."""
        return 1 if self.value_type == "chunk_level" else self.num_action_chunks

    def features(self, states=None, images=None, wrist_images=None, instructions=None):
        """Returns ``(actor_features, critic_features)`` ``[N, F]`` for the observations."""
        raise NotImplementedError

    def _distribution(self, actor_features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = actor_features.shape[0]
        mean = self.actor_mean(actor_features).view(n, self.num_action_chunks, self.action_dim)
        log_std = self.log_std.view(1, self.num_action_chunks, self.action_dim).expand_as(mean)
        return mean, log_std

    def _values(self, critic_features: torch.Tensor) -> torch.Tensor | None:
        if self.critic is None:
            return None
        v = self.critic(critic_features).float()
        return v.squeeze(-1) if self.value_type == "chunk_level" else v

    def _output(self, raw: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor,
                critic_features: torch.Tensor) -> PolicyOutput:
        low = self.action_low.to(raw.device)
        high = self.action_high.to(raw.device)
        actions = torch.maximum(torch.minimum(raw.detach().float(), high), low)
        return PolicyOutput(
            actions=actions,
            raw_actions=raw,
            logprobs=gaussian_log_prob(raw, mean, log_std),
            values=self._values(critic_features),
            entropy=gaussian_entropy(log_std),
        )

    def act(self, states=None, images=None, wrist_images=None, instructions=None,
            deterministic: bool = False, generator: torch.Generator | None = None) -> PolicyOutput:
        """See :meth:`EmbodiedPolicy.act`; ``raw_actions`` is the pre-clip Gaussian sample."""
        fa, fc = self.features(states, images, wrist_images, instructions)
        mean, log_std = self._distribution(fa)
        if deterministic:
            raw = mean.detach().float()
        else:
            dev = generator.device if generator is not None else mean.device
            noise = torch.randn(mean.shape, generator=generator, device=dev, dtype=torch.float32).to(mean.device)
            raw = (mean.detach().float() + torch.exp(log_std.detach().float()) * noise)
        return self._output(raw, mean, log_std, fc)

    def evaluate(self, raw_actions: torch.Tensor, states=None, images=None, wrist_images=None,
                 instructions=None) -> PolicyOutput:
        """See :meth:`EmbodiedPolicy.evaluate`."""
        fa, fc = self.features(states, images, wrist_images, instructions)
        mean, log_std = self._distribution(fa)
        raw = raw_actions.to(mean.device).float()
        if raw.shape != mean.shape:
            raise ValueError(f"raw_actions must be {tuple(mean.shape)}, got {tuple(raw.shape)}")
        return self._output(raw, mean, log_std, fc)

    def value(self, states=None, images=None, wrist_images=None, instructions=None) -> torch.Tensor:
        """See :meth:`EmbodiedPolicy.value`."""
        if self.critic is None:
            raise RuntimeError("this policy has no value head (add_value_head=False)")
        _, fc = self.features(states, images, wrist_images, instructions)
        return self._values(fc)

    def save_pretrained(self, save_directory: str | Path) -> None:
        """Writes ``policy_config.json`` (class and config) and ``policy.pt`` (state dict) to a folder.

        Args:
            save_directory: the folder (created if missing).
        """
        out = Path(save_directory)
        out.mkdir(parents=True, exist_ok=True)
        meta = {"policy_class": type(self).__name__, "config": dataclasses.asdict(self.config)}
        (out / self.CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        torch.save({k: v.detach().cpu() for k, v in self.state_dict().items()}, out / self.WEIGHTS_FILE)

    @classmethod
    def from_pretrained(cls, path: str | Path, **overrides):
        """Loads a folder written by :meth:`save_pretrained`.

        Args:
            path: the folder.
            **overrides: config fields to replace (e.g. ``value_type``, action bounds); fields
                that change parameter shapes fail the weight load.

        Returns:
            The policy.
        """
        path = Path(path)
        meta = json.loads((path / cls.CONFIG_FILE).read_text())
        if meta.get("policy_class") != cls.__name__:
            raise ValueError(f"{path} holds a {meta.get('policy_class')}, not a {cls.__name__}")
        raw = {k: tuple(v) if isinstance(v, list) else v for k, v in meta["config"].items()}
        raw.update(overrides)
        policy = cls(cls.config_cls(**raw))
        policy.load_state_dict(torch.load(path / cls.WEIGHTS_FILE, map_location="cpu", weights_only=True))
        return policy
