"""The vision tower of a Qwen-VL model, and freezing it for training.

transformers 5.19 keeps the tower at ``model.model.visual`` (patch embedding, vision blocks, the
patch merger and, for Qwen3-VL, the deepstack mergers); the language model is
``model.model.language_model`` and ``model.lm_head``. Freezing sets ``requires_grad=False`` on
every tower parameter, so the optimizer built afterwards from the trainable parameters never
touches them and no gradient is computed for them; the tower's forward still runs (the image
features feed the language model).

Example (any module with a ``.model.visual`` submodule; a loaded Qwen-VL model the same way)::

    >>> outer = torch.nn.Module(); outer.model = torch.nn.Module()
    >>> outer.model.visual, outer.model.language_model = torch.nn.Linear(3, 2), torch.nn.Linear(2, 2)
    >>> set_vision_trainable(outer, False)
    8
    >>> [n for n, p in outer.named_parameters() if p.requires_grad]
    ['model.language_model.weight', 'model.language_model.bias']
"""

from __future__ import annotations

import torch


def vision_tower(model: torch.nn.Module) -> torch.nn.Module:
    """The vision tower module of a Qwen2.5-VL / Qwen3-VL model (``...ForConditionalGeneration``
    or its inner ``...Model``).

    Raises:
        ValueError: The model has no ``visual`` module (one line naming its class).
    """
    for owner in (getattr(model, "model", None), model):
        tower = getattr(owner, "visual", None) if owner is not None else None
        if isinstance(tower, torch.nn.Module):
            return tower
    raise ValueError(f"{type(model).__name__} has no vision tower (no .model.visual or .visual module)")


def set_vision_trainable(model: torch.nn.Module, trainable: bool) -> int:
    """Set ``requires_grad`` of every vision-tower parameter to ``trainable``; the language
    model's parameters are left as they are. Call it before building the optimizer.

    Returns:
        The number of tower parameter elements (trainable or not, all of them are set).
    """
    count = 0
    for param in vision_tower(model).parameters():
        param.requires_grad_(trainable)
        count += param.numel()
    return count
