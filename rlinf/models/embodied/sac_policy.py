"""The acting side of an off-policy run: the SAC actor (:class:`~rlinf.models.embodied.q_heads.
SquashedGaussianActor`) behind the :class:`~rlinf.models.embodied.base.EmbodiedPolicy` interface,
so the rollout workers step simulators with it as with any other policy.

It acts on ``states`` with one action per chunk (``num_action_chunks`` 1). ``raw_actions`` are the
pre-tanh samples ``u``; ``logprobs`` the squashed Gaussian's per-dimension log-density
(their sum is ``log pi(a|s)``), recomputed exactly by :meth:`SACActorPolicy.evaluate`. The Q
ensemble stays with the learner (:class:`~rlinf.workers.actor.offpolicy_actor.OffPolicyActorWorker`),
whose ``policy_state()`` loads here by name (``actor.*``).

Example:
    >>> import torch
    >>> policy = SACActorPolicy(state_dim=4, action_dim=2, hidden_sizes=(8,))
    >>> out = policy.act(states=torch.zeros(3, 4), generator=torch.Generator().manual_seed(0))
    >>> out.actions.shape, out.logprobs.shape, out.values is None
    (torch.Size([3, 1, 2]), torch.Size([3, 1, 2]), True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from rlinf.models.embodied.base import EmbodiedPolicy, PolicyOutput
from rlinf.models.embodied.q_heads import SquashedGaussianActor

_LOG2 = math.log(2.0)
_LOG_2PI = math.log(2.0 * math.pi)


class SACActorPolicy(EmbodiedPolicy):
    """The SAC actor as an embodied policy (see the module docstring).

    Args:
        state_dim, action_dim: sizes.
        hidden_sizes, log_std_min, log_std_max: as the learner's actor.
        action_low, action_high: the env's bounds (default [-1, 1]).
    """

    def __init__(self, state_dim: int, action_dim: int, hidden_sizes: Sequence[int] = (256, 256, 256),
                 log_std_min: float = -5.0, log_std_max: float = 2.0, action_low=None, action_high=None):
        super().__init__()
        self.action_dim, self.num_action_chunks = action_dim, 1
        low = None if action_low is None else torch.as_tensor(action_low, dtype=torch.float32)
        high = None if action_high is None else torch.as_tensor(action_high, dtype=torch.float32)
        self.actor = SquashedGaussianActor(state_dim, action_dim, hidden_sizes, log_std_min, log_std_max, low, high)

    def _output(self, u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> PolicyOutput:
        per_dim = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * _LOG_2PI
                   - 2.0 * (_LOG2 - u - F.softplus(-2.0 * u)))
        actions = torch.tanh(u) * self.actor.scale + self.actor.bias
        return PolicyOutput(actions=actions.unsqueeze(1).detach().float(), raw_actions=u.unsqueeze(1),
                            logprobs=per_dim.unsqueeze(1).float())

    def act(self, states=None, images=None, wrist_images=None, instructions=None,
            deterministic: bool = False, generator: torch.Generator | None = None) -> PolicyOutput:
        if states is None:
            raise ValueError("the SAC actor acts on state observations (states=None)")
        mean, log_std = self.actor.distribution(states.float())
        if deterministic:
            u = mean.detach()
        else:
            noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype).to(mean.device)
            u = (mean + log_std.exp() * noise).detach()
        return self._output(u, mean, log_std)

    def evaluate(self, raw_actions: torch.Tensor, states=None, images=None, wrist_images=None,
                 instructions=None) -> PolicyOutput:
        mean, log_std = self.actor.distribution(states.float())
        u = raw_actions.to(mean.device).float().squeeze(1)
        if u.shape != mean.shape:
            raise ValueError(f"raw_actions must be {(mean.shape[0], 1, mean.shape[1])}, got {tuple(raw_actions.shape)}")
        return self._output(u, mean, log_std)

    def value(self, states=None, images=None, wrist_images=None, instructions=None) -> torch.Tensor:
        raise RuntimeError("a SAC policy has no state-value head: its critic is the learner's Q ensemble")
