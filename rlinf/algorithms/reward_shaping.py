"""Reward clipping and normalisation before the advantages (AReaL's ``reward_clip`` and
``reward_norm``).

Example:
    >>> import torch
    >>> r = torch.tensor([30.0, -1.0, 1.0, 3.0])
    >>> clip_rewards(r, 20.0)
    tensor([20., -1.,  1.,  3.])
    >>> normalize_rewards(torch.tensor([1.0, 3.0, 0.0, 0.0]), mean_level="group", std_level=None, group_size=2)
    tensor([-1.,  1.,  0.,  0.])
"""

from __future__ import annotations

import torch


def clip_rewards(rewards: torch.Tensor, clip: float | None) -> torch.Tensor:
    """r' = clamp(r, -clip, clip); ``clip`` None = unchanged."""
    if clip is None:
        return rewards
    if clip <= 0:
        raise ValueError(f"reward_clip must be > 0 or None, got {clip}")
    return rewards.clamp(-clip, clip)


def normalize_rewards(rewards: torch.Tensor, mean_level: str | None = "batch", std_level: str | None = "batch",
                      group_size: int = 1, mean_leave1out: bool = False, std_unbiased: bool = True,
                      eps: float = 1e-5) -> torch.Tensor:
    """r' = (r - mu) / (sigma + eps), each statistic over the whole batch (``batch``), over each
    group of ``group_size`` consecutive samples (``group``), or not applied (None: mu = 0,
    sigma + eps = 1). ``mean_leave1out``: mu for sample i is the mean of the OTHER samples of its
    batch / group.

    >>> normalize_rewards(torch.tensor([1.0, 0.0, 0.0]), "batch", None, mean_leave1out=True)
    tensor([ 1.0000, -0.5000, -0.5000])
    """
    r = rewards.float()
    n = r.shape[0]
    if n == 0:
        return r

    def view(level: str) -> torch.Tensor:
        if level == "group":
            if group_size < 1 or n % group_size:
                raise ValueError(f"{n} rewards do not split into groups of {group_size}")
            return r.view(-1, group_size)
        if level == "batch":
            return r.view(1, -1)
        raise ValueError(f"unknown normalisation level {level!r}; expected batch, group or None")

    out = r
    if mean_level is not None:
        g = view(mean_level)
        k = g.shape[1]
        if mean_leave1out:
            if k < 2:
                raise ValueError("mean_leave1out needs at least 2 samples per batch / group")
            mu = (g.sum(dim=1, keepdim=True) - g) / (k - 1)
        else:
            mu = g.mean(dim=1, keepdim=True)
        out = (g - mu).reshape(-1)
    if std_level is not None:
        g = view(std_level)
        sigma = g.std(dim=1, unbiased=std_unbiased, keepdim=True) if g.shape[1] > 1 else torch.zeros_like(g[:, :1])
        out = (out.view(g.shape) / (sigma + eps)).reshape(-1)
    return out
