"""Full weights of an FSDP2 model, one tensor at a time: the source of an actor -> rollout sync.

``get_model_state_dict(full_state_dict=True)`` gathers every parameter into one new CPU state
dict: a full extra copy of the model in the actor per sync. :class:`GatheredWeights` instead
announces names, shapes and dtypes up front (a ``LazyTensors`` for
:func:`rlinf.scheduler.transfer.send_tensors`) and gathers a parameter only when the link packs
it, so the actor holds at most one gathered tensor beyond its shards. On a one-rank mesh the
"gather" is the local tensor itself: no copy at all.

Tied parameters (an embedding shared with the LM head) are announced once, under the first name;
receivers fill the other names of the tie themselves.

Gathering is a collective on a mesh of more than one rank: every rank must ask for the same
tensors in the same order. The source's order is :func:`rlinf.scheduler.transfer.send_order` of
the specs; the other ranks call :meth:`GatheredWeights.gather_along` to follow it.

Example (a plain module: no DTensors, every tensor is its own full value):
    >>> import torch
    >>> lin = torch.nn.Linear(3, 2)
    >>> weights = GatheredWeights(lin)
    >>> [(name, shape) for name, shape, _ in weights.tensor_specs()]
    [('weight', (2, 3)), ('bias', (2,))]
    >>> torch.equal(weights["bias"], lin.bias)
    True
"""

from __future__ import annotations

from typing import Any

import torch

from rlinf.scheduler.transfer import send_order


class GatheredWeights:
    """Names, shapes and dtypes of a (possibly FSDP2-sharded) module's state, gathered on demand."""

    def __init__(self, model: torch.nn.Module):
        self._tensors: dict[str, Any] = {}
        seen: set[int] = set()
        for name, tensor in model.state_dict(keep_vars=True).items():
            if id(tensor) in seen:  # a tied alias: announced once
                continue
            seen.add(id(tensor))
            self._tensors[name] = tensor

    @property
    def stable_memory(self) -> bool:
        """Every tensor is this process's own memory, unchanged until the next step (no gather
        makes a temporary): a one-host link may let receivers read it in place."""
        return all(not hasattr(t, "full_tensor") or t.device_mesh.size() == 1 for t in self._tensors.values())

    def tensor_specs(self) -> list[tuple[str, tuple, torch.dtype]]:
        """``(name, global shape, dtype)`` per tensor, without gathering anything."""
        return [(name, tuple(t.shape), t.dtype) for name, t in self._tensors.items()]

    def __getitem__(self, name: str) -> torch.Tensor:
        """The full tensor ``name`` (a collective when it is sharded over more than one rank)."""
        tensor = self._tensors[name]
        if hasattr(tensor, "full_tensor"):
            if tensor.device_mesh.size() == 1:
                return tensor.to_local().detach()
            return tensor.full_tensor().detach()
        return tensor.detach()

    def gather_along(self) -> None:
        """On a rank that does not send: take part in every gather, in the source's order."""
        specs = self.tensor_specs()
        for index in send_order(specs):
            self[specs[index][0]]
