"""A tensor link's headers carry the run's proof: a receiver refuses one without it, unread."""

from __future__ import annotations

import datetime
import threading

import pytest
import torch
import torch.distributed as dist

from rlinf.scheduler.errors import SchedulerError
from rlinf.scheduler.secret import RunSecret
from rlinf.scheduler.transfer import _broadcast_object, _LinkState


def _pair(sender_secret, receiver_secret):
    """Two link ends (gloo over an in-memory store) run on two threads; returns what each got."""
    store = dist.HashStore()
    out: dict = {}

    def end(rank, secret):
        group = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=20))
        link = _LinkState("w", rank, group, torch.device("cpu"), 1 << 20, "gloo", secret=secret)
        try:
            out[rank] = _broadcast_object(link, {"specs": [1, 2]} if rank == 0 else None)
        except SchedulerError as exc:
            out[rank] = exc

    threads = [threading.Thread(target=end, args=(0, sender_secret)),
               threading.Thread(target=end, args=(1, receiver_secret))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_a_header_from_the_same_run_arrives():
    secret = RunSecret.new()
    assert _pair(secret, RunSecret(secret._key))[1] == {"specs": [1, 2]}


def test_a_header_made_without_the_runs_secret_is_refused_unread():
    got = _pair(RunSecret.new(), RunSecret.new())[1]
    assert isinstance(got, SchedulerError) and "without the run's proof" in str(got)


def test_a_link_end_without_a_secret_says_why():
    link = _LinkState("w", 0, None, torch.device("cpu"), 1, "gloo")
    with pytest.raises(SchedulerError, match="no run secret"):
        _broadcast_object(link, 1)
