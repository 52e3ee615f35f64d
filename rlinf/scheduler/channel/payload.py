"""Pack channel items so that large tensors travel through Ray's shared-memory object store.

A tensor of at least ``INLINE_LIMIT`` bytes, anywhere in a nested dict / list / tuple, is replaced
by a slot; the bytes of all such tensors of one item go into the object store with one
``ray.put``, as uint8 numpy views (Ray ships numpy buffers out of band, so this is one copy into
shared memory on the producer and none on the consumer, in workers and in the driver alike,
whatever ``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS`` says). Received large tensors are views of shared
memory that torch does not mark read-only: writing to them in place is undefined, so ``.clone()``
first. Small tensors that are views of a much larger storage are copied before pickling (pickle
would ship the whole storage); a tensor that appears twice in one item travels once. Containers
(dict and its subclasses, lists, tuples, namedtuples) come back as the same types.

Who may hand bytes to :func:`unpack_many`: items reach it through Ray (whose connections are
Ray's to authenticate) or through the channel's same-node Unix socket, whose server and client
accept only peers of this user (``SO_PEERCRED``) that prove the channel's key (an HMAC
challenge-response, :mod:`.fast_path`); nothing here reads a socket.

Measured choice (bench/bench_channel.py): for 64 MiB and more the object store beat a fresh POSIX
shared-memory segment per item (which pays page faults on every write) by 2.7-6x.

Example:
    >>> import torch
    >>> item = {"obs": torch.zeros(2, 3), "step": 4}
    >>> packed = pack(item)          # small tensors stay inline: no Ray needed
    >>> packed.tensors_ref is None
    True
    >>> back = unpack_many([packed])[0]
    >>> back["step"], torch.equal(back["obs"], item["obs"])
    (4, True)
"""

from __future__ import annotations

import copy
import pickle
import warnings
from dataclasses import dataclass
from typing import Any

INLINE_LIMIT = 64 * 1024


@dataclass(frozen=True)
class _TensorSlot:
    index: int
    dtype: Any
    shape: tuple


@dataclass
class Packed:
    """An item as it sits in the channel: the skeleton plus one object-store ref (or none)."""

    skeleton: Any
    tensors_ref: Any = None
    producer: str = ""


def _map(x, leaf):
    """Rebuild nested containers (dict and subclasses, list, tuple, namedtuple) with ``leaf``
    applied to every other value; container types and key order are kept."""
    if isinstance(x, dict):
        out = copy.copy(x)  # keeps OrderedDict / defaultdict (and its default_factory)
        for k, v in x.items():
            out[k] = _map(v, leaf)
        return out
    if isinstance(x, list):
        return [_map(v, leaf) for v in x]
    if isinstance(x, tuple):
        items = [_map(v, leaf) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
    return leaf(x)


def pack(item: Any, producer: str = "") -> Packed:
    """Replace large tensors of ``item`` by slots and put their bytes in the object store."""
    # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
    import torch

    buffers: list = []
    seen: dict[int, _TensorSlot] = {}  # the same tensor twice travels once

    def leaf(x):
        if not isinstance(x, torch.Tensor):
            return x
        nbytes = x.numel() * x.element_size()
        if nbytes < INLINE_LIMIT:
            # pickling a view ships its whole storage: copy small views of big storages
            small_view = x.untyped_storage().nbytes() > 2 * nbytes + 64
            return x.detach().clone() if small_view else x
        if id(x) not in seen:
            flat = x.detach().to("cpu").contiguous().reshape(-1)
            buffers.append(flat.view(torch.uint8).numpy())
            seen[id(x)] = _TensorSlot(len(buffers) - 1, x.dtype, tuple(x.shape))
        return seen[id(x)]

    skeleton = _map(item, leaf)
    if not buffers:
        return Packed(skeleton, None, producer)
    # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
    import ray

    return Packed(skeleton, ray.put(buffers), producer)


def to_queue_item(packed: Packed) -> Any:
    """What the channel actor stores for ``packed``: an inline item (no object-store ref) as
    cloudpickled bytes, which the actor keeps and forwards without unpickling (it never needs the
    item's classes, and a socket reply can carry the bytes as they are); an item with an
    object-store ref stays a :class:`Packed`, for Ray RPC to carry (Ray tracks the ref's owner).

    Example:
        >>> item = to_queue_item(pack({"step": 1}))
        >>> isinstance(item, bytes), from_queue_item(item).skeleton
        (True, {'step': 1})
    """
    if packed.tensors_ref is not None:
        return packed
    # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
    from ray import cloudpickle  # pickles classes defined in __main__ by value, as Ray RPC does

    return cloudpickle.dumps(packed, protocol=5)


def from_queue_item(item: Any) -> Packed:
    """Inverse of :func:`to_queue_item`."""
    if isinstance(item, bytes):
        return pickle.loads(item)
    return item


def unpack_many(packed: list[Packed]) -> list[Any]:
    """Rebuild items; their object-store payloads are fetched with one ``ray.get``.

    Raises:
        PayloadLostError: some payloads died with their producer; ``err.lost`` lists the indices
            (into ``packed``) of the lost items.
    """
    with_ref = [i for i, p in enumerate(packed) if p.tensors_ref is not None]
    fetched = dict(zip(with_ref, _fetch([packed[i] for i in with_ref], with_ref))) if with_ref else {}
    out = []
    for i, p in enumerate(packed):
        if i not in fetched:
            out.append(p.skeleton)
            continue
        buffers = fetched[i]
        tensors: dict[int, Any] = {}  # one tensor object per slot, as on the producer side
        out.append(_map(p.skeleton, lambda x, b=buffers, t=tensors: _tensor(x, b, t)))
    return out


def _tensor(x, buffers, tensors):
    if not isinstance(x, _TensorSlot):
        return x
    if x.index not in tensors:
        # lazy: torch (~2 s) only where tensors move; no scheduler module loads torch at import (CLIs, driver)
        import torch

        with warnings.catch_warnings():
            # a view of shared memory (see above); torch would warn about it on every transfer
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            tensors[x.index] = torch.from_numpy(buffers[x.index]).view(x.dtype).reshape(x.shape)
    return tensors[x.index]


def _fetch(packed: list[Packed], indices: list[int]) -> list:
    # lazy: Ray (~1.5 s) only on the Ray backend; the local backend and the CLIs import this module without it
    import ray

    lost_errors = (ray.exceptions.OwnerDiedError, ray.exceptions.ObjectLostError)
    try:
        return ray.get([p.tensors_ref for p in packed])
    except lost_errors:
        pass
    lost, producers = [], set()
    for i, p in zip(indices, packed):  # find exactly which items are gone
        try:
            ray.get(p.tensors_ref)
        except lost_errors:
            lost.append(i)
            producers.add(p.producer or "?")
    raise PayloadLostError(
        f"tensors owned by producer {', '.join(sorted(producers))} were lost: the producer died "
        "before they were read", lost)


class PayloadLostError(RuntimeError):
    """Items' large tensors were lost with the producer process that held them.

    Attributes:
        lost: indices (within the batch) of the items that were lost.
    """

    def __init__(self, message: str, lost: list[int] | None = None):
        super().__init__(message)
        self.lost = list(lost or [])

    def __reduce__(self):
        return (PayloadLostError, (str(self), self.lost))
