"""Run one sandbox process: capped output, a wall-clock limit, and the whole tree killed at the end.

:func:`run_capped` starts the command in a session of its own (``start_new_session``), stdout and
stderr on one pipe, and reads it in 64 KiB chunks while keeping only the first and the last
``keep_bytes`` (:class:`CappedOutput`): a cell printing 100 MB costs the parent two small
buffers, never 100 MB. At the deadline, or when the main process has ended but something still
holds the pipe, the process group is killed with SIGKILL (and the call's pids cgroup emptied,
when there is one); the bwrap / unshare modes add a PID namespace, whose processes the kernel
kills when its first process dies, so a ``setsid`` inside the cell does not escape.

:class:`PidsCgroup` is the process limit for root: the kernel never applies RLIMIT_NPROC to
uid 0, so when rlinf runs as root each call gets a pids cgroup (``pids.max``) of its own, joined
by a ``/bin/sh`` that then execs the sandbox, so every descendant is born inside it.

Example:
    >>> import sys
    >>> out = run_capped([sys.executable, "-c", "print('x' * 50)"], env={}, cwd=".", timeout_s=10, keep_bytes=8)
    >>> out.returncode, out.killed, out.total_bytes
    (0, False, 51)
    >>> out.output.text(10)
    'xxxxx\\n...[41 characters cut]...\\nxxxx\\n'
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from rlinf.engines.tools.pool import truncate_middle

__all__ = ["CappedOutput", "RunOutcome", "PidsCgroup", "run_capped"]

_CHUNK = 1 << 16


class CappedOutput:
    """The first and last ``keep_bytes`` of a byte stream, plus its length in bytes and
    (about) characters.

    >>> out = CappedOutput(4)
    >>> for part in (b"abcd", b"efgh", b"ijkl"):
    ...     out.add(part)
    >>> bytes(out.head), bytes(out.tail), out.total_bytes
    (b'abcd', b'ijkl', 12)
    >>> out.text(6)
    'abc\\n...[6 characters cut]...\\njkl'
    """

    def __init__(self, keep_bytes: int):
        self.keep_bytes = keep_bytes
        self.head = bytearray()
        self.tail = bytearray()
        self.total_bytes = 0
        self.total_chars = 0  # partial UTF-8 sequences at chunk edges are not counted
        self.dropped = False

    def add(self, chunk: bytes) -> None:
        self.total_bytes += len(chunk)
        self.total_chars += len(chunk.decode("utf-8", "ignore"))
        room = self.keep_bytes - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep_bytes:
                del self.tail[:len(self.tail) - self.keep_bytes]
                self.dropped = True

    def text(self, limit: int) -> str:
        """The stream as text cut in the middle to about ``limit`` characters."""
        if not self.dropped:
            return truncate_middle((self.head + self.tail).decode("utf-8", "replace"), limit)
        head = self.head.decode("utf-8", "ignore")[:limit // 2]
        tail_chars = limit - len(head)
        tail = self.tail.decode("utf-8", "ignore")[-tail_chars:] if tail_chars else ""
        return f"{head}\n...[{self.total_chars - len(head) - len(tail)} characters cut]...\n{tail}"


@dataclass
class RunOutcome:
    """How a run ended: ``returncode`` as :class:`subprocess.Popen` gives it (negative: killed
    by that signal); ``killed``: by us, at the wall-clock deadline."""

    returncode: int
    killed: bool
    output: CappedOutput
    seconds: float
    total_bytes: int = field(init=False)

    def __post_init__(self):
        self.total_bytes = self.output.total_bytes


class PidsCgroup:
    """A pids cgroup for one call under this process's own pids cgroup (v1 ``pids`` hierarchy or
    v2 with ``pids`` in ``cgroup.subtree_control``); see the module docstring."""

    _names = itertools.count()
    _parent: str | None | bool = False  # False: not looked for yet
    _lock = threading.Lock()

    def __init__(self, max_pids: int):
        parent = self.parent_dir()
        if parent is None:
            raise OSError("no writable pids cgroup")
        self.path = os.path.join(parent, f"rlinf-py-{os.getpid()}-{next(self._names)}")
        os.mkdir(self.path)
        try:
            with open(os.path.join(self.path, "pids.max"), "w") as f:
                f.write(str(max_pids))
        except OSError:
            os.rmdir(self.path)
            raise

    @classmethod
    def parent_dir(cls) -> str | None:
        """Where this process may create pids cgroups (probed once), or None."""
        with cls._lock:
            if cls._parent is False:
                cls._parent = cls._find_parent() if os.geteuid() == 0 else None
            return cls._parent  # type: ignore[return-value]

    @staticmethod
    def _find_parent() -> str | None:
        try:
            with open("/proc/self/cgroup") as f:
                own = [line.rstrip("\n").split(":", 2) for line in f]
            with open("/proc/self/mountinfo") as f:
                mounts = [line.split() for line in f]
        except OSError:
            return None
        for fields in mounts:
            sep = fields.index("-")
            fstype, options = fields[sep + 1], fields[sep + 3].split(",")
            v1 = fstype == "cgroup" and "pids" in options
            if not (v1 or fstype == "cgroup2"):
                continue
            path = next((p for _, ctl, p in own if ("pids" in ctl.split(",") if v1 else ctl == "")), None)
            root = fields[3]
            if path is None or not path.startswith(root):
                continue
            candidate = os.path.join(fields[4], path[len(root):].lstrip("/"))
            if PidsCgroup._try(candidate):
                return candidate
        return None

    @staticmethod
    def _try(parent: str) -> bool:
        probe = os.path.join(parent, f"rlinf-py-probe-{os.getpid()}")
        try:
            os.mkdir(probe)
        except OSError:
            return False
        try:
            with open(os.path.join(probe, "pids.max"), "w") as f:
                f.write("1")
            return True
        except OSError:
            return False
        finally:
            os.rmdir(probe)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first joins this cgroup."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(self.path, "cgroup.procs"), *argv]

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            return []

    def remove(self, wait_s: float = 2.0) -> bool:
        """Kill whatever is left in the cgroup and remove it; False if it would not go."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for pid in self.pids():
                _kill(os.kill, pid)
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                time.sleep(0.01)
        return False


def _kill(send, target: int) -> None:
    """``send(target, SIGKILL)`` (``os.kill`` or ``os.killpg``); gone or not ours is fine."""
    try:
        send(target, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _ended(proc: subprocess.Popen) -> bool:
    """Whether ``proc`` has ended, without reaping it (its pid, the group id, stays taken)."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def run_capped(argv: list[str], *, env: dict, cwd: str, timeout_s: float, keep_bytes: int,
               cgroup: PidsCgroup | None = None, on_start=None) -> RunOutcome:
    """Run ``argv``; see the module docstring. ``on_start(proc)`` is called once it runs (the
    tool keeps it to kill it on close)."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, cwd=cwd, start_new_session=True, close_fds=True)
    if on_start is not None:
        on_start(proc)
    output = CappedOutput(keep_bytes)
    killed = False
    give_up = None  # after a kill, stop reading at this time even if the pipe stays open

    def kill_tree():
        _kill(os.killpg, proc.pid)
        if cgroup is not None:
            for pid in cgroup.pids():
                _kill(os.kill, pid)

    fd = proc.stdout.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        while True:
            now = time.monotonic()
            if give_up is None and now >= deadline:
                killed = True
                kill_tree()
                give_up = now + 2.0
            elif give_up is None and _ended(proc):
                kill_tree()  # the main process ended: what it left behind goes too
                give_up = now + 2.0
            if give_up is not None and now >= give_up:
                break
            wait = min((give_up or deadline) - now, 0.1)
            if poller.poll(max(wait, 0.0) * 1000):
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    break
                output.add(chunk)
    finally:
        kill_tree()
        proc.stdout.close()
        proc.wait()
    return RunOutcome(proc.returncode, killed, output, time.monotonic() - t0)
