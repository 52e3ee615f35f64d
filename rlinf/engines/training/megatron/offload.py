"""Offload / onload of the Megatron engine's state between phases (collocated mode).

Megatron keeps weights, gradients and main weights in flat buffers that parameters view into, so
moving a parameter (``p.data = p.data.cpu()``) would break those views. Instead a
:class:`StorageOffloader` copies each distinct storage to host memory and shrinks the device
storage to zero bytes; every tensor and view keeps its identity, shape and strides, and
:meth:`StorageOffloader.onload` grows the storage back and copies the bytes in. Optimizer state
tensors (Adam moments) are handled the same way.

Example (on the CPU the "device" is the CPU too; the mechanism is the same):

>>> import torch
>>> flat = torch.arange(6.0)
>>> view = flat[2:4]                      # a parameter viewing into a flat buffer
>>> off = StorageOffloader([flat, view])  # both share one storage, copied once
>>> off.offload(); flat.untyped_storage().nbytes()
0
>>> off.onload(); view.tolist()
[2.0, 3.0]
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class StorageOffloader:
    """Frees the device storage of ``tensors`` and restores it, keeping every view valid.

    Args:
        tensors: tensors whose storages move together (duplicates and views of one storage are
            fine: each storage is copied once).
        pin_memory: pin the host copies (faster copies back to a GPU).
        keep_values: False drops the bytes instead of copying them out, and :meth:`onload`
            zero-fills (for gradient buffers, which are zeroed before every step anyway).
    """

    def __init__(self, tensors: Iterable[torch.Tensor], pin_memory: bool = False, keep_values: bool = True):
        storages: dict[int, torch.UntypedStorage] = {}
        for t in tensors:
            if t is None:
                continue
            storage = t.untyped_storage()
            if storage.nbytes() > 0:
                storages.setdefault(storage.data_ptr(), storage)
        self._storages = list(storages.values())
        self._sizes = [s.nbytes() for s in self._storages]
        self._host: list[torch.UntypedStorage | None] = [None] * len(self._storages)
        self.pin_memory, self.keep_values = pin_memory, keep_values
        self.offloaded = False

    @property
    def nbytes(self) -> int:
        """Bytes this offloader moves."""
        return sum(self._sizes)

    def offload(self) -> None:
        """Copy each storage to host memory (unless ``keep_values`` is False) and free it."""
        if self.offloaded:
            return
        for i, storage in enumerate(self._storages):
            if self.keep_values:
                host = torch.empty(self._sizes[i], dtype=torch.uint8, pin_memory=self.pin_memory)
                host.untyped_storage().copy_(storage, non_blocking=self.pin_memory)
                self._host[i] = host.untyped_storage()
        if self.pin_memory and torch.cuda.is_available():
            torch.cuda.synchronize()
        for storage in self._storages:
            storage.resize_(0)
        self.offloaded = True

    def onload(self) -> None:
        """Grow each storage back to its size and restore its bytes (or zeros)."""
        if not self.offloaded:
            return
        for i, storage in enumerate(self._storages):
            storage.resize_(self._sizes[i])
            if self.keep_values:
                storage.copy_(self._host[i], non_blocking=self.pin_memory)
                self._host[i] = None
            else:
                torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage).zero_()
        self.offloaded = False
