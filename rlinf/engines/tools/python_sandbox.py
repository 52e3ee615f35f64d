"""The ``python`` tool: run the model's code in a fresh, limited, sandboxed process per call.

Each call writes a job file (the cell, the earlier cells to replay, the limits) into a private
directory ``rlinf-py-*`` and runs :mod:`~.python_sandbox_boot` in a new process under one of
three isolation modes (YAML ``tools.python.isolation``; ``docs/tools_sandbox.md`` says what each
protects against):

- ``bwrap``: bubblewrap with an allow-list of read-only mounts on an empty root
  (:mod:`~.python_sandbox_mounts`: the system's ``/usr`` and ``/lib*``, the interpreter's
  installation, a virtualenv's site-packages; no home folder, ``/etc`` beyond the loader's
  cache, ``/tmp``, ``/run`` or project checkout), ``--unshare-all`` (user, net, pid, ipc, uts,
  cgroup), ``--die-with-parent``, ``--new-session``, ``--cap-drop ALL``, a fresh ``/dev`` and
  ``/proc``, and size-capped tmpfs for the working directory and ``/dev/shm``.
- ``unshare``: util-linux ``unshare`` (user, net, pid, mount, ipc, uts namespaces); the
  bootstrap then builds the same file system itself (a tmpfs root with the same mounts, made
  read-only, ``pivot_root`` into it, the old root detached, a tmpfs working directory, minimal
  ``/dev``) and drops every capability before the cell runs.
- ``none``: rlimits only. Not a sandbox: the cell can read and write what rlinf can, and reach
  the network.

``auto`` (the default) takes ``bwrap`` when it is installed and a probe call works (the probe also
checks that the tree outside the working directory is read-only), else ``unshare``, else
:meth:`PythonTool.check` refuses with one line naming ``tools.python.isolation``.

Limits: wall time (the process group is killed; in bwrap / unshare the PID namespace dies with
it), CPU seconds (RLIMIT_CPU), address space (RLIMIT_AS, per process: a MemoryError traceback),
file size (RLIMIT_FSIZE), and processes: RLIMIT_NPROC set inside the sandbox's own user
namespace (the kernel counts it per user namespace), or, when rlinf runs as root (to whom the
kernel never applies RLIMIT_NPROC), a pids cgroup per call
(:class:`~.python_sandbox_proc.PidsCgroup`). Output (stdout and stderr together) is read with a
cap and cut in the middle to ``max_output_chars``; a killed call ends with a reason line such as
``[killed: wall time 10 s]``.

``keep_state: true`` keeps variables across the calls of one episode by replaying the episode's
earlier successful cells (``session.state["python"]``) with their output suppressed before the
new cell: each call costs the time of all earlier cells, and their side effects run again.

Example (``isolation: none`` keeps the doctest independent of the machine):
    >>> tool = PythonTool(PythonTool.Options(isolation="none", timeout_s=10, memory_mb=256))
    >>> result = tool.call({"code": "x = 6 * 7\\nx"}, ToolSession())
    >>> result.status, result.text
    ('ok', '42\\n')
    >>> result = tool.call({"code": "1 / 0"}, ToolSession())
    >>> result.status, result.text.splitlines()[-1]
    ('error', 'ZeroDivisionError: division by zero')
"""

from __future__ import annotations

import marshal
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import ClassVar, Literal

from rlinf.engines.tools.base import Tool, ToolResult, ToolSession, register_tool
from rlinf.engines.tools.python_sandbox_mounts import (
    SYSTEM_PATHS,
    MountPlan,
    interpreter_layout,
    mount_plan,
    project_dirs,
)
from rlinf.engines.tools.python_sandbox_proc import PidsCgroup, RunOutcome, run_capped
from rlinf.utils.typed_config import ConfigError, check

__all__ = ["PythonTool", "PythonOptions"]

_BOOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_sandbox_boot.py")
_SETUP_FAILED = 125  # python_sandbox_boot.SETUP_FAILED
_RO_METHOD = "auto"  # "remount": the unshare mode's pre-5.12 fallback (tests force it)
_PROBE = ("import os\ntry:\n    open(os.path.join(os.path.dirname(os.getcwd()), 'probe'), 'w')\n"
          "    print('WRITABLE')\nexcept OSError:\n    pass\nprint(os.readlink('/proc/self/ns/user'))\n")
_PROBED: dict[tuple, tuple[str | None, bool]] = {}  # probe results, see PythonTool._probe
_PROBED_LOCK = threading.Lock()
# processes of the sandbox machinery that the process limit also counts, by (limiter, mode):
# bwrap's init (+ bwrap itself inside a cgroup), unshare and its PID 1
_OVERHEAD = {("rlimit", "bwrap"): 1, ("rlimit", "unshare"): 2, ("cgroup", "bwrap"): 2,
             ("cgroup", "unshare"): 2, ("cgroup", "none"): 0}


@dataclass(frozen=True)
class PythonOptions:
    """YAML keys under ``tools.python`` (see the module docstring and docs/tools_sandbox.md).

    ``cpu_time_s`` null = ``timeout_s``; ``max_processes`` counts the cell's processes and
    threads, its interpreter included (0 = no limit); ``python`` empty = rlinf's own interpreter;
    ``isolated_interpreter`` runs it with ``-I`` (no PYTHON* variables, no user site; the
    interpreter's site-packages stay importable); ``private_dir_mb`` caps the tmpfs of the working
    directory and ``/dev/shm`` (bwrap / unshare); ``hide_paths``: an extra deny-list on top of
    the allow-list (:mod:`~.python_sandbox_mounts`), covered by an empty read-only tmpfs where
    they lie inside an allowed folder (bwrap / unshare)."""

    timeout_s: float = 10.0
    cpu_time_s: float | None = None
    memory_mb: int = 1024
    max_output_chars: int = 2000
    max_processes: int = 32
    max_file_mb: int = 16
    private_dir_mb: int = 64
    isolation: Literal["auto", "bwrap", "unshare", "none"] = "auto"
    python: str = ""
    keep_state: bool = False
    isolated_interpreter: bool = True
    hide_paths: tuple[str, ...] = ()

    def validate(self, path: str) -> None:
        check(self.timeout_s > 0, f"{path}.timeout_s", f"must be > 0 seconds, got {self.timeout_s}")
        check(self.cpu_time_s is None or self.cpu_time_s > 0, f"{path}.cpu_time_s",
              f"must be > 0 seconds (or null for timeout_s), got {self.cpu_time_s}")
        check(self.memory_mb >= 32, f"{path}.memory_mb",
              f"must be >= 32 (the interpreter itself needs tens of MB), got {self.memory_mb}")
        check(self.max_output_chars > 0, f"{path}.max_output_chars", f"must be > 0, got {self.max_output_chars}")
        check(self.max_processes >= 0, f"{path}.max_processes",
              f"must be >= 1, or 0 for no limit, got {self.max_processes}")
        check(self.max_file_mb > 0, f"{path}.max_file_mb", f"must be > 0, got {self.max_file_mb}")
        check(self.private_dir_mb > 0, f"{path}.private_dir_mb", f"must be > 0, got {self.private_dir_mb}")
        for p in self.hide_paths:
            check(os.path.isabs(p) and os.path.normpath(p) != "/", f"{path}.hide_paths",
                  f"{p!r} must be an absolute path other than /")

    @property
    def cpu_seconds(self) -> int:
        """RLIMIT_CPU counts whole seconds."""
        return max(1, math.ceil(self.cpu_time_s if self.cpu_time_s is not None else self.timeout_s))


@register_tool
class PythonTool(Tool):
    """Runs ``{"code": ...}`` in a sandbox; see the module docstring."""

    name = "python"
    description = ("Run Python 3 code and get back what it prints (stdout and stderr, cut in the middle "
                   "when long); the value of a last bare expression is printed. Each call is a fresh "
                   "process with time and memory limits, no network and a read-only file system except "
                   "its working directory, which is emptied after the call.")
    parameters = {"type": "object", "properties": {"code": {"type": "string", "description": "Python source"}},
                  "required": ["code"], "additionalProperties": False}
    Options: ClassVar[type] = PythonOptions

    def __init__(self, options: PythonOptions | None = None):
        super().__init__(options)
        if self.options.keep_state:
            self.description = self.description.replace(
                "Each call is a fresh process", "Variables persist across calls (earlier cells are re-run "
                "silently first). Each call is a fresh process")
        self._lock = threading.Lock()  # guards _running
        self._resolve_lock = threading.Lock()
        self._resolved: tuple[str, str | None, str] | None = None  # mode, limiter, bwrap size flag
        self._plan: MountPlan | None = None
        self._plan_lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()

    # ------------------------------------------------------------------ configuration

    @property
    def python(self) -> str:
        """The interpreter the cells run with."""
        return self.options.python or sys.executable

    def check(self, path: str = "tools.python") -> None:
        """Validate the options, find the interpreter and pick the isolation mode (probe calls);
        every problem is one :class:`ConfigError` line naming its key."""
        self.options.validate(path)
        if shutil.which(self.python) is None:
            raise ConfigError(f"{path}.python", f"{self.python!r} is not an executable interpreter")
        if self.options.isolation != "none":
            self._mounts(path)
        self._resolve(path)

    def _mounts(self, path: str = "tools.python") -> MountPlan:
        """The sandbox's mount plan (once per tool): the allow-list for this interpreter, the
        project's folders and ``hide_paths`` on top; a hidden path the interpreter needs is refused."""
        with self._plan_lock:
            if self._plan is not None:
                return self._plan
            python = shutil.which(self.python)
            if python is None:
                raise ConfigError(f"{path}.python", f"{self.python!r} is not an executable interpreter")
            try:
                layout = interpreter_layout(os.path.abspath(python), self._env("/"))
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                raise ConfigError(f"{path}.python", f"{python}: {exc}") from None
            allowed = [*SYSTEM_PATHS, *layout.allowed()]
            if "/" in {os.path.realpath(p) for p in allowed}:
                raise ConfigError(f"{path}.python", f"{python}: its installation is the whole file system (prefix /), "
                                  "which an allow-list cannot narrow; use a virtualenv or another interpreter")
            needed = [os.path.realpath(python), os.path.realpath(layout.stdlib)]
            user = [os.path.realpath(p) for p in self.options.hide_paths]
            for hidden in user:
                plan = mount_plan(allowed, [hidden])
                for need in needed:
                    if _inside(need, hidden) and plan.hides(need):
                        raise ConfigError(f"{path}.hide_paths", f"{hidden} holds {need}, which the sandbox needs; "
                                          "remove it from tools.python.hide_paths")
            own = [d for d in project_dirs() if not any(mount_plan(allowed, [d]).hides(n) for n in needed)]
            self._plan = mount_plan(allowed, [*user, *own])
            return self._plan

    def _resolve(self, path: str = "tools.python") -> tuple[str, str | None, str]:
        with self._resolve_lock:
            if self._resolved is None:
                self._resolved = self._pick(path)
            return self._resolved

    def _pick(self, path: str) -> tuple[str, str | None, str]:
        wanted = self.options.isolation
        size_flag = ""
        if shutil.which("bwrap"):
            helptext = subprocess.run(["bwrap", "--help"], capture_output=True, text=True).stdout
            size_flag = "--size" if "--size" in helptext else ""
        tried = []
        for mode in ("bwrap", "unshare") if wanted == "auto" else (wanted,):
            if mode == "none":
                return mode, self._limiter(mode, False, path), size_flag
            if not shutil.which(mode):
                tried.append(f"{mode}: not installed")
                continue
            problem, private_userns = self._probe(mode, size_flag)
            if problem is None:
                return mode, self._limiter(mode, private_userns, path), size_flag
            tried.append(f"{mode}: {problem}")
        hint = ("install bubblewrap (scripts/setup_system_sandbox.sh) or set isolation: none to run the code "
                "without a sandbox (rlimits only)")
        raise ConfigError(f"{path}.isolation", f"{wanted!r} does not work here ({'; '.join(tried)}); {hint}")

    def _probe(self, mode: str, size_flag: str) -> tuple[str | None, bool]:
        """(None or the problem in one line, whether the sandbox has its own user namespace);
        once per process for a given interpreter, mode and set of hidden paths."""
        key = (mode, self.python, self.options.isolated_interpreter, self._mounts().ops)
        with _PROBED_LOCK:
            if key not in _PROBED:
                _PROBED[key] = self._probe_once(mode, size_flag)
            return _PROBED[key]

    def _probe_once(self, mode: str, size_flag: str) -> tuple[str | None, bool]:
        outcome = self._execute(_PROBE, [], (mode, None, size_flag), max(10.0, self.options.timeout_s))
        text = outcome.output.text(2000).strip()
        last = text.splitlines()[-1] if text else "no output"
        if outcome.returncode != 0 or outcome.killed:
            return f"probe failed (exit {outcome.returncode}): {last}", False
        if "WRITABLE" in text:
            return "the file system outside the working directory is writable", False
        return None, last != os.readlink("/proc/self/ns/user")

    def _limiter(self, mode: str, private_userns: bool, path: str) -> str | None:
        """How ``max_processes`` is enforced: ``rlimit``, ``cgroup`` or not at all (None)."""
        if self.options.max_processes == 0:
            return None
        if os.geteuid() == 0:
            if PidsCgroup.parent_dir() is not None:
                return "cgroup"
            why = "rlinf runs as root, to whom the kernel never applies RLIMIT_NPROC, and no pids cgroup is writable"
        elif mode != "none" and private_userns and _kernel() >= (5, 14):
            return "rlimit"
        elif mode != "none" and private_userns:
            why = f"Linux {_kernel()[0]}.{_kernel()[1]} counts RLIMIT_NPROC per user, not per user namespace (5.14+)"
        else:
            why = "RLIMIT_NPROC would count all of this user's processes (no user namespace of its own)"
        if mode == "none":
            return None  # documented: isolation none enforces no process limit here
        raise ConfigError(f"{path}.max_processes", f"cannot be enforced: {why}; set max_processes: 0 to run "
                          "without a process limit (docs/tools_sandbox.md)")

    # ------------------------------------------------------------------ calls

    def call(self, arguments: dict, session: ToolSession) -> ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str):
            return ToolResult("Error: python: argument 'code' must be a string.", "error")
        resolved = self._resolve()
        cells = session.state.setdefault(self.name, []) if self.options.keep_state else []
        outcome = self._execute(code, list(cells), resolved, self.options.timeout_s)
        result = self._result(outcome, resolved[0], len(cells))
        if self.options.keep_state and result.status == "ok":
            cells.append(code)
        return result

    def _job(self, code: str, replay: list[str], mode: str, limiter: str | None, work: str) -> dict:
        o = self.options
        processes = o.max_processes + _OVERHEAD[(limiter, mode)] if limiter == "rlimit" else 0
        return {"code": code, "replay": replay, "mode": mode, "work": work,
                "root": os.path.join(os.path.dirname(work), "root"),
                "mounts": list(self._mounts().ops) if mode == "unshare" else [],  # bwrap gets them as flags
                "dir_bytes": o.private_dir_mb << 20, "ro_method": _RO_METHOD,
                "limits": {"memory_bytes": o.memory_mb << 20, "cpu_s": o.cpu_seconds,
                           "file_bytes": o.max_file_mb << 20, "processes": processes}}

    def _argv(self, mode: str, size_flag: str, job_path: str, work: str) -> list[str]:
        # under bwrap the boot file is mounted next to the job: its own folder (rlinf's) stays hidden
        boot = os.path.join(os.path.dirname(work), os.path.basename(_BOOT)) if mode == "bwrap" else _BOOT
        inner = [os.path.abspath(shutil.which(self.python) or self.python),
                 *(["-I"] if self.options.isolated_interpreter else []), boot, job_path]
        if mode == "none":
            return inner
        if mode == "unshare":
            return [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--net", "--pid", "--fork",
                    "--mount-proc", "--ipc", "--uts", "--kill-child", "--", *inner]

        def tmpfs(dest: str, size: int) -> list[str]:
            return [size_flag, str(size), "--tmpfs", dest] if size_flag else ["--tmpfs", dest]
        args = [shutil.which("bwrap") or "bwrap"]
        hidden = []
        for op in self._mounts().ops:
            if op[0] == "bind":
                args += ["--ro-bind", op[1], op[2]]
            elif op[0] == "symlink":
                args += ["--symlink", op[1], op[2]]
            else:
                args += tmpfs(op[1], 1 << 20)
                hidden.append(op[1])
        size = self.options.private_dir_mb << 20
        args += ["--dev", "/dev", "--proc", "/proc", "--ro-bind", job_path, job_path, "--ro-bind", _BOOT, boot,
                 *tmpfs(work, size), *tmpfs("/dev/shm", size)]
        for p in [*hidden, "/"]:
            args += ["--remount-ro", p]
        return [*args, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                "--chdir", work, "--", *inner]

    def _env(self, work: str) -> dict[str, str]:
        """Built from nothing (no variable of the trainer's reaches the cell): the interpreter's
        folder and the system's on PATH, HOME and TMPDIR the working directory, UTF-8, one thread
        per numeric library."""
        folder = os.path.dirname(os.path.abspath(shutil.which(self.python) or self.python))
        env = {"PATH": f"{folder}:/usr/local/bin:/usr/bin:/bin", "HOME": work, "TMPDIR": work,
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "MPLBACKEND": "Agg",
               "MPLCONFIGDIR": work}
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
            env[var] = "1"
        return env

    def _execute(self, code: str, replay: list[str], resolved: tuple[str, str | None, str],
                 timeout_s: float) -> RunOutcome:
        mode, limiter, size_flag = resolved
        base = tempfile.mkdtemp(prefix="rlinf-py-")
        work = os.path.join(base, "work")
        cgroup = None
        proc_box: list[subprocess.Popen] = []

        def track(proc):
            proc_box.append(proc)
            with self._lock:
                self._running.add(proc)
        try:
            os.mkdir(work)
            if mode == "unshare":
                os.mkdir(os.path.join(base, "root"))  # the mount point of the sandbox's new root
            job_path = os.path.join(base, "job")
            with open(job_path, "wb") as f:
                marshal.dump(self._job(code, replay, mode, limiter, work), f, 2)  # version 2: any Python 3
            argv = self._argv(mode, size_flag, job_path, work)
            if limiter == "cgroup":
                cgroup = PidsCgroup(self.options.max_processes + _OVERHEAD[(limiter, mode)])
                argv = cgroup.wrap(argv)
            return run_capped(argv, env=self._env(work), cwd=work, timeout_s=timeout_s,
                              keep_bytes=4 * self.options.max_output_chars, cgroup=cgroup, on_start=track)
        finally:
            with self._lock:
                self._running.difference_update(proc_box)
            if cgroup is not None:
                cgroup.remove()
            shutil.rmtree(base, ignore_errors=True)

    def _result(self, outcome: RunOutcome, mode: str, replayed: int) -> ToolResult:
        o = self.options
        text = outcome.output.text(o.max_output_chars)
        rc = outcome.returncode
        sig = -rc if rc < 0 else rc - 128 if mode != "none" and rc > 128 else 0
        status, note = ("ok" if rc == 0 else "error"), ""
        if outcome.killed:
            status, note = "timeout", f"[killed: wall time {o.timeout_s:g} s]"
        elif sig == signal.SIGXCPU:
            status, note = "timeout", f"[killed: CPU time {o.cpu_seconds} s]"
        elif sig == signal.SIGKILL:
            note = f"[killed: SIGKILL (CPU time over {o.cpu_seconds + 1} s, or out of memory)]"
        elif sig:
            note = f"[killed: {signal.Signals(sig).name if sig in signal.valid_signals() else f'signal {sig}'}]"
        elif rc == _SETUP_FAILED:
            note = f"[the {mode} sandbox could not be set up]"
        elif rc not in (0, 1):
            note = f"[exit code {rc}]"
        if note:
            text = f"{text}{'' if not text or text.endswith(chr(10)) else chr(10)}{note}"
        elif not text and status == "ok":
            text = "[no output]"
        info = {"seconds": outcome.seconds, "output_bytes": float(outcome.total_bytes),
                "replayed_cells": float(replayed)}
        return ToolResult(text, status, info)

    def close(self) -> None:
        """Kill the process groups of calls still running."""
        with self._lock:
            running = list(self._running)
        for proc in running:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies beneath it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _kernel() -> tuple[int, int]:
    """(major, minor) of the running Linux kernel."""
    major, minor = (os.uname().release.split(".") + ["0"])[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def _bench(n: int) -> None:
    """Median wall time of ``n`` calls printing 1, per isolation mode that works here."""
    bare = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", "print(1)"], capture_output=True, check=True)
        bare.append(time.perf_counter() - t0)
    print(f"interpreter alone ({sys.executable} -I -c 'print(1)'): median {statistics.median(bare) * 1000:.0f} ms, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for mode in ("bwrap", "unshare", "none"):
        tool = PythonTool(PythonOptions(isolation=mode))
        try:
            tool.check()
        except ConfigError as exc:
            print(f"{mode}: unavailable ({exc})")
            continue
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            result = tool.call({"code": "print(1)"}, ToolSession())
            times.append(time.perf_counter() - t0)
            assert result.text == "1\n", result
        print(f"{mode}: median {statistics.median(times) * 1000:.0f} ms, min {min(times) * 1000:.0f} ms "
              f"({n} calls, limiter {tool._resolved[1]})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--bench"]:
        _bench(int(sys.argv[2]) if len(sys.argv) > 2 else 20)
    else:
        print(PythonTool().call({"code": sys.stdin.read()}, ToolSession()).text)
