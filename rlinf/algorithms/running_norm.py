"""Running observation statistics and the PPO update's small helpers (per-minibatch advantage
whitening, the approximate KL that stops an update early).

Running moments (Chan et al.'s parallel update, the one gymnasium's ``NormalizeObservation`` and
CleanRL use): with the current ``(mean, var, count)`` and a batch of ``n`` rows with mean ``m_b``
and (population) variance ``v_b``,

    delta = m_b - mean,  total = count + n
    mean' = mean + delta * n / total
    var'  = (var * count + v_b * n + delta^2 * count * n / total) / total
    count' = total

which equals the mean and population variance of all rows seen so far (up to the tiny initial
``count``). Normalised observation: ``clamp((x - mean) / sqrt(var + eps), -clip, clip)``.

Example:
    >>> import torch
    >>> rm = RunningMoments.create(2)
    >>> rm.update(torch.tensor([[0.0, 1.0], [2.0, 3.0]]))
    >>> [round(v, 3) for v in rm.mean.tolist()], [round(v, 3) for v in rm.var.tolist()]
    ([1.0, 2.0], [1.0, 1.0])
    >>> [round(v, 3) for v in rm.normalize(torch.tensor([[3.0, 9.0]]), clip=5.0)[0].tolist()]
    [2.0, 5.0]
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["RunningMoments", "approx_kl", "whiten"]


@dataclass
class RunningMoments:
    """Mean, population variance and row count of everything :meth:`update` has seen.

    Attributes:
        mean, var: ``[D]`` float64 (float64 so that long runs do not drift).
        count: rows seen (starts at ``initial_count``, a tiny prior of mean 0 / var 1).
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: float

    @classmethod
    def create(cls, dim: int, initial_count: float = 1e-4) -> RunningMoments:
        """Empty statistics of ``dim`` features (mean 0, var 1, count ``initial_count``)."""
        return cls(torch.zeros(dim, dtype=torch.float64), torch.ones(dim, dtype=torch.float64),
                   float(initial_count))

    def update(self, x: torch.Tensor) -> None:
        """Merge the rows of ``x`` ``[n, D]`` (see the module docstring)."""
        x = x.detach().to(torch.float64).reshape(-1, self.mean.shape[0])
        n = x.shape[0]
        if n == 0:
            return
        batch_mean, batch_var = x.mean(0), x.var(0, unbiased=False)
        delta, total = batch_mean - self.mean, self.count + n
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * (self.count * n / total)
        self.mean = self.mean + delta * (n / total)
        self.var = m2 / total
        self.count = total

    def normalize(self, x: torch.Tensor, clip: float | None = 10.0, eps: float = 1e-8) -> torch.Tensor:
        """``clamp((x - mean) / sqrt(var + eps), -clip, clip)`` in ``x``'s dtype (no clamp for
        ``clip`` None)."""
        mean = self.mean.to(x.device, x.dtype)
        std = torch.sqrt(self.var + eps).to(x.device, x.dtype)
        out = (x - mean) / std
        return out if clip is None else out.clamp(-clip, clip)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors to save or send (``mean``, ``var``, ``count``)."""
        return {"mean": self.mean.clone(), "var": self.var.clone(),
                "count": torch.tensor(self.count, dtype=torch.float64)}

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor]) -> RunningMoments:
        return cls(state["mean"].to(torch.float64), state["var"].to(torch.float64), float(state["count"]))


def whiten(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean(x)) / (std(x) + eps)`` over all entries, std with Bessel's correction (as
    CleanRL's per-minibatch advantage normalisation); a single entry is only centred.

    >>> whiten(torch.tensor([1.0, 3.0])).tolist()   # mean 2, std sqrt(2)
    [-0.7071067690849304, 0.7071067690849304]
    """
    if x.numel() < 2:
        return x - x.mean()
    return (x - x.mean()) / (x.std() + eps)


def approx_kl(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """Mean of ``(r - 1) - log r`` with ``r = exp(logprobs - old_logprobs)`` (Schulman's k3
    estimator of KL(old || new), always >= 0): the quantity PPO's ``target_kl`` stops an update on.

    >>> round(float(approx_kl(torch.tensor([0.0, 0.0]), torch.tensor([0.0, 0.0]))), 6)
    0.0
    >>> round(float(approx_kl(torch.log(torch.tensor([2.0])), torch.tensor([0.0]))), 4)  # 1 - ln 2
    0.3069
    """
    log_ratio = (logprobs - old_logprobs).float()
    return (torch.expm1(log_ratio) - log_ratio).mean()
