"""A real :class:`~rlinf.scheduler.transfer_stream.TensorStream` fed in-process (no Ray, no link).

The fake process group's ``broadcast`` fills the stream's reused receive buffers (two, taking
turns) with the next bucket, packed by the real send-side functions; a buffer is overwritten two
buckets later, so a consumer that kept a view instead of copying would load garbage."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rlinf.scheduler.transfer_stream import Header, SourceReader, TensorStream, pack_bucket, plan_send


class _Done:
    def wait(self):
        return True


class _FeedingGroup:
    def __init__(self, tensors: dict, specs: list, bucket_bytes: int):
        self.reader = SourceReader(tensors, specs)
        self.buckets = iter(plan_send(specs, bucket_bytes))
        self.broadcasts = 0

    def broadcast(self, flat, root):
        flat.copy_(pack_bucket(self.reader, next(self.buckets), torch.empty_like(flat)))
        self.broadcasts += 1
        return _Done()


def stream_of(tensors: dict, bucket_bytes: int) -> TensorStream:
    """A stream that delivers ``tensors`` in buckets of ``bucket_bytes`` (big tensors in pieces)."""
    specs = [(n, tuple(t.shape), t.dtype) for n, t in tensors.items()]
    group = _FeedingGroup(tensors, specs, bucket_bytes)
    link = SimpleNamespace(name="test", bucket_bytes=bucket_bytes, device=torch.device("cpu"), process_group=group,
                           buffers=None)
    return TensorStream(link, Header(specs, bucket_bytes), None)


def slow_stream_of(tensors: dict, bucket_bytes: int, delay_s: float, started) -> TensorStream:
    """:func:`stream_of` whose buckets each take ``delay_s`` to arrive; ``started`` (a
    ``threading.Event``) is set once the first bucket has been consumed (the third broadcast
    reuses its buffer), i.e. while the rest of the weights are still on their way."""
    import time

    stream = stream_of(tensors, bucket_bytes)
    group = stream.link.process_group
    plain = group.broadcast

    def broadcast(flat, root):
        time.sleep(delay_s)
        if group.broadcasts >= 2:
            started.set()
        return plain(flat, root)

    group.broadcast = broadcast
    return stream
