"""OpenVLA's action tokenisation and action (un)normalisation.

Bins: every action dimension, normalised to [-1, 1], is cut into ``n_bins`` uniform bins of width
``2 / n_bins``; bin ``i`` covers ``[-1 + i w, -1 + (i + 1) w)`` (the last one includes 1) and
decodes to its centre ``-1 + (i + 0.5) w``. Bin ``i`` is token id ``vocab_size - n_bins + i``:
the last ``n_bins`` ids of the vocabulary, in ascending order. (OpenVLA uses ``n_bins`` edges, i.e.
``n_bins - 1`` centres, and counts ids down from the end; ours is the plain uniform version, so
every token decodes to a distinct centre and a centre encodes back to its own token.)

Normalisation (OpenVLA's ``BOUNDS_Q99``): per dimension with 1st / 99th percentiles ``q01`` /
``q99`` of the training data, ``x = 2 (a - q01) / (q99 - q01) - 1`` clipped to [-1, 1], and back
``a = (x + 1) / 2 (q99 - q01) + q01``; dimensions with ``mask = False`` (e.g. the gripper) pass
through unchanged.

Example:
    >>> import torch
    >>> tok = ActionTokenizer(n_bins=4, vocab_size=10)
    >>> ids = tok.encode(torch.tensor([-1.0, -0.3, 0.2, 1.0]))
    >>> ids.tolist(), tok.decode(ids).tolist()
    ([6, 7, 8, 9], [-0.75, -0.25, 0.25, 0.75])
    >>> stats = {"q01": [0.0, -1.0], "q99": [2.0, 1.0], "mask": [True, False]}
    >>> unnormalize_actions(torch.tensor([[0.5, 0.5]]), stats).tolist()
    [[1.5, 0.5]]
"""

from __future__ import annotations

from typing import Any, Mapping

import torch


class ActionTokenizer:
    """Maps normalised actions in [-1, 1] to the last ``n_bins`` token ids and back.

    Args:
        n_bins: bins per action dimension.
        vocab_size: size of the language model's vocabulary (the bins are its last ids).
    """

    def __init__(self, n_bins: int = 256, vocab_size: int = 32000):
        if n_bins < 2 or vocab_size < n_bins:
            raise ValueError(f"need 2 <= n_bins <= vocab_size, got n_bins={n_bins}, vocab_size={vocab_size}")
        self.n_bins = int(n_bins)
        self.vocab_size = int(vocab_size)
        self.first_id = self.vocab_size - self.n_bins

    def bin_centers(self, device=None) -> torch.Tensor:
        """``[n_bins]`` float32 centres of the bins."""
        i = torch.arange(self.n_bins, device=device, dtype=torch.float64)
        return (-1.0 + (i + 0.5) * (2.0 / self.n_bins)).float()

    def to_bins(self, actions: torch.Tensor) -> torch.Tensor:
        """Normalised actions (any shape) -> bin indices in ``[0, n_bins)`` (int64)."""
        x = actions.double().clamp(-1.0, 1.0)
        return torch.floor((x + 1.0) * (self.n_bins / 2.0)).long().clamp(0, self.n_bins - 1)

    def bins_to_actions(self, bins: torch.Tensor) -> torch.Tensor:
        """Bin indices -> bin centres (float32)."""
        return self.bin_centers(bins.device)[bins.long()]

    def encode(self, actions: torch.Tensor) -> torch.Tensor:
        """Normalised actions -> token ids (int64)."""
        return self.to_bins(actions) + self.first_id

    def token_ids_to_bins(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Token ids (int or float) -> bin indices; raises ValueError outside the action ids."""
        bins = token_ids.round().long() - self.first_id
        if bins.numel() and (bool((bins < 0).any()) or bool((bins >= self.n_bins).any())):
            raise ValueError(f"token ids must lie in [{self.first_id}, {self.vocab_size}) (the action bins)")
        return bins

    def decode(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Token ids -> normalised actions (bin centres, float32)."""
        return self.bins_to_actions(self.token_ids_to_bins(token_ids))


def _stats_tensors(stats: Mapping[str, Any], dim: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q01 = torch.as_tensor(stats["q01"], dtype=torch.float32, device=device)
    q99 = torch.as_tensor(stats["q99"], dtype=torch.float32, device=device)
    mask = stats.get("mask")
    mask = (torch.ones(q01.shape, dtype=torch.bool, device=device) if mask is None
            else torch.as_tensor(mask, dtype=torch.bool, device=device))
    if not (q01.shape == q99.shape == mask.shape == (dim,)):
        raise ValueError(f"norm stats q01 / q99 / mask must have {dim} entries, got "
                         f"{tuple(q01.shape)}, {tuple(q99.shape)}, {tuple(mask.shape)}")
    return q01, q99, mask


def unnormalize_actions(x: torch.Tensor, stats: Mapping[str, Any] | None) -> torch.Tensor:
    """Normalised actions ``[..., A]`` in [-1, 1] -> env actions with ``stats`` (q01, q99, mask).

    ``stats`` None returns ``x`` unchanged (the model was trained on env actions in [-1, 1]).
    """
    if stats is None:
        return x
    q01, q99, mask = _stats_tensors(stats, x.shape[-1], x.device)
    a = 0.5 * (x.float() + 1.0) * (q99 - q01) + q01
    return torch.where(mask, a, x.float())


def normalize_actions(a: torch.Tensor, stats: Mapping[str, Any] | None) -> torch.Tensor:
    """Env actions ``[..., A]`` -> normalised [-1, 1] (inverse of :func:`unnormalize_actions` on
    the masked dimensions, clipped)."""
    if stats is None:
        return a
    q01, q99, mask = _stats_tensors(stats, a.shape[-1], a.device)
    x = (2.0 * (a.float() - q01) / (q99 - q01).clamp_min(1e-8) - 1.0).clamp(-1.0, 1.0)
    return torch.where(mask, x, a.float())
