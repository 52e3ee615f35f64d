"""Networks of the off-policy algorithms (:mod:`rlinf.algorithms.sac`): a tanh-Gaussian actor
and an ensemble of Q heads in three kinds (``q_head_type``).

* ``default``: ``[Linear, ReLU] x n -> Linear(1)`` per head (SAC's twin Q).
* ``layernorm``: ``[Linear, LayerNorm, ReLU] x n -> Linear(1)`` (RLPD's critics).
* ``crossq``: ``[Linear, BatchRenorm, ReLU] x n -> Linear(1)`` with batch renormalisation also on
  the input (CrossQ); meant to be called on ``cat([(s, a), (s', a')])`` so both halves share the
  batch statistics, without target networks.

Example:
    >>> import torch
    >>> q = QEnsemble(obs_dim=5, action_dim=2, hidden_sizes=(16, 16), num_heads=3, head_type="layernorm")
    >>> q(torch.zeros(4, 5), torch.zeros(4, 2)).shape
    torch.Size([3, 4])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rlinf.algorithms.sac import sample_squashed_gaussian

Q_HEAD_TYPES = ("default", "layernorm", "crossq")


class BatchRenorm1d(nn.Module):
    """Batch renormalisation (Ioffe 2017) over ``[B, C]``, as CrossQ uses it.

    Training: ``x_hat = (x - mu_B) / sigma_B * r + d`` with ``r = clip(sigma_B / sigma, 1/r_max,
    r_max)`` and ``d = clip((mu_B - mu) / sigma, -d_max, d_max)`` (``r``, ``d`` without gradient),
    then ``gamma * x_hat + beta``; the running ``mu``, ``sigma`` follow the batch with ``momentum``.
    During the first ``warmup_steps`` training calls ``r = 1`` and ``d = 0`` (plain batch norm).
    Evaluation uses the running statistics.

    >>> import torch
    >>> bn = BatchRenorm1d(3)     # in its warm-up: plain batch norm
    >>> x = torch.randn(64, 3) * 5 + 2
    >>> y = bn(x)
    >>> bool(y.mean(0).abs().max() < 0.05), bool((y.std(0, unbiased=False) - 1).abs().max() < 0.05)
    (True, True)
    """

    def __init__(self, channels: int, momentum: float = 0.01, eps: float = 1e-3, r_max: float = 3.0,
                 d_max: float = 5.0, warmup_steps: int = 100_000):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.momentum, self.eps, self.r_max, self.d_max, self.warmup_steps = momentum, eps, r_max, d_max, warmup_steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            x_hat = (x - self.running_mean) / torch.sqrt(self.running_var + self.eps)
            return self.weight * x_hat + self.bias
        mean, var = x.mean(0), x.var(0, unbiased=False)
        std = torch.sqrt(var + self.eps)
        x_hat = (x - mean) / std
        if int(self.steps) >= self.warmup_steps:
            with torch.no_grad():
                running_std = torch.sqrt(self.running_var + self.eps)
                r = (std / running_std).clamp(1 / self.r_max, self.r_max)
                d = ((mean - self.running_mean) / running_std).clamp(-self.d_max, self.d_max)
            x_hat = x_hat * r + d
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var, self.momentum)
            self.steps += 1
        return self.weight * x_hat + self.bias


def _q_mlp(in_dim: int, hidden: Sequence[int], head_type: str) -> nn.Sequential:
    layers: list[nn.Module] = [BatchRenorm1d(in_dim)] if head_type == "crossq" else []
    width = in_dim
    for h in hidden:
        layers.append(nn.Linear(width, h))
        if head_type == "layernorm":
            layers.append(nn.LayerNorm(h))
        elif head_type == "crossq":
            layers.append(BatchRenorm1d(h))
        layers.append(nn.ReLU())
        width = h
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


class QEnsemble(nn.Module):
    """``num_heads`` independent Q networks; ``forward(obs, action) -> [num_heads, B]``.

    Args:
        obs_dim, action_dim: input sizes (the Q input is their concatenation).
        hidden_sizes: hidden widths of each head.
        num_heads: ``num_q_heads`` (2 = SAC's twin Q; RLPD uses 10).
        head_type: one of :data:`Q_HEAD_TYPES`.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int] = (256, 256, 256),
                 num_heads: int = 2, head_type: str = "default"):
        super().__init__()
        if head_type not in Q_HEAD_TYPES:
            raise ValueError(f"q_head_type must be one of {', '.join(Q_HEAD_TYPES)}, got {head_type!r}")
        if num_heads < 1:
            raise ValueError(f"num_q_heads must be >= 1, got {num_heads}")
        self.head_type = head_type
        self.heads = nn.ModuleList(_q_mlp(obs_dim + action_dim, hidden_sizes, head_type) for _ in range(num_heads))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        return torch.stack([head(x).squeeze(-1) for head in self.heads])


class SquashedGaussianActor(nn.Module):
    """``obs -> [Linear, ReLU] x n -> (mean, raw log-std)``; ``log_std = lo + (hi - lo) *
    (tanh(raw) + 1) / 2``; action ``= tanh(u) * scale + bias`` into the env's bounds.

    :meth:`forward` returns ``(env action [B, A], log pi [B])``; the log-density is that of the
    squashed action in [-1, 1] (:func:`~rlinf.algorithms.sac.squashed_gaussian_logprob`), the
    quantity the entropy target ``-A`` refers to.

    >>> import torch
    >>> actor = SquashedGaussianActor(3, 2, (8,), low=torch.tensor([0.0, -2.0]), high=torch.tensor([1.0, 2.0]))
    >>> a, logp = actor(torch.zeros(5, 3), generator=torch.Generator().manual_seed(0))
    >>> bool((a[:, 0] >= 0).all() and (a[:, 0] <= 1).all() and (a[:, 1].abs() <= 2).all()), logp.shape
    (True, torch.Size([5]))
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int] = (256, 256, 256),
                 log_std_min: float = -5.0, log_std_max: float = 2.0, low: torch.Tensor | None = None,
                 high: torch.Tensor | None = None):
        super().__init__()
        layers: list[nn.Module] = []
        width = obs_dim
        for h in hidden_sizes:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 2 * action_dim))
        self.net = nn.Sequential(*layers)
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        low = torch.full((action_dim,), -1.0) if low is None else torch.as_tensor(low, dtype=torch.float32)
        high = torch.full((action_dim,), 1.0) if high is None else torch.as_tensor(high, dtype=torch.float32)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("bias", (high + low) / 2)

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)`` of the pre-tanh Gaussian."""
        mean, raw = self.net(obs).chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw) + 1)
        return mean, log_std

    def forward(self, obs: torch.Tensor, deterministic: bool = False,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.distribution(obs)
        squashed, logp = sample_squashed_gaussian(mean, log_std, deterministic, generator)
        return squashed * self.scale + self.bias, logp
