"""Pack channel items so that large tensors travel through Ray's shared-memory object store.

A tensor of at least ``INLINE_LIMIT`` bytes, anywhere in a nested dict / list / tuple, is replaced
by a placeholder; all such tensors of one item go into the object store with one ``ray.put``.
The consumer's ``ray.get`` maps them from shared memory without a copy (workers run with
``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1``), so received tensors are read-only views: call
``.clone()`` before writing in place. Everything else is pickled inline with the item.

Measured choice (bench/bench_channel.py): the object store beat a fresh POSIX shared-memory
segment per item, which pays page faults on every write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INLINE_LIMIT = 64 * 1024


@dataclass(frozen=True)
class _TensorSlot:
    index: int


@dataclass
class Packed:
    """An item as it sits in the channel: the skeleton plus one object-store ref (or none)."""

    skeleton: Any
    tensors_ref: Any = None
    producer: str = ""


def pack(item: Any, producer: str = "") -> Packed:
    """Replace large tensors of ``item`` by slots and put them in the object store."""
    import torch

    big: list = []

    def walk(x):
        if isinstance(x, torch.Tensor) and x.numel() * x.element_size() >= INLINE_LIMIT:
            big.append(x.detach().cpu() if x.device.type != "cpu" else x.detach())
            return _TensorSlot(len(big) - 1)
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return tuple(walk(v) for v in x)
        return x

    skeleton = walk(item)
    if not big:
        return Packed(skeleton, None, producer)
    import ray

    return Packed(skeleton, ray.put(big), producer)


def unpack(packed: Packed) -> Any:
    """Rebuild the item; large tensors come back as zero-copy, read-only views."""
    if packed.tensors_ref is None:
        return packed.skeleton
    import ray

    try:
        tensors = ray.get(packed.tensors_ref)
    except (ray.exceptions.OwnerDiedError, ray.exceptions.ObjectLostError) as exc:
        raise PayloadLostError(
            f"the tensors of this item were owned by producer {packed.producer or '?'}, which "
            f"died before they were read ({type(exc).__name__})"
        ) from None

    def walk(x):
        if isinstance(x, _TensorSlot):
            return tensors[x.index]
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return tuple(walk(v) for v in x)
        return x

    return walk(packed.skeleton)


class PayloadLostError(RuntimeError):
    """An item's large tensors were lost with the producer process that held them."""
