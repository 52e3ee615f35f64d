"""Named channels with keyed sub-queues, shared by workers of any group on any node.

The reference config names a channel and one queue per component::

    env:     {channel: {name: env_buffer_list, queue_name: obs_buffer,    queue_size: 0}}
    rollout: {channel: {name: env_buffer_list, queue_name: action_buffer, queue_size: 0}}

which maps to ``Channel.create("env_buffer_list")`` plus ``declare_queue("obs_buffer", 0)``.

:meth:`Channel.create` and :meth:`Channel.connect` ask the backend of the run's cluster
(:func:`~rlinf.scheduler.backend.current_backend`) for the channel: a Ray channel actor
(:class:`~rlinf.scheduler.channel.ray_channel.RayChannel`, with its same-node socket) or queues in
this process (:class:`~rlinf.scheduler.local.channel.LocalChannel`). A process that made no
cluster (a Ray worker) gets a Ray one. Every channel is a :class:`Channel` (the API of
:class:`~rlinf.scheduler.channel.base.ChannelBase`).

Example (needs a running Ray or a local cluster; see docs/scheduler.md):
    >>> from rlinf.scheduler import Channel
    >>> ch = Channel.create("demo")                       # doctest: +SKIP
    >>> ch.put({"obs": torch.zeros(4, 84, 84)}, key="obs_buffer")   # doctest: +SKIP
    >>> ch.get(key="obs_buffer")["obs"].shape             # doctest: +SKIP
    torch.Size([4, 84, 84])
    >>> from rlinf.scheduler.channel.ray_channel import RayChannel
    >>> isinstance(RayChannel("demo", actor=None), Channel)
    True
"""

from __future__ import annotations

from rlinf.scheduler.backend import current_backend
from rlinf.scheduler.channel.base import ChannelBase, ChannelClosedError, ChannelTimeout
from rlinf.scheduler.channel.ray_channel import RayChannel

__all__ = ["Channel", "ChannelClosedError", "ChannelTimeout"]


class Channel(ChannelBase):
    """A named channel of the run's backend: make one with :meth:`create`, open one with
    :meth:`connect`, pass it to workers as an argument. Its methods are
    :class:`~rlinf.scheduler.channel.base.ChannelBase`'s; ``isinstance(x, Channel)`` holds for
    every backend's channels."""

    @classmethod
    def create(cls, name: str, maxsize: int = 0, node_id: str | None = None) -> ChannelBase:
        """Create channel ``name`` (or open it if it exists with the same ``maxsize``).

        Args:
            name: channel name, unique in the run.
            maxsize: default capacity of each sub-queue; 0 = unbounded.
            node_id: Ray node to host the channel (default: this node; ignored in local mode).

        Raises:
            ValueError: the channel exists with another ``maxsize``.
        """
        backend = current_backend()
        if backend is None:  # no cluster made in this process (a Ray worker): Ray
            return RayChannel.create(name, maxsize, node_id)
        return backend.create_channel(name, maxsize, node_id)

    @classmethod
    def connect(cls, name: str, timeout: float = 30.0) -> ChannelBase:
        """Open an existing channel, waiting up to ``timeout`` seconds for it to be created.

        Raises:
            ChannelClosedError: no channel of that name within ``timeout``.
        """
        backend = current_backend()
        if backend is None:
            return RayChannel.connect(name, timeout)
        return backend.connect_channel(name, timeout)

    @classmethod
    def __subclasshook__(cls, other: type):
        if cls is Channel:
            return True if issubclass(other, ChannelBase) else NotImplemented
        return NotImplemented
