"""Masked reductions and argument checks shared by the algorithm functions.

Masks follow the package convention: ``response_mask`` is ``[batch, seq]``, float or bool,
1 for a response token that counts and 0 otherwise. Every reduction over an empty mask
returns 0 instead of NaN.
"""

from __future__ import annotations

import torch


def check_mask(response_mask: torch.Tensor, name: str = "response_mask") -> None:
    """Raise ``ValueError`` unless ``response_mask`` is a 2-D ``[batch, seq]`` tensor."""
    if not isinstance(response_mask, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(response_mask).__name__}")
    if response_mask.dim() != 2:
        raise ValueError(f"{name} must be 2-D [batch, seq], got shape {tuple(response_mask.shape)}")


def check_same_shape(reference: torch.Tensor, reference_name: str, **tensors: torch.Tensor) -> None:
    """Raise ``ValueError`` naming the first tensor whose shape differs from ``reference``."""
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.shape != reference.shape:
            raise ValueError(
                f"{name} must have the shape of {reference_name} {tuple(reference.shape)}, "
                f"got {tuple(tensor.shape)}"
            )


def check_sequence_tensor(rewards: torch.Tensor, batch: int | None = None, name: str = "rewards") -> None:
    """Raise ``ValueError`` unless ``rewards`` is 1-D ``[batch]`` (of length ``batch`` if given)."""
    if not isinstance(rewards, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(rewards).__name__}")
    if rewards.dim() != 1:
        raise ValueError(f"{name} must be 1-D [batch], got shape {tuple(rewards.shape)}")
    if batch is not None and rewards.shape[0] != batch:
        raise ValueError(f"{name} must have length {batch} (the batch size), got {rewards.shape[0]}")


def check_group_size(group_size: int, batch: int) -> int:
    """Validate ``group_size`` (a positive int dividing ``batch``) and return the prompt count."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if batch % group_size != 0:
        raise ValueError(
            f"group_size must divide the batch size (n_prompts * group_size); "
            f"got batch {batch}, group_size {group_size}"
        )
    return batch // group_size


def check_nonnegative(name: str, value: float, allow_none: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` is a real number >= 0 (or None when allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")


def check_unit_interval(name: str, value: float) -> None:
    """Raise ``ValueError`` unless ``0 <= value <= 1``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


def float_mask(response_mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``response_mask`` as the floating dtype of ``like`` (float32 if ``like`` is not float)."""
    dtype = like.dtype if like.is_floating_point() else torch.float32
    return response_mask.to(dtype=dtype, device=like.device)


def _safe_divide(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator where denominator > 0, else 0 (no NaN in values or grads)."""
    positive = denominator > 0
    safe = torch.where(positive, denominator, torch.ones_like(denominator))
    return torch.where(positive, numerator / safe, torch.zeros_like(numerator))


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values * mask`` over ``dim`` (all elements if None).

    >>> masked_sum(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[1, 1, 0]]))
    tensor(3.)
    """
    weighted = values * float_mask(mask, values)
    return weighted.sum() if dim is None else weighted.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(values * mask) / sum(mask) over ``dim``; 0 where the mask is empty.

    >>> masked_mean(torch.tensor([[1.0, 2.0, 6.0]]), torch.tensor([[1, 1, 0]]))
    tensor(1.5000)
    """
    m = float_mask(mask, values)
    total = (values * m).sum() if dim is None else (values * m).sum(dim=dim)
    count = m.sum() if dim is None else m.sum(dim=dim)
    return _safe_divide(total, count)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Normalise the masked entries of ``values`` to zero mean and unit std.

    out = (x - mean) / (std + eps) on masked entries, 0 elsewhere, where mean and std are
    taken over all masked entries of the tensor and std is the unbiased (Bessel-corrected)
    one: std = sqrt(sum(m * (x - mean)^2) / (n - 1)), n = sum(m). With fewer than two masked
    entries std is taken as 0.

    >>> masked_whiten(torch.tensor([[1.0, 3.0, 100.0]]), torch.tensor([[1, 1, 0]]), eps=0.0)
    tensor([[-0.7071,  0.7071,  0.0000]])
    """
    m = float_mask(mask, values)
    mean = masked_mean(values, m)
    count = m.sum()
    centred = (values - mean) * m
    var = _safe_divide((centred**2).sum(), count - 1)
    return centred / (var.sqrt() + eps) * m
