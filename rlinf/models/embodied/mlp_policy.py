"""MLP actor-critic on state observations (CleanRL's continuous PPO agent, with action chunks).

Actor: ``state -> [Linear, Tanh] x len(hidden_sizes) -> Linear(K * A)`` means; critic: a separate
MLP of the same shape with ``1`` (chunk_level) or ``K`` (action_level) outputs. Orthogonal init,
gain ``sqrt(2)`` for hidden layers, 0.01 for the action means, 1.0 for the value output (as in
CleanRL). The action distribution and the clipping are described in
:mod:`rlinf.models.embodied.gaussian`.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from rlinf.models.embodied.base import mlp, to_tensor
from rlinf.models.embodied.gaussian import GaussianActorCritic


@dataclass(frozen=True)
class MLPPolicyConfig:
    """Sizes of an :class:`MLPPolicy`.

    Attributes:
        state_dim: input state length ``D``.
        action_dim: ``A``.
        num_action_chunks: ``K``; the actor outputs ``K * A`` means.
        hidden_sizes: widths of the actor's hidden layers.
        critic_hidden_sizes: widths of the critic's hidden layers; None = hidden_sizes.
        init_log_std: initial log standard deviation of every action dimension.
        value_type: chunk_level (values ``[N]``) or action_level (``[N, K]``).
        add_value_head: build the critic (False: ``values`` is None).
        action_low, action_high: env action bounds the actions are clipped to; None = [-1, 1].
    """

    state_dim: int
    action_dim: int
    num_action_chunks: int = 1
    hidden_sizes: tuple[int, ...] = (256, 256, 256)
    critic_hidden_sizes: tuple[int, ...] | None = None
    init_log_std: float = 0.0
    value_type: str = "chunk_level"
    add_value_head: bool = True
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None


class MLPPolicy(GaussianActorCritic):
    """Gaussian MLP actor + separate MLP critic on ``states`` ``[N, D]``.

    Args:
        config: sizes, see :class:`MLPPolicyConfig`.

    Example:
        >>> import torch
        >>> policy = MLPPolicy(MLPPolicyConfig(state_dim=4, action_dim=2, num_action_chunks=3,
        ...                                    hidden_sizes=(16,), value_type="action_level"))
        >>> out = policy.act(states=torch.randn(5, 4), generator=torch.Generator().manual_seed(0))
        >>> out.actions.shape, out.logprobs.shape, out.values.shape
        (torch.Size([5, 3, 2]), torch.Size([5, 3, 2]), torch.Size([5, 3]))
        >>> again = policy.evaluate(out.raw_actions, states=torch.zeros(5, 4))
        >>> again.entropy.shape
        torch.Size([5, 3, 2])
    """

    config_cls = MLPPolicyConfig

    def __init__(self, config: MLPPolicyConfig):
        super().__init__(config.action_dim, config.num_action_chunks, config.value_type,
                         config.init_log_std, config.action_low, config.action_high)
        if config.state_dim < 1:
            raise ValueError(f"MLPPolicy needs state observations (state_dim >= 1), got {config.state_dim}")
        self.config = config
        self.state_dim = config.state_dim
        self.actor_mean = mlp(config.state_dim, config.hidden_sizes,
                              config.num_action_chunks * config.action_dim, nn.Tanh, out_std=0.01)
        if config.add_value_head:
            critic_sizes = config.critic_hidden_sizes if config.critic_hidden_sizes is not None else config.hidden_sizes
            self.critic = mlp(config.state_dim, critic_sizes, self.value_out_dim, nn.Tanh, out_std=1.0)

    def features(self, states=None, images=None, wrist_images=None, instructions=None):
        """Both heads read the state itself: returns ``(states, states)`` as float32."""
        if states is None:
            raise ValueError("MLPPolicy needs states [N, D]")
        x = to_tensor(states, self.log_std.device).float()
        if x.dim() != 2 or x.shape[1] != self.state_dim:
            raise ValueError(f"states must be [N, {self.state_dim}], got {tuple(x.shape)}")
        return x, x
