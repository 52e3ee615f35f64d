"""State normalisation and action un-normalisation of π0 / π0.5, in openpi's and LeRobot's forms.

openpi (``openpi/transforms.py``; π0 uses mean/std, every other model quantiles):

* mean/std: ``(x - mean) / (std + 1e-6)``; back ``a (std + 1e-6) + mean``.
* quantile: ``(x - q01) / (q99 - q01 + 1e-6) * 2 - 1``; back ``(a + 1) / 2 (q99 - q01 + 1e-6) + q01``.

LeRobot (``NormalizerProcessorStep``, ``eps`` from the processor config, default 1e-8):

* MEAN_STD: ``(x - mean) / (std + eps)``; back ``a std + mean``.
* QUANTILES: ``2 (x - q01) / d - 1``, back ``(a + 1) d / 2 + q01`` with ``d = q99 - q01`` (``eps``
  where ``d = 0``).

Statistics cover the raw (unpadded) dimensions; the model's padded actions are un-normalised on
those and cut to them.

Example:
    >>> stats = NormStats(mode="mean_std", style="openpi", actions={"mean": [1.0], "std": [2.0]})
    >>> round(stats.unnormalize_actions(torch.tensor([[[0.5, 9.0]]]))[0, 0, 0].item(), 5)
    2.0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

MODES = ("mean_std", "quantile")
STYLES = ("openpi", "lerobot")
OPENPI_EPS = 1e-6


def _vec(stats: Mapping[str, Any], name: str, where: str) -> torch.Tensor:
    value = stats.get(name)
    if value is None:
        raise ValueError(f"{where}: no {name!r} statistics")
    return torch.as_tensor(value, dtype=torch.float64).reshape(-1)


@dataclass
class NormStats:
    """Statistics of one robot / dataset and how they are applied.

    Attributes:
        mode: ``mean_std`` (π0) or ``quantile`` (π0.5).
        style: ``openpi`` or ``lerobot`` formulas (see the module docstring).
        actions: ``{"mean", "std", "q01", "q99"}`` lists of the raw action width.
        state: the same for the state (None: the state is passed through).
        eps: LeRobot's epsilon.
        where: the file the statistics came from (for messages).
        state_mode: the state's mode when it differs from the actions' (LeRobot maps STATE and
            ACTION separately); None = ``mode``.
    """

    mode: str
    style: str
    actions: dict[str, Any]
    state: dict[str, Any] | None = None
    eps: float = 1e-8
    where: str = "statistics"
    state_mode: str | None = None

    def __post_init__(self):
        for m in (self.mode, self.state_mode or self.mode):
            if m not in MODES:
                raise ValueError(f"{self.where}: normalisation mode must be one of {MODES}, got {m!r}")
        if self.style not in STYLES:
            raise ValueError(f"{self.where}: style must be one of {STYLES}, got {self.style!r}")
        keys = ("mean", "std") if self.mode == "mean_std" else ("q01", "q99")
        for name in keys:
            _vec(self.actions, name, f"{self.where} actions")

    @property
    def action_dim(self) -> int:
        """Raw action width (the statistics' length)."""
        return int(_vec(self.actions, "mean" if self.mode == "mean_std" else "q01", self.where).numel())

    @property
    def state_dim(self) -> int | None:
        """Raw state width (the state statistics' length); None without state statistics.

        >>> NormStats("mean_std", "openpi", {"mean": [0.0], "std": [1.0]},
        ...           state={"mean": [0.0] * 3, "std": [1.0] * 3}).state_dim
        3
        """
        if self.state is None:
            return None
        return int(_vec(self.state, "mean" if (self.state_mode or self.mode) == "mean_std" else "q01",
                        self.where).numel())

    def normalize_state(self, state: torch.Tensor) -> torch.Tensor:
        """Raw state ``[N, D]`` -> normalised (fp32); unchanged without state statistics.

        Raises:
            ValueError: ``D`` differs from the state statistics' length (both named): a state of
                another robot, or cut short, would be normalised with the wrong values.
        """
        if self.state is None:
            return state.float()
        x = state.double()
        d = x.shape[-1]
        known = self.state_dim
        if d != known:
            raise ValueError(f"the state has {d} values; the checkpoint's state statistics ({self.where}) "
                             f"have {known}")
        if (self.state_mode or self.mode) == "mean_std":
            mean, std = _vec(self.state, "mean", self.where)[:d], _vec(self.state, "std", self.where)[:d]
            out = (x - mean) / (std + (OPENPI_EPS if self.style == "openpi" else self.eps))
        else:
            q01, q99 = _vec(self.state, "q01", self.where)[:d], _vec(self.state, "q99", self.where)[:d]
            out = 2.0 * (x - q01) / self._range(q01, q99) - 1.0
        return out.float()

    def unnormalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Model actions ``[..., A]`` (padded) -> raw actions ``[..., action_dim]`` (fp32)."""
        a = actions.double()[..., : self.action_dim]
        if self.mode == "mean_std":
            mean, std = _vec(self.actions, "mean", self.where), _vec(self.actions, "std", self.where)
            out = a * (std + OPENPI_EPS) + mean if self.style == "openpi" else a * std + mean
        else:
            q01, q99 = _vec(self.actions, "q01", self.where), _vec(self.actions, "q99", self.where)
            out = (a + 1.0) / 2.0 * self._range(q01, q99) + q01
        return out.float()

    def _range(self, q01: torch.Tensor, q99: torch.Tensor) -> torch.Tensor:
        d = q99 - q01
        if self.style == "openpi":
            return d + OPENPI_EPS
        return torch.where(d == 0, torch.full_like(d, self.eps), d)


def stats_from_openpi_json(data: Mapping[str, Any], mode: str, where: str) -> NormStats:
    """``norm_stats.json`` (``{"norm_stats": {"state": {...}, "actions": {...}}}``) -> :class:`NormStats`."""
    root = data.get("norm_stats", data) if isinstance(data, Mapping) else None
    if not isinstance(root, Mapping) or not isinstance(root.get("actions"), Mapping):
        raise ValueError(f"{where}: expected {{'norm_stats': {{'actions': {{...}}, 'state': {{...}}}}}}")
    state = root.get("state")
    return NormStats(mode=mode, style="openpi", actions=dict(root["actions"]),
                     state=dict(state) if isinstance(state, Mapping) else None, where=where)


def stats_to_openpi_json(stats: NormStats) -> dict[str, Any]:
    """The inverse of :func:`stats_from_openpi_json`."""
    out = {"actions": stats.actions}
    if stats.state is not None:
        out["state"] = stats.state
    return {"norm_stats": out}
