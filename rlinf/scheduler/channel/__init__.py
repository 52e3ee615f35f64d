"""Channels: named, keyed FIFO queues between workers (see :class:`Channel`)."""

from rlinf.scheduler.channel.base import ChannelBase, ChannelClosedError, ChannelTimeout
from rlinf.scheduler.channel.channel import Channel
from rlinf.scheduler.channel.keyed_queue import KeyedQueues, QueueTimeout
from rlinf.scheduler.channel.payload import PayloadLostError

__all__ = [
    "Channel",
    "ChannelBase",
    "ChannelClosedError",
    "ChannelTimeout",
    "KeyedQueues",
    "PayloadLostError",
    "QueueTimeout",
]
