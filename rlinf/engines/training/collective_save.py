"""Failures during a collective checkpoint save reach every rank, so no rank waits at a barrier
for a peer that already failed (a full disk on rank 0 while the others wait would hang the run).

* :func:`on_rank0`: rank 0 writes a file (a record, a JSON, an adapter); every rank learns whether
  it worked and raises if not (rank 0 its own exception, the others an :class:`OSError` with the
  same errno and message).
* :func:`plain_dcp_error`: ``torch.distributed.checkpoint`` raises ``CheckpointException``, a
  ``BaseException`` holding every rank's failure; this turns it into an ordinary exception that
  keeps the first failure's errno (so a full disk is still recognised as one).

Example (a one-process group)::

    on_rank0(lambda: open("/tmp/record.json", "w").write("{}"))      # doctest: +SKIP
"""

from __future__ import annotations

import errno as errno_codes
from collections.abc import Callable

import torch.distributed as dist


def on_rank0(write: Callable[[], object]) -> None:
    """Collective: rank 0 runs ``write()``; then every rank raises if it failed."""
    failure: BaseException | None = None
    message = None
    if dist.get_rank() == 0:
        try:
            write()
        except Exception as exc:  # noqa: BLE001 - handed to every rank, then raised
            failure = exc
            message = (getattr(exc, "errno", None), f"{type(exc).__name__}: {exc}")
    box = [message]
    if dist.get_world_size() > 1:
        dist.broadcast_object_list(box, src=0)
    if failure is not None:
        raise failure
    if box[0] is not None:
        code, text = box[0]
        raise OSError(code or errno_codes.EIO, f"rank 0 failed to write its part of the checkpoint: {text}")


def plain_dcp_error(exc: BaseException) -> Exception:
    """An ordinary exception for DCP's ``CheckpointException`` ``exc``: an :class:`OSError` with the
    errno of the first failure that has one, else a :class:`RuntimeError`; the message lists them."""
    failures = getattr(exc, "failures", None) or {}
    code, parts = None, []
    for rank, pair in sorted(failures.items()):
        inner = pair[0] if isinstance(pair, tuple) else pair
        parts.append(f"rank {rank}: {type(inner).__name__}: {inner}")
        if code is None and isinstance(inner, OSError) and inner.errno is not None:
            code = inner.errno
    text = "distributed checkpoint save failed (" + ("; ".join(parts) or str(exc)) + ")"
    return OSError(code, text) if code is not None else RuntimeError(text)
