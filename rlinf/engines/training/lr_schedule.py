"""Learning-rate schedule of the training engines: linear warm-up, then constant / linear /
cosine decay (``actor.lr_sched``), as a pure function of the optimizer step.

The engine counts optimizer steps from 0 and uses ``lr_at(step, ...)`` for step ``step``, so with
a warm-up the first step runs at ``warmup_init``.

>>> s = LrSchedule(max_lr=1.0, min_lr=0.0, warmup_init=0.0, warmup_steps=2,
...                decay_style="cosine", decay_steps=6)
>>> [round(s.lr_at(i), 4) for i in range(8)]
[0.0, 0.5, 1.0, 0.8536, 0.5, 0.1464, 0.0, 0.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECAY_STYLES = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class LrSchedule:
    """Warm-up from ``warmup_init`` to ``max_lr`` over ``warmup_steps`` steps, then decay.

    - ``step < warmup_steps``: ``warmup_init + (max_lr - warmup_init) * step / warmup_steps``.
    - ``constant``: ``max_lr`` afterwards.
    - ``linear`` / ``cosine``: with ``r = (step - warmup_steps) / (decay_steps - warmup_steps)``
      clipped to ``[0, 1]``: ``min_lr + (max_lr - min_lr) * c`` where ``c = 1 - r`` (linear) or
      ``c = (1 + cos(pi * r)) / 2`` (cosine); ``min_lr`` from ``decay_steps`` on.
    """

    max_lr: float
    min_lr: float = 0.0
    warmup_init: float = 0.0
    warmup_steps: int = 0
    decay_style: str = "constant"
    decay_steps: int | None = None

    def __post_init__(self) -> None:
        if self.decay_style not in DECAY_STYLES:
            raise ValueError(f"lr_decay_style must be one of {DECAY_STYLES}, got {self.decay_style!r}")
        if self.warmup_steps < 0:
            raise ValueError(f"warm-up steps must be >= 0, got {self.warmup_steps}")
        if self.decay_style != "constant" and self.decay_steps is None:
            raise ValueError(f"lr_decay_style={self.decay_style!r} needs lr_decay_iters or total_steps")

    def lr_at(self, step: int) -> float:
        """Learning rate of optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return self.warmup_init + (self.max_lr - self.warmup_init) * step / self.warmup_steps
        if self.decay_style == "constant":
            return self.max_lr
        span = self.decay_steps - self.warmup_steps
        ratio = 1.0 if span <= 0 else min(max((step - self.warmup_steps) / span, 0.0), 1.0)
        if self.decay_style == "linear":
            coeff = 1.0 - ratio
        else:
            coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
        return self.min_lr + (self.max_lr - self.min_lr) * coeff


def schedule_from_config(optim, lr_sched, total_steps: int | None) -> LrSchedule:
    """Build the schedule from ``actor.optim`` and ``actor.lr_sched``.

    ``max_lr`` is ``lr_sched.max_lr`` or else ``optim.lr``; ``min_lr`` is ``lr_sched.min_lr`` or
    else ``optim.min_lr``. Warm-up steps: ``lr_warmup_iters`` if > 0, else
    ``int(lr_warmup_fraction * total_steps)``. Decay steps: ``lr_decay_iters`` or else
    ``total_steps``.

    >>> from types import SimpleNamespace as NS
    >>> s = schedule_from_config(NS(lr=1e-3, min_lr=0.0),
    ...     NS(max_lr=None, min_lr=1e-4, lr_warmup_init=0.0, lr_warmup_iters=0,
    ...        lr_warmup_fraction=0.1, lr_decay_style="linear", lr_decay_iters=None), total_steps=50)
    >>> s.warmup_steps, s.decay_steps, s.min_lr
    (5, 50, 0.0001)
    """
    max_lr = lr_sched.max_lr if lr_sched.max_lr is not None else optim.lr
    min_lr = lr_sched.min_lr if lr_sched.min_lr is not None else optim.min_lr
    if lr_sched.lr_warmup_iters > 0:
        warmup = int(lr_sched.lr_warmup_iters)
    elif lr_sched.lr_warmup_fraction > 0:
        if total_steps is None:
            raise ValueError("actor.lr_sched.lr_warmup_fraction > 0 needs total_steps")
        warmup = int(lr_sched.lr_warmup_fraction * total_steps)
    else:
        warmup = 0
    decay = lr_sched.lr_decay_iters if lr_sched.lr_decay_iters is not None else total_steps
    return LrSchedule(max_lr=float(max_lr), min_lr=float(min_lr), warmup_init=float(lr_sched.lr_warmup_init),
                      warmup_steps=warmup, decay_style=lr_sched.lr_decay_style, decay_steps=decay)
