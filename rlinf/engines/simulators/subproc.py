"""``SubprocBatchSim``: :class:`SingleEnv` s in worker processes (one per process by default,
``envs_per_process`` to group them), a pipe to each process.

Needed because a ManiSkill CPU environment object holds one environment (no batch on CPU) and
stepping many in one process uses one core; useful for LIBERO (MuJoCo rendering holds a GL context
per process). Processes start with the ``spawn``
context (no inherited GL / CUDA / Ray state), so a script that builds one needs an
``if __name__ == "__main__":`` guard.

Every call has a deadline (``step_timeout_s`` for steps and renders, ``start_timeout_s`` for
building and resetting, which may rebuild a LIBERO task). A process that dies, hangs or raises
turns into :class:`~rlinf.engines.simulators.base.SimulatorError` naming the env index, its task
and the cause; the whole batch is then stopped (a partial batch is useless to a rollout).

Example:
    >>> from functools import partial
    >>> from rlinf.envs.toy_reach import ToyReachEnv
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
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from rlinf.engines.simulators.base import EnvObs, SimulatorError
from rlinf.engines.simulators.episodes import BatchSim, SimStep
from rlinf.engines.simulators.single import IdleEnvs, SerialBatchSim, stack_obs, stack_steps
from rlinf.envs.base import SimSpec, SingleEnv, SingleObs, SingleStep

__all__ = ["SubprocBatchSim", "build_cpu_sim"]

EnvFactory = Callable[[], SingleEnv]


def _worker(conn: Connection, factories: Sequence[EnvFactory]) -> None:
    """Process body: build the envs (one or more, stepped one after another), then answer
    (command, argument) pairs until close or EOF.

    Commands and payloads: ``step`` (one ``[A]`` action per env, None for an idle env -> one
    :class:`SingleStep` per env, None where idle),
    ``reset`` (``[(local index, state id), ...]`` -> those envs' :class:`SingleObs`), ``render``
    (-> one frame per env), ``close``. Replies are ``(ok, payload, task_names)``; on a Python
    error ``payload`` is the traceback.
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)  # one core per simulator process; N processes share the machine
    envs: list[SingleEnv] = []
    try:
        for factory in factories:
            envs.append(factory())
        conn.send((True, envs[0].spec(), [e.task_name for e in envs]))
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
                out: Any = [None if a is None else env.step(a) for env, a in zip(envs, arg)]
            elif cmd == "reset":
                out = [envs[j].reset(state_id) for j, state_id in arg]
            elif cmd == "render":
                out = [env.render() for env in envs]
            elif cmd == "close":
                for env in envs:
                    env.close()
                conn.send((True, None, [e.task_name for e in envs]))
                break
            else:
                raise ValueError(f"unknown command {cmd!r}")
            conn.send((True, out, [e.task_name for e in envs]))
        except Exception:  # noqa: BLE001 - the parent raises it with the env index
            conn.send((False, traceback.format_exc(), [e.task_name for e in envs]))


class SubprocBatchSim(BatchSim):
    """``N`` environments in spawned processes, ``envs_per_process`` each (stepped one after
    another inside a process; the processes step in parallel).

    Args:
        factories: one picklable zero-argument callable per environment returning a
            :class:`SingleEnv` (a ``functools.partial`` of a class defined at module level).
        labels: task names for error messages until each env reports its own.
        step_timeout_s: deadline of a step or render, for the whole batch.
        start_timeout_s: deadline of building (all envs in parallel) and of a reset.
        envs_per_process: environments per process (the last process may hold fewer). 1 = a
            process per environment; more pays off when environments outnumber cores, since
            each process costs start-up time, memory and a message round trip per step.
    """

    def __init__(self, factories: Sequence[EnvFactory], labels: Sequence[str] | None = None,
                 step_timeout_s: float = 60.0, start_timeout_s: float = 300.0,
                 envs_per_process: int = 1):
        if not factories:
            raise ValueError("SubprocBatchSim needs at least one environment")
        if envs_per_process < 1:
            raise ValueError(f"envs_per_process must be >= 1, got {envs_per_process}")
        self.step_timeout_s = step_timeout_s
        self.start_timeout_s = start_timeout_s
        self._tasks = list(labels) if labels is not None else ["?"] * len(factories)
        self._last: list[SingleObs | None] = [None] * len(factories)
        self._idle = IdleEnvs(len(factories))
        self._closed = False
        n = len(factories)
        #: env indices held by each process, contiguous and in order
        self._members: list[list[int]] = [list(range(i, min(i + envs_per_process, n)))
                                          for i in range(0, n, envs_per_process)]
        ctx = mp.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs: list[mp.process.BaseProcess] = []
        for members in self._members:
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_worker, args=(child, [factories[i] for i in members]), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        specs = self._gather(range(len(self._procs)), "start", start_timeout_s)
        self._spec: SimSpec = specs[0]

    steps_in_background = True

    @property
    def num_envs(self) -> int:
        return len(self._last)

    def set_idle(self, idle: np.ndarray | None) -> None:
        """Idle environments are not sent to their process (see :meth:`BatchSim.set_idle`)."""
        self._idle.set(idle)

    @property
    def num_processes(self) -> int:
        """Simulator processes (``ceil(num_envs / envs_per_process)``)."""
        return len(self._procs)

    @property
    def spec(self) -> SimSpec:
        return self._spec

    @property
    def pids(self) -> list[int | None]:
        """Process id of each environment's worker (shared by the envs of one process)."""
        return [self._procs[p].pid for p, members in enumerate(self._members) for _ in members]

    @property
    def task_names(self) -> list[str]:
        """The task each environment last reported."""
        return list(self._tasks)

    def reset(self, env_ids: np.ndarray, state_ids: np.ndarray) -> EnvObs:
        wanted = {int(i) for i in env_ids}
        asked = []
        for p, members in enumerate(self._members):
            pairs = [(j, int(state_ids[i])) for j, i in enumerate(members) if i in wanted]
            if pairs:
                self._send(p, "reset", pairs)
                asked.append((p, [members[j] for j, _ in pairs]))
        answers = self._gather([p for p, _ in asked], "reset", self.start_timeout_s)
        for (_, ids), obs_list in zip(asked, answers):
            for i, obs in zip(ids, obs_list):
                self._last[i] = obs
        self._idle.wake(sorted(wanted))
        missing = [i for i, o in enumerate(self._last) if o is None]
        if missing:
            raise RuntimeError(f"envs {missing} were never reset")
        return stack_obs(self._last)  # type: ignore[arg-type]

    def step(self, actions: torch.Tensor | np.ndarray) -> SimStep:
        self.step_send(actions)
        return self.step_recv()

    def step_send(self, actions: torch.Tensor | np.ndarray) -> None:
        """Hand every process its actions and return at once (the processes step meanwhile)."""
        acts = actions.detach().cpu().numpy() if isinstance(actions, torch.Tensor) else np.asarray(actions)
        acts = acts.astype(np.float32, copy=False)
        for p, members in enumerate(self._members):
            self._send(p, "step", [None if self._idle.is_idle(i) else acts[i] for i in members])

    def step_recv(self) -> SimStep:
        per_proc: list[list[SingleStep | None]] = self._gather(range(len(self._procs)), "step",
                                                               self.step_timeout_s)
        steps = [s if s is not None else self._idle.replay(i)
                 for i, s in enumerate(s for group in per_proc for s in group)]
        for i, s in enumerate(steps):
            self._last[i] = s.obs
            self._idle.remember(i, s)
        return stack_steps(steps)

    def render(self) -> np.ndarray:
        for p in range(len(self._procs)):
            self._send(p, "render", None)
        frames = self._gather(range(len(self._procs)), "render", self.step_timeout_s)
        return np.stack([f for group in frames for f in group])

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
    def _send(self, p: int, cmd: str, arg: Any) -> None:
        if self._closed:
            raise SimulatorError("the simulator batch is closed")
        try:
            self._conns[p].send((cmd, arg))
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._fail(p, cmd, self._death(p))

    def _gather(self, procs: Sequence[int] | range, op: str, timeout: float) -> list[Any]:
        """One answer per process in ``procs`` (in order)."""
        deadline = time.monotonic() + timeout
        out = []
        for p in procs:
            conn = self._conns[p]
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                alive = self._procs[p].is_alive()
                cause = (f"no answer within {timeout:g} s (process {self._procs[p].pid} "
                         f"{'is alive but unresponsive' if alive else self._death(p)})")
                self._fail(p, op, cause)
            try:
                ok, payload, tasks = conn.recv()
            except (EOFError, ConnectionResetError, OSError):
                self._fail(p, op, self._death(p))
            for i, task in zip(self._members[p], tasks or ()):
                if task is not None and task != "?":
                    self._tasks[i] = task
            if not ok:
                self._fail(p, op, f"raised in the simulator process:\n{payload}")
            out.append(payload)
        return out

    def _death(self, p: int) -> str:
        proc = self._procs[p]
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

    def _fail(self, p: int, op: str, cause: str) -> None:
        members = self._members[p]
        first = members[0]
        which = f"env {first}" if len(members) == 1 else f"envs {first}-{members[-1]}"
        self.close(grace_s=0.0)  # a batch with a broken member is useless: stop it at once
        raise SimulatorError(f"{which} ({self._tasks[first]}): {op} failed: {cause}")


def build_cpu_sim(factory: EnvFactory, num_envs: int, cfg: Any, label: str) -> BatchSim:
    """``num_envs`` environments of ``factory`` for an env group ``cfg`` (an ``EnvConfig``): in
    this process, one after another, with ``cfg.sim_in_worker`` (those already built are closed
    when one fails), else in simulator processes (``envs_per_process`` each, ``cfg``'s
    deadlines); ``label`` names them in errors until they report their task."""
    if cfg.sim_in_worker:
        envs: list[SingleEnv] = []
        try:
            for _ in range(num_envs):
                envs.append(factory())
        except BaseException:
            for env in envs:
                env.close()
            raise
        return SerialBatchSim(envs)
    return SubprocBatchSim([factory] * num_envs, labels=[label] * num_envs,
                           step_timeout_s=cfg.step_timeout_s, start_timeout_s=cfg.start_timeout_s,
                           envs_per_process=cfg.envs_per_process)
