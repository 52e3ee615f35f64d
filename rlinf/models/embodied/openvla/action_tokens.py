"""OpenVLA's action tokens and (un)normalisation, with the original formulas.

With ``V`` the tokenizer's base vocabulary (``text_config.vocab_size - pad_to_multiple_of``,
32000 for Llama-2) and ``n = n_action_bins`` (256):

* bins: ``linspace(-1, 1, n)`` edges, ``n - 1`` centres ``(e[i] + e[i + 1]) / 2``;
* encode a normalised action ``a`` in [-1, 1]: ``d = digitize(clip(a, -1, 1), edges)`` (1..n),
  token id ``V - d``; ids DESCEND over ``V - n .. V - 1`` as the value rises;
* decode a token id: ``centres[clip(V - id - 1, 0, n - 2)]`` (ids ``V - n`` and ``V - n + 1``
  decode to the same, highest centre);
* un-normalise (``BOUNDS_Q99``) where ``mask`` is true: ``0.5 (x + 1) (q99 - q01 + 1e-8) + q01``;
  elsewhere (e.g. the gripper) ``x`` passes through. OFT's ALOHA setting (``BOUNDS``) uses ``min``
  / ``max`` instead of ``q01`` / ``q99``;
* normalise proprio (OFT): ``clip(2 (p - q01) / (q99 - q01 + 1e-8) - 1, -1, 1)`` where masked.

RL samples over the ``n`` action ids only (``[V - n, V)``); the bin of a token for the policy's
categorical distribution is ``id - (V - n)``.

Example:
    >>> import torch
    >>> tok = ActionTokens(n_bins=256, base_vocab=32000)
    >>> ids = tok.encode(torch.tensor([-1.0, 0.0, 1.0]))
    >>> ids.tolist()
    [31999, 31872, 31744]
    >>> [round(v, 4) for v in tok.decode(ids).tolist()]
    [-0.9961, 0.0, 0.9961]
    >>> stats = {"q01": [0.0, -1.0], "q99": [2.0, 1.0], "mask": [True, False]}
    >>> [round(v, 6) for v in unnormalize_actions(torch.tensor([[0.5, 0.5]]), stats)[0].tolist()]
    [1.5, 0.5]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

#: ``q01`` / ``q99`` (OpenVLA / OFT default) or ``min`` / ``max`` (OFT's ALOHA setting).
NORMALIZATION_TYPES = {"bounds_q99": ("q01", "q99"), "bounds": ("min", "max")}


class ActionTokens:
    """Token ids <-> normalised action values for one checkpoint's vocabulary.

    Args:
        n_bins: ``n_action_bins`` of the config.
        base_vocab: ``V``, the tokenizer's vocabulary without the added pad token.
    """

    def __init__(self, n_bins: int = 256, base_vocab: int = 32000):
        if n_bins < 2 or base_vocab < n_bins:
            raise ValueError(f"need 2 <= n_action_bins <= base vocabulary, got {n_bins} and {base_vocab}")
        self.n_bins = int(n_bins)
        self.base_vocab = int(base_vocab)
        self.first_id = self.base_vocab - self.n_bins
        edges = torch.linspace(-1.0, 1.0, self.n_bins, dtype=torch.float64)
        self.edges = edges
        self.centers = ((edges[:-1] + edges[1:]) / 2.0)

    def encode(self, actions: torch.Tensor) -> torch.Tensor:
        """Normalised actions (any shape) -> token ids (int64), ``V - digitize(a, edges)``."""
        a = actions.double().clamp(-1.0, 1.0)
        d = torch.bucketize(a, self.edges.to(a.device), right=True)  # numpy.digitize(a, edges)
        return self.base_vocab - d

    def decode(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Token ids (any ids; non-action ids are clipped as the original does) -> values (fp32)."""
        idx = (self.base_vocab - token_ids.long() - 1).clamp(0, self.n_bins - 2)
        return self.centers.to(idx.device)[idx].float()

    def ids_to_bins(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Action token ids -> categorical index ``id - (V - n)`` in ``[0, n)``.

        Raises:
            ValueError: an id outside the action ids.
        """
        bins = token_ids.round().long() - self.first_id
        if bins.numel() and (bool((bins < 0).any()) or bool((bins >= self.n_bins).any())):
            raise ValueError(f"action token ids must lie in [{self.first_id}, {self.base_vocab})")
        return bins


def _bounds(stats: Mapping[str, Any], dim: int, device, norm_type: str) -> tuple[torch.Tensor, ...]:
    lo_key, hi_key = NORMALIZATION_TYPES[norm_type]
    low = torch.as_tensor(stats[lo_key], dtype=torch.float64, device=device).flatten()
    high = torch.as_tensor(stats[hi_key], dtype=torch.float64, device=device).flatten()
    mask = stats.get("mask")
    mask = (torch.ones(low.shape, dtype=torch.bool, device=device) if mask is None
            else torch.as_tensor(mask, dtype=torch.bool, device=device).flatten())
    if not (low.shape == high.shape == mask.shape) or dim % low.shape[0]:
        raise ValueError(f"statistics {lo_key} / {hi_key} / mask have {low.shape[0]} / {high.shape[0]} / "
                         f"{mask.shape[0]} entries; actions have {dim} dimensions")
    rep = dim // low.shape[0]  # several actions flattened into one row: tile per action
    return low.repeat(rep), high.repeat(rep), mask.repeat(rep)


def unnormalize_actions(x: torch.Tensor, stats: Mapping[str, Any] | None,
                        norm_type: str = "bounds_q99") -> torch.Tensor:
    """Normalised actions ``[..., A]`` -> env actions (fp32); ``stats`` None = unchanged."""
    if stats is None:
        return x.float()
    low, high, mask = _bounds(stats, x.shape[-1], x.device, norm_type)
    a = 0.5 * (x.double() + 1.0) * (high - low + 1e-8) + low
    return torch.where(mask, a, x.double()).float()


def normalize_proprio(p: torch.Tensor, stats: Mapping[str, Any] | None,
                      norm_type: str = "bounds_q99") -> torch.Tensor:
    """Proprio ``[..., P]`` -> [-1, 1] where masked (OFT's ``normalize_proprio``); None = unchanged."""
    if stats is None:
        return p.float()
    low, high, mask = _bounds(stats, p.shape[-1], p.device, norm_type)
    x = 2.0 * (p.double() - low) / (high - low + 1e-8) - 1.0
    return torch.where(mask, x, p.double()).clamp(-1.0, 1.0).float()


def select_stats(norm_stats: Mapping[str, Any] | None, unnorm_key: str | None) -> tuple[str, Mapping[str, Any]]:
    """``(key, entry)`` of ``norm_stats`` for ``unnorm_key`` as OpenVLA chooses it.

    None with exactly one entry picks that entry; RLinf's ``{key}_no_noops`` fallback applies.

    Raises:
        KeyError: no statistics, several entries and no key, or an unknown key (the message lists
            the available keys).
    """
    stats = dict(norm_stats or {})
    if not stats:
        raise KeyError("the checkpoint has no action statistics (dataset_statistics.json / norm_stats)")
    if unnorm_key is None:
        if len(stats) != 1:
            raise KeyError(f"the checkpoint has statistics for several datasets {sorted(stats)}; "
                           "choose one with unnorm_key")
        unnorm_key = next(iter(stats))
    if unnorm_key not in stats and f"{unnorm_key}_no_noops" in stats:
        unnorm_key = f"{unnorm_key}_no_noops"
    if unnorm_key not in stats:
        raise KeyError(f"unnorm_key {unnorm_key!r} not in the checkpoint's statistics {sorted(stats)}")
    return unnorm_key, stats[unnorm_key]
