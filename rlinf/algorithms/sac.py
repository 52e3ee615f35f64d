"""Soft actor-critic and its variants (CrossQ, RLPD) as pure tensor functions.

Notation: ``Q_k(s, a)`` the ``K`` critic heads, ``pi`` the tanh-Gaussian actor, ``alpha`` the
entropy temperature, ``gamma`` the discount, ``d`` the *terminated* flag of a transition (a time-limit
truncation is not a termination: the target bootstraps through it).

* Squashed Gaussian: ``a = tanh(u)``, ``u ~ N(mu, sigma)``;
  ``log pi(a|s) = sum_i [log N(u_i; mu_i, sigma_i) - log(1 - tanh(u_i)^2)]`` with
  ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` (exact, stable).
* Critic target: ``y = r + gamma^k (1 - d) (min_{j in J} Q'_j(s', a') - alpha log pi(a'|s'))`` with
  ``a' ~ pi(.|s')``; ``J`` = all target heads (SAC: twin Q), or a random subset of
  ``critic_subsample_size`` heads (RLPD / REDQ); ``k`` = the steps a transition spans (n-step).
  With ``backup_entropy=False`` (RLPD's default) the ``- alpha log pi`` term is dropped.
* Critic loss: ``sum_k mean_b (Q_k(s, a) - y)^2`` (each head regressed on the same target).
* Actor loss: ``mean_b [alpha log pi(a~|s) - agg_k Q_k(s, a~)]``, ``a~ ~ pi(.|s)`` reparameterised;
  ``agg`` = min (SAC) or mean (RLPD's ``agg_q: mean``).
* Temperature: ``alpha = exp(p)`` or ``softplus(p)`` (``alpha_type``); loss
  ``-mean_b[alpha * (log pi(a~|s) + H_target)]`` with ``log pi`` detached, so alpha rises when
  the policy's entropy ``-log pi`` is below ``H_target`` and falls when above.
* Target networks: ``theta' <- tau theta + (1 - tau) theta'`` (:func:`soft_update`); CrossQ has
  none: it evaluates ``(s, a)`` and ``(s', a')`` in one batch-renormalised forward and uses the
  detached second half as ``Q'`` (:func:`crossq_split`).

Example:
    >>> import torch
    >>> y = sac_critic_target(torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0]),
    ...                       torch.tensor([[2.0, 4.0], [3.0, 5.0]]), torch.tensor([0.5, 0.5]),
    ...                       gamma=0.9, alpha=0.2)
    >>> [round(v, 4) for v in y.tolist()]   # 1 + 0.9 * (min(2, 3) - 0.2 * 0.5) ; terminated: 1
    [2.71, 1.0]
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_LOG2 = math.log(2.0)
_LOG_2PI = math.log(2.0 * math.pi)

__all__ = ["squashed_gaussian_logprob", "sample_squashed_gaussian", "sac_critic_target", "sac_critic_loss",
           "sac_actor_loss", "alpha_value", "alpha_loss", "soft_update", "subsample_heads", "crossq_split"]


def squashed_gaussian_logprob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """``log pi(tanh(u))`` summed over the last (action) dimension; ``u`` is the pre-tanh sample.

    >>> import torch
    >>> round(float(squashed_gaussian_logprob(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1))), 4)
    -0.9189
    """
    normal = -0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * _LOG_2PI
    log_det = 2.0 * (_LOG2 - u - F.softplus(-2.0 * u))
    return (normal - log_det).sum(-1)


def sample_squashed_gaussian(mean: torch.Tensor, log_std: torch.Tensor, deterministic: bool = False,
                             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a, log pi(a))``: ``a = tanh(mu + sigma * eps)`` (reparameterised), or ``tanh(mu)`` with
    its log-density when ``deterministic``."""
    if deterministic:
        u = mean
    else:
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        u = mean + log_std.exp() * noise
    return torch.tanh(u), squashed_gaussian_logprob(u, mean, log_std)


def sac_critic_target(rewards: torch.Tensor, terminated: torch.Tensor, next_q: torch.Tensor,
                      next_logprob: torch.Tensor | None, gamma: float, alpha: float | torch.Tensor,
                      discounts: torch.Tensor | None = None, agg: str = "min") -> torch.Tensor:
    """``y = r + gamma^k (1 - d) (min_j Q'_j - alpha log pi')`` (no gradient); ``agg="mean"``
    takes the mean over the chosen heads instead of the min (RLinf's ``agg_q: mean``).

    >>> import torch
    >>> y = sac_critic_target(torch.zeros(1), torch.zeros(1), torch.tensor([[2.0], [4.0]]), None, 0.5, 0.0,
    ...                       agg="mean")
    >>> float(y)   # 0.5 * mean(2, 4)
    1.5

    Args:
        rewards, terminated: ``[B]`` (n-step: the discounted reward sum over the span).
        next_q: ``[J, B]`` the target heads already chosen (all, or a subset) at ``(s', a')``.
        next_logprob: ``[B]`` ``log pi(a'|s')``; None = no entropy term (``backup_entropy``
            off).
        gamma: discount per step.
        alpha: temperature.
        discounts: ``[B]`` ``gamma^k`` per transition (n-step); None = ``gamma``.
        agg: ``min`` or ``mean`` over the heads of ``next_q``.
    """
    if not 0 <= gamma <= 1:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if agg not in ("min", "mean"):
        raise ValueError(f"agg_q must be 'min' or 'mean', got {agg!r}")
    with torch.no_grad():
        soft = next_q.min(dim=0).values if agg == "min" else next_q.mean(dim=0)
        if next_logprob is not None:
            soft = soft - alpha * next_logprob
        discount = torch.full_like(rewards, gamma) if discounts is None else discounts
        return rewards + discount * (1.0 - terminated.float()) * soft


def sac_critic_loss(q_pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``sum_k mean_b (Q_k - y)^2`` over the heads ``q_pred`` ``[K, B]``."""
    return ((q_pred - target.detach().unsqueeze(0)) ** 2).mean(dim=1).sum()


def sac_actor_loss(q_pi: torch.Tensor, logprob: torch.Tensor, alpha: float | torch.Tensor,
                   agg: str = "min") -> torch.Tensor:
    """``mean_b[alpha log pi - agg_k Q_k(s, a~)]``; ``q_pi`` ``[K, B]``, ``agg`` min or mean."""
    if agg not in ("min", "mean"):
        raise ValueError(f"agg_q must be 'min' or 'mean', got {agg!r}")
    q = q_pi.min(dim=0).values if agg == "min" else q_pi.mean(dim=0)
    return (alpha * logprob - q).mean()


def alpha_value(param: torch.Tensor, alpha_type: str = "exp") -> torch.Tensor:
    """The temperature from its free parameter: ``exp(p)`` or ``softplus(p)``."""
    if alpha_type == "exp":
        return param.exp()
    if alpha_type == "softplus":
        return F.softplus(param)
    raise ValueError(f"entropy_tuning.alpha_type must be 'exp' or 'softplus', got {alpha_type!r}")


def alpha_loss(param: torch.Tensor, logprob: torch.Tensor, target_entropy: float,
               alpha_type: str = "exp") -> torch.Tensor:
    """``-mean_b[alpha * (log pi + H_target)]`` with ``log pi`` detached.

    >>> import torch
    >>> p = torch.zeros((), requires_grad=True)          # alpha = 1
    >>> alpha_loss(p, torch.tensor([1.0]), target_entropy=-2.0).backward()   # entropy -1 > -2
    >>> float(p.grad)        # positive gradient: a descent step lowers alpha
    1.0
    """
    return -(alpha_value(param, alpha_type) * (logprob.detach() + target_entropy)).mean()


@torch.no_grad()
def soft_update(target: list[torch.Tensor], source: list[torch.Tensor], tau: float) -> None:
    """``target <- tau * source + (1 - tau) * target`` in place (``tau`` in (0, 1])."""
    if not 0 < tau <= 1:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    for t, s in zip(target, source, strict=True):
        t.mul_(1.0 - tau).add_(s.detach(), alpha=tau)


def subsample_heads(q: torch.Tensor, size: int | None, generator: torch.Generator | None = None) -> torch.Tensor:
    """``size`` random heads of ``q`` ``[K, B]`` (the same subset for the whole batch, as RLPD /
    REDQ draw it per update); None or ``size >= K``: all heads."""
    k = q.shape[0]
    if size is None or size >= k:
        return q
    if size < 1:
        raise ValueError(f"critic_subsample_size must be >= 1, got {size}")
    idx = torch.randperm(k, generator=generator)[:size].to(q.device)
    return q.index_select(0, idx)


def crossq_split(q_joint: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CrossQ: heads evaluated on ``cat([(s, a), (s', a')])`` ``[K, 2B]`` -> ``(Q(s, a), Q'(s', a'))``,
    the second detached (it is the target; there are no target networks)."""
    if q_joint.shape[1] != 2 * batch_size:
        raise ValueError(f"expected [K, {2 * batch_size}] joint Q values, got {list(q_joint.shape)}")
    return q_joint[:, :batch_size], q_joint[:, batch_size:].detach()
