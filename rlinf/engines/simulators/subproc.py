"""``SubprocBatchSim``: one :class:`SingleEnv` per worker process, a pipe to each.

Needed because ManiSkill's CPU simulation allows one environment per process, and useful for
LIBERO (MuJoCo rendering holds a GL context per process). Processes start with the ``spawn``
context (no inherited GL / CUDA / Ray state), so a script that builds one needs an
``if __name__ == "__main__":`` guard.

Every call has a deadline (``step_timeout_s`` for steps and renders, ``start_timeout_s`` for
building and resetting, which may rebuild a LIBERO task). A process that dies, hangs or raises
turns into :class:`~rlinf.engines.simulators.base.SimulatorError` naming the env index, its task
and the cause; the whole batch is then stopped (a partial batch is useless to a rollout).

Example:
    >>> from functools import partial
    >>> from rlinf.engines.simulators.toy import ToyReachEnv
    >>> sim = SubprocBatchSim([partial(ToyReachEnv), partial(ToyReachEnv)])  # doctest: +SKIP
    >>> sim.reset(np.arange(2), np.array([5, 6])).states.shape  # doctest: +SKIP
    torch.Size([2, 4])
    >>> sim.close()  # doctest: +SKIP
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, Callable, Sequence

import numpy as np
import torch

from rlinf.engines.simulators.base import EnvObs, SimulatorError
from rlinf.engines.simulators.episodes import BatchSim, SimSpec, SimStep
from rlinf.engines.simulators.single import SingleEnv, SingleObs, SingleStep, stack_obs, stack_steps

__all__ = ["SubprocBatchSim"]

EnvFactory = Callable[[], SingleEnv]


def _worker(conn: Connection, factory: EnvFactory) -> None:
    """Process body: build the env, then answer (command, argument) pairs until close or EOF.

    Replies are ``(ok, payload, task_name)``; on a Python error ``payload`` is the traceback.
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)  # one core per simulator; N processes share the machine
    try:
        env = factory()
        conn.send((True, env.spec(), env.task_name))
    except BaseException:  # noqa: BLE001 - report anything, including SystemExit from a library
        conn.send((False, traceback.format_exc(), None))
        return
    while True:
        try:
            cmd, arg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break
        try:
            if cmd == "step":
                out: Any = env.step(arg)
            elif cmd == "reset":
                out = env.reset(arg)
            elif cmd == "render":
                out = env.render()
            elif cmd == "close":
                env.close()
                conn.send((True, None, env.task_name))
                break
            else:
                raise ValueError(f"unknown command {cmd!r}")
            conn.send((True, out, env.task_name))
        except Exception:  # noqa: BLE001 - the parent raises it with the env index
            conn.send((False, traceback.format_exc(), env.task_name))


class SubprocBatchSim(BatchSim):
    """``N`` environments, each in its own spawned process.

    Args:
        factories: one picklable zero-argument callable per environment returning a
            :class:`SingleEnv` (a ``functools.partial`` of a class defined at module level).
        labels: task names for error messages until each env reports its own.
        step_timeout_s: deadline of a step or render, for the whole batch.
        start_timeout_s: deadline of building (all envs in parallel) and of a reset.
    """

    def __init__(self, factories: Sequence[EnvFactory], labels: Sequence[str] | None = None,
                 step_timeout_s: float = 60.0, start_timeout_s: float = 300.0):
        if not factories:
            raise ValueError("SubprocBatchSim needs at least one environment")
        self.step_timeout_s = step_timeout_s
        self.start_timeout_s = start_timeout_s
        self._tasks = list(labels) if labels is not None else ["?"] * len(factories)
        self._last: list[SingleObs | None] = [None] * len(factories)
        self._closed = False
        ctx = mp.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs: list[mp.process.BaseProcess] = []
        for factory in factories:
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_worker, args=(child, factory), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        specs = self._gather(range(len(factories)), "start", start_timeout_s)
        self._spec: SimSpec = specs[0]

    @property
    def num_envs(self) -> int:
        return len(self._conns)

    @property
    def spec(self) -> SimSpec:
        return self._spec

    @property
    def pids(self) -> list[int | None]:
        """Process id of each environment's worker."""
        return [p.pid for p in self._procs]

    @property
    def task_names(self) -> list[str]:
        """The task each environment last reported."""
        return list(self._tasks)

    def reset(self, env_ids: np.ndarray, state_ids: np.ndarray) -> EnvObs:
        ids = [int(i) for i in env_ids]
        for i in ids:
            self._send(i, "reset", int(state_ids[i]))
        for i, obs in zip(ids, self._gather(ids, "reset", self.start_timeout_s)):
            self._last[i] = obs
        missing = [i for i, o in enumerate(self._last) if o is None]
        if missing:
            raise RuntimeError(f"envs {missing} were never reset")
        return stack_obs(self._last)  # type: ignore[arg-type]

    def step(self, actions: torch.Tensor | np.ndarray) -> SimStep:
        self.step_send(actions)
        return self.step_recv()

    def step_send(self, actions: torch.Tensor | np.ndarray) -> None:
        """Hand every process its action and return at once (the processes step meanwhile)."""
        acts = actions.detach().cpu().numpy() if isinstance(actions, torch.Tensor) else np.asarray(actions)
        acts = acts.astype(np.float32, copy=False)
        for i in range(self.num_envs):
            self._send(i, "step", acts[i])

    def step_recv(self) -> SimStep:
        steps: list[SingleStep] = self._gather(range(self.num_envs), "step", self.step_timeout_s)
        for i, s in enumerate(steps):
            self._last[i] = s.obs
        return stack_steps(steps)

    def render(self) -> np.ndarray:
        for i in range(self.num_envs):
            self._send(i, "render", None)
        return np.stack(self._gather(range(self.num_envs), "render", self.step_timeout_s))

    def close(self, grace_s: float = 5.0) -> None:
        """Ask every process to close its env, then kill those still running after ``grace_s``."""
        if self._closed:
            return
        self._closed = True
        for conn, proc in zip(self._conns, self._procs):
            if grace_s > 0 and proc.is_alive():
                try:
                    conn.send(("close", None))
                except (BrokenPipeError, OSError):
                    pass
        deadline = time.monotonic() + grace_s
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()  # also ends a stopped or hung process
                proc.join(5.0)
        for conn in self._conns:
            conn.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- plumbing -------------------------------------------------------------------------------
    def _send(self, i: int, cmd: str, arg: Any) -> None:
        if self._closed:
            raise SimulatorError("the simulator batch is closed")
        try:
            self._conns[i].send((cmd, arg))
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._fail(i, cmd, self._death(i))

    def _gather(self, ids: Sequence[int] | range, op: str, timeout: float) -> list[Any]:
        deadline = time.monotonic() + timeout
        out = []
        for i in ids:
            conn = self._conns[i]
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                alive = self._procs[i].is_alive()
                cause = (f"no answer within {timeout:g} s (process {self._procs[i].pid} "
                         f"{'is alive but unresponsive' if alive else self._death(i)})")
                self._fail(i, op, cause)
            try:
                ok, payload, task = conn.recv()
            except (EOFError, ConnectionResetError, OSError):
                self._fail(i, op, self._death(i))
            if task is not None and task != "?":
                self._tasks[i] = task
            if not ok:
                self._fail(i, op, f"raised in the simulator process:\n{payload}")
            out.append(payload)
        return out

    def _death(self, i: int) -> str:
        proc = self._procs[i]
        proc.join(2.0)
        code = proc.exitcode
        if code is None:
            return f"process {proc.pid} closed its pipe"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"process {proc.pid} was killed by {name}"
        return f"process {proc.pid} exited with code {code}"

    def _fail(self, i: int, op: str, cause: str) -> None:
        task = self._tasks[i]
        self.close(grace_s=0.0)  # a batch with a broken member is useless: stop it at once
        raise SimulatorError(f"env {i} ({task}): {op} failed: {cause}")
