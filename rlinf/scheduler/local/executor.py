"""One in-process worker: the instance, its thread(s) and what a Ray actor process would own.

A :class:`LocalActor` is what a Ray actor is for a :class:`~rlinf.scheduler.WorkerGroup` in
local mode. It runs ``__init__`` and every call on its own daemon thread(s) (``max_concurrency``
of them, one by default, so one group's calls run in the order they were issued while other
groups' calls overlap, as with Ray actors). What a separate process would give each worker and a
thread does not is made up here:

* arguments and results are copied (pickled and unpickled, as Ray does), so neither side sees
  the other mutate a batch afterwards;
* the process-wide random generators (torch's CPU generator, NumPy's and Python's global ones)
  are swapped in for each call and saved after it: a worker's draws continue its own stream, seeded
  by its own ``torch.manual_seed``, as in its own process (calls of different groups that draw
  from them at the same moment still share them); a swap waits for
  :data:`~rlinf.utils.global_random.GLOBAL_RANDOM_LOCK`, which in-process simulators hold while
  they seed and draw (a ManiSkill reset);
* torch's intra-op threads are set per thread (``OMP_NUM_THREADS``, else the node's cores shared
  out per accelerator, as a Ray worker gets);
* when the driver is being traced at launch (``python -m pdb``: ``sys.gettrace()`` is set), the
  same trace function is installed in the worker's threads, so breakpoints in worker methods fire.

Control calls (liveness pings) are answered at once, as in Ray's separate concurrency group.
Workers' ``__init__`` s run one at a time (model loading patches process-wide state).
"""

from __future__ import annotations

import os
import pickle
import queue
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from rlinf.utils.global_random import GLOBAL_RANDOM_LOCK

#: torch's default seed of a fresh process (``default_rng_seed_val``): each worker starts there
FRESH_TORCH_SEED = 67280421310721
_STOP = object()
#: ``__init__`` s run one at a time: model loading patches process-wide state (transformers'
#: meta-device / empty-weights contexts), which separate processes never share
_CONSTRUCTING = threading.Lock()


class InitFailed(Exception):
    """The worker's ``__init__`` raised (``text``: its traceback); every later call reports it."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def copy_value(value: Any) -> Any:
    """A copy as Ray's argument passing makes one (cloudpickle, then unpickle); an object that
    cannot be pickled is passed as it is."""
    try:
        import cloudpickle  # lazy: cloudpickle (~35 ms, comes with Ray) paid on the first in-process call only

        return pickle.loads(cloudpickle.dumps(value, protocol=5))
    except ImportError:  # pragma: no cover - cloudpickle comes with the base install
        try:
            return pickle.loads(pickle.dumps(value, protocol=5))
        except Exception:  # noqa: BLE001
            return value
    except Exception:  # noqa: BLE001 - unpicklable (a lock, an open connection): hand it over as is
        return value


class _RandomState:
    """The process-wide generators as one worker left them."""

    def __init__(self, fresh: bool):
        # lazy: numpy / torch only once a worker runs; making the local cluster loads neither
        import numpy as np
        import torch

        with GLOBAL_RANDOM_LOCK:
            if fresh:
                saved = torch.get_rng_state()
                torch.manual_seed(FRESH_TORCH_SEED)
                self.torch = torch.get_rng_state()
                torch.set_rng_state(saved)
            else:
                self.torch = torch.get_rng_state()
            self.numpy = np.random.get_state()
            self.python = random.getstate()

    def enter(self) -> None:
        # lazy: numpy / torch only once a worker runs; making the local cluster loads neither
        import numpy as np
        import torch

        with GLOBAL_RANDOM_LOCK:  # not between an in-process simulator's seed and its draws
            torch.set_rng_state(self.torch)
            np.random.set_state(self.numpy)
            random.setstate(self.python)

    def leave(self) -> None:
        # lazy: numpy / torch only once a worker runs; making the local cluster loads neither
        import numpy as np
        import torch

        with GLOBAL_RANDOM_LOCK:
            self.torch = torch.get_rng_state()
            self.numpy = np.random.get_state()
            self.python = random.getstate()


class LocalActor:
    """One worker instance of a local group (see the module docstring).

    Args:
        worker_cls: the :class:`~rlinf.scheduler.Worker` subclass.
        name: ``group[rank]`` (thread names, errors).
        env: the worker's own environment (``RANK``, ``RLINF_GROUP_NAME`` ...), read by the
            ``Worker`` properties before ``os.environ``.
        args, kwargs: for ``worker_cls(...)`` (copied).
        max_concurrency: threads running calls.
        threads: torch intra-op threads for this worker.
        secret: the run's :class:`~rlinf.scheduler.secret.RunSecret` (the instance's ``run_secret``).
    """

    def __init__(self, worker_cls: type, name: str, env: dict[str, str], args: tuple, kwargs: dict,
                 max_concurrency: int = 1, threads: int | None = None, secret=None):
        self.name = name
        self.instance = None
        self.init_error: str | None = None
        self._threads_per_call = threads
        self._trace = sys.gettrace()
        self._random = _RandomState(fresh=True)
        self._random_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._closed = False
        self._threads = [threading.Thread(target=self._serve, name=f"rlinf-local {name}#{i}", daemon=True)
                         for i in range(max(1, int(max_concurrency)))]
        for thread in self._threads:
            thread.start()
        self.started = self._submit(self._construct, worker_cls, env, copy_value(tuple(args)),
                                    copy_value(dict(kwargs)), secret)

    # ---- the driver's side ----------------------------------------------------------------
    def call(self, method: str, args: tuple, kwargs: dict, control: bool = False) -> Future:
        """Run ``method`` like ``Worker._rlinf_call`` (a ``(value, error, seconds, memory, CPU
        seconds)`` future; control calls: ``(value, error, seconds)``)."""
        if control:
            return self._control(method, args, kwargs)
        internal = method.startswith("_rlinf_")  # the scheduler's own plumbing: objects are shared
        if not internal:
            args, kwargs = copy_value(tuple(args)), copy_value(dict(kwargs))
        return self._submit(self._run, method, args, kwargs, not internal)

    def shutdown(self) -> None:
        """Stop taking calls; queued calls are cancelled, a running one finishes on its own
        (a thread cannot be killed), its pipes are closed so that peers waiting on them fail."""
        self._closed = True
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                item[0].cancel()
        for _ in self._threads:
            self._queue.put(_STOP)
        pipes = getattr(self.instance, "_rlinf_pipes", None)
        if pipes is not None:
            pipes.close()
        self.instance = None

    # ---- plumbing -------------------------------------------------------------------------
    def _submit(self, fn: Callable, *args: Any) -> Future:
        future: Future = Future()
        if self._closed:
            future.set_exception(RuntimeError(f"{self.name} was shut down"))
            return future
        self._queue.put((future, fn, args))
        return future

    def _serve(self) -> None:
        if self._trace is not None:  # this thread only (threading.settrace would reach every later thread)
            sys.settrace(self._trace)
        if self._threads_per_call:
            import torch  # lazy: numpy / torch only once a worker runs; making the local cluster loads neither

            torch.set_num_threads(self._threads_per_call)
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - delivered to whoever waits
                future.set_exception(exc)

    def _construct(self, worker_cls: type, env: dict, args: tuple, kwargs: dict, secret=None) -> None:
        with _CONSTRUCTING, self._own_random():
            instance = worker_cls.__new__(worker_cls)
            object.__setattr__(instance, "_rlinf_env", dict(env))
            if secret is not None:
                object.__setattr__(instance, "_rlinf_secret", secret)
            try:
                instance.__init__(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - reported on every call, as Ray does
                self.init_error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                raise InitFailed(self.init_error) from None
        self.instance = instance

    def _run(self, method: str, args: tuple, kwargs: dict, copy_result: bool) -> tuple:
        if self.instance is None:
            raise InitFailed(self.init_error or f"{self.name} was shut down")
        with self._own_random():
            value, error, elapsed, memory, cpu = self.instance._rlinf_call(method, *args, **kwargs)
        return (copy_value(value) if copy_result and error is None else value), error, elapsed, memory, cpu

    def _control(self, method: str, args: tuple, kwargs: dict) -> Future:
        """Answer at once (after ``__init__``), on the caller's thread."""
        out: Future = Future()

        def answer(started: Future) -> None:
            if started.cancelled() or started.exception() is not None:
                out.set_exception(InitFailed(self.init_error or f"{self.name} did not start"))
            elif method == "_rlinf_ping":
                out.set_result((("local", os.getpid()), None, 0.0))
            else:
                start = time.perf_counter()
                out.set_result((getattr(self.instance, method)(*args, **kwargs), None,
                                time.perf_counter() - start))

        self.started.add_done_callback(answer)
        return out

    def _own_random(self):
        actor = self

        class _Scope:
            def __enter__(self):
                actor._random.enter()

            def __exit__(self, *exc):
                actor._random.leave()

        return _Scope()
