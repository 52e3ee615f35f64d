"""Out of memory, named: what a worker tells the driver about its memory, and what a node shows
when one of its workers was killed.

Every group call's answer carries a :class:`MemorySample` of the worker (its peak RSS, its peak
CUDA allocation, the node's out-of-memory kill counters), so the driver still knows a worker's
last peak after the process is gone. A call that raised ``MemoryError``, a CUDA out-of-memory
error (``torch.OutOfMemoryError``, cuBLAS / cuDNN / NCCL allocation failures) or torch's CPU
allocator error answers with the node's (and GPU's) memory at that moment and any
:class:`MemoryHint` the worker attached (:func:`hint_on_oom`). A worker that died is examined on
its node (:func:`probe_node`): Ray's memory monitor says so itself; a kernel OOM kill is told by
the kernel log (``Out of memory: Killed process <pid>``) or by an ``oom_kill`` counter
(``/proc/vmstat``, the worker's cgroup) that rose since the worker's last answer. A worker killed
without that evidence is reported as died, never as out of memory.

Example:
    >>> node = NodeMemory(total=32 * GIB, available=2 * GIB)
    >>> node.describe(0)
    'node 0: 30.0/32.0 GiB used, 2.0 available'
    >>> memory_error_kind(MemoryError())
    'host'
    >>> memory_error_kind(RuntimeError("CUDA error: out of memory"))
    'device'
    >>> with hint_on_oom(lambda: {"actor.micro_batch_size": 8}, "lower actor.micro_batch_size"):
    ...     pass
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

GIB = 1024 ** 3
#: how often a worker re-reads the slower figures (kill counters, CUDA peak) on a normal answer
REFRESH_S = 2.0

_DEVICE_OOM = re.compile(
    r"CUDA out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
    r"|Failed to CUDA calloc|cudaErrorMemoryAllocation|NCCL.*(out of memory|Failed to allocate)"
    r"|HIP out of memory|XPU out of memory", re.S)
_HOST_OOM = re.compile(r"DefaultCPUAllocator: can't allocate memory|Cannot allocate memory|std::bad_alloc")


@dataclass(frozen=True)
class NodeMemory:
    """A node's memory: ``/proc/meminfo``, and the cgroup's limit when it is below the node's."""

    total: int
    available: int
    cgroup_limit: int | None = None
    cgroup_used: int | None = None

    def describe(self, node: int) -> str:
        """``node 0: 30.0/32.0 GiB used, 2.0 available`` (and the cgroup limit when there is one)."""
        text = f"node {node}: {_gib(self.total - self.available)}/{_gib(self.total)} GiB used, " \
               f"{_gib(self.available)} available"
        if self.cgroup_limit is not None:
            used = "" if self.cgroup_used is None else f"{_gib(self.cgroup_used)}/"
            text += f", cgroup {used}{_gib(self.cgroup_limit)} GiB"
        return text


@dataclass(frozen=True)
class MemoryHint:
    """What a worker's step was given, and what to lower: attached to an out-of-memory error by
    :func:`hint_on_oom`; the driver prints it in its one line."""

    sizes: tuple[tuple[str, str], ...]
    advice: str

    def describe(self) -> str:
        sizes = ", ".join(f"{key}={value}" if value != "" else key for key, value in self.sizes)
        return "; ".join(part for part in (sizes, self.advice) if part)


@dataclass(frozen=True)
class MemorySample:
    """A worker's memory as of one answer.

    Attributes:
        pid: the worker's process id.
        peak_rss: the process's peak resident memory (bytes; ``ru_maxrss``).
        peak_device: ``torch.cuda.max_memory_allocated()`` (bytes), None when CUDA is not in use.
        oom_kills: the node's out-of-memory kill counters the worker sees (source, count).
        oom: ``host`` / ``device`` when the call raised out of memory, else None.
        node: the node's memory when the call raised out of memory.
        device: ``(used, total)`` bytes of the worker's GPU when it raised out of GPU memory.
        hint: what the step was given and what to lower (:func:`hint_on_oom`).
    """

    pid: int
    peak_rss: int
    peak_device: int | None = None
    oom_kills: tuple[tuple[str, int], ...] = ()
    oom: str | None = None
    node: NodeMemory | None = None
    device: tuple[int, int] | None = None
    hint: MemoryHint | None = None

    def describe_peak(self) -> str:
        """``3.2 GiB RSS`` (``, 70.1 GiB CUDA`` on a GPU)."""
        text = f"{_gib(self.peak_rss)} GiB RSS"
        if self.peak_device is not None:
            text += f", {_gib(self.peak_device)} GiB CUDA"
        return text


@dataclass(frozen=True)
class NodeProbe:
    """What a node shows after one of its workers died (:func:`probe_node`).

    Attributes:
        memory: the node's memory now (None when unreadable).
        oom_kills: its out-of-memory kill counters now.
        kernel_log: the kernel log's line about an OOM kill of the worker's pid; ``""`` when the
            log was read and has none, None when it cannot be read.
    """

    memory: NodeMemory | None
    oom_kills: tuple[tuple[str, int], ...]
    kernel_log: str | None


# ---- in the worker ----------------------------------------------------------------------------
_cache: dict[str, tuple[float, object]] = {}


def worker_memory(exc: BaseException | None = None) -> MemorySample:
    """This process's :class:`MemorySample` (after a call; ``exc``: what the call raised).

    Cheap on a normal answer (one ``getrusage``; the kill counters and the CUDA peak are re-read
    at most every :data:`REFRESH_S`), thorough after an out-of-memory error.
    """
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    kind = memory_error_kind(exc) if exc is not None else None
    fresh = kind is not None
    pid = os.getpid()
    try:
        kills = _cached("kills", fresh, oom_kill_counters)
        peak_device = _cached("device", fresh, _cuda_peak)
        if kind is None:
            return MemorySample(pid, peak_rss, peak_device, kills)
        node = read_node_memory()
        device = _cuda_used() if kind == "device" else None
        return MemorySample(pid, peak_rss, peak_device, kills, kind, node, device, find_hint(exc))
    except (OSError, MemoryError, ValueError):  # a sample must never fail the call it rides on
        return MemorySample(pid, peak_rss, oom=kind)


def _cached(key: str, fresh: bool, read: Callable[[], object]):
    now = time.monotonic()
    hit = _cache.get(key)
    if fresh or hit is None or now - hit[0] > REFRESH_S:
        hit = _cache[key] = (now, read())
    return hit[1]


def _cuda_peak() -> int | None:
    torch = sys.modules.get("torch")  # never import torch (or start CUDA) for a sample
    if torch is None or not torch.cuda.is_initialized():
        return None
    return int(torch.cuda.max_memory_allocated())


def _cuda_used() -> tuple[int, int] | None:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        free, total = torch.cuda.mem_get_info()
    except RuntimeError:  # the device may be in no state to answer
        return None
    return int(total - free), int(total)


def memory_error_kind(exc: BaseException | None) -> str | None:
    """``device`` (GPU), ``host`` or None: whether ``exc`` (or an exception it was raised from)
    is an out-of-memory error."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        name = type(exc).__name__
        text = str(exc)
        if name == "OutOfMemoryError" and type(exc).__module__.startswith("torch"):
            return "device"
        if _DEVICE_OOM.search(text):
            return "device"
        if isinstance(exc, MemoryError) or _HOST_OOM.search(text):
            return "host"
        exc = exc.__cause__ or exc.__context__
    return None


@contextlib.contextmanager
def hint_on_oom(sizes: Callable[[], dict], advice: str) -> Iterator[None]:
    """Attach a :class:`MemoryHint` to an out-of-memory error raised inside the block (the error
    itself is raised unchanged). ``sizes`` is called only then: ``{config key: value}``, a value
    of ``""`` prints the key alone."""
    try:
        yield
    except BaseException as exc:
        if memory_error_kind(exc) is not None and getattr(exc, "rlinf_memory_hint", None) is None:
            try:
                given = sizes()
            except Exception:  # noqa: BLE001 - a broken size reader must not hide the error
                given = {}
            try:
                exc.rlinf_memory_hint = MemoryHint(tuple((str(k), str(v)) for k, v in given.items()), advice)
            except AttributeError:  # an exception type that takes no attributes
                pass
        raise


def find_hint(exc: BaseException | None) -> MemoryHint | None:
    """The :class:`MemoryHint` on ``exc`` or an exception it was raised from."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        hint = getattr(exc, "rlinf_memory_hint", None)
        if isinstance(hint, MemoryHint):
            return hint
        exc = exc.__cause__ or exc.__context__
    return None


# ---- on a node -------------------------------------------------------------------------------
def read_node_memory(meminfo: str = "/proc/meminfo", cgroup_root: str = "/sys/fs/cgroup") -> NodeMemory:
    """This node's memory (``MemTotal`` / ``MemAvailable``; the cgroup's limit when lower)."""
    fields = {}
    with open(meminfo) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                fields[key] = int(rest.split()[0]) * 1024
    total, available = fields["MemTotal"], fields.get("MemAvailable", 0)
    limit, used = _cgroup_limit(cgroup_root)
    if limit is None or limit >= total:
        return NodeMemory(total, available)
    return NodeMemory(total, available, limit, used)


def _cgroup_limit(root: str) -> tuple[int | None, int | None]:
    for limit_file, used_file in (("memory.max", "memory.current"),
                                  ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        limit = _read_int(os.path.join(root, limit_file))
        if limit is not None:
            return limit, _read_int(os.path.join(root, used_file))
    return None, None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):  # absent, or "max"
        return None


def oom_kill_counters(cgroup_root: str = "/sys/fs/cgroup", proc: str = "/proc") -> tuple[tuple[str, int], ...]:
    """The out-of-memory kill counters this process can see: the node's (``/proc/vmstat``) and
    its memory cgroup's (v2 ``memory.events``, v1 ``memory.oom_control``)."""
    found = []
    vmstat = _counter(os.path.join(proc, "vmstat"), "oom_kill")
    if vmstat is not None:
        found.append(("/proc/vmstat", vmstat))
    for path in _cgroup_counter_files(cgroup_root, proc):
        count = _counter(path, "oom_kill")
        if count is not None:
            found.append((path, count))
    return tuple(found)


def _cgroup_counter_files(root: str, proc: str) -> list[str]:
    own = {"v2": "", "v1": ""}
    try:
        with open(os.path.join(proc, "self", "cgroup")) as f:
            for line in f:
                _, controllers, path = line.strip().split(":", 2)
                if controllers == "":
                    own["v2"] = path
                elif "memory" in controllers.split(","):
                    own["v1"] = path
    except (OSError, ValueError):
        pass
    files = []
    for base, name, path in ((root, "memory.events", own["v2"]),
                             (os.path.join(root, "memory"), "memory.oom_control", own["v1"])):
        specific = os.path.join(base, path.lstrip("/"), name)
        top = os.path.join(base, name)
        files.append(specific if os.path.exists(specific) else top)  # a namespaced mount shows "/"
    return [f for f in dict.fromkeys(files) if os.path.exists(f)]


def _counter(path: str, key: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def kernel_oom_line(pid: int, kmsg: str = "/dev/kmsg") -> str | None:
    """The kernel log's line saying the OOM killer killed ``pid``; ``""`` if it has none, None
    if the log cannot be read (no permission, no such device)."""
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    pattern = re.compile(rf"(Killed process {pid}\b|oom-kill:.*\bpid={pid}\b)")
    hit = ""
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:  # EPIPE: the ring buffer moved on under us; read on
                if exc.errno == 32:
                    continue
                return None if not hit else hit
            if not record:
                break
            for line in record.decode(errors="replace").splitlines():
                text = line.split(";", 1)[-1].strip()  # "<prio>,<seq>,<time>,<flags>;<message>"
                if not line.startswith(" ") and pattern.search(text):
                    hit = text
    finally:
        os.close(fd)
    return hit


def probe_node(pid: int | None) -> NodeProbe:
    """Run on the node of a dead worker (pid ``pid``): its memory, kill counters, kernel log."""
    try:
        memory = read_node_memory()
    except (OSError, KeyError, ValueError):
        memory = None
    return NodeProbe(memory, oom_kill_counters(), None if pid is None else kernel_oom_line(pid))


# ---- on the driver ---------------------------------------------------------------------------
#: what Ray's memory monitor says when it kills a worker
_RAY_MONITOR = re.compile(r"killed due to the node running low on memory|NODE_OUT_OF_MEMORY|memory monitor")
_RAY_MONITOR_FIGURES = re.compile(r"was ([\d.]+)GB used / ([\d.]+)GB limit")
#: an exit Ray did not ask for (a signal, a crash): worth looking for a kernel OOM kill
_UNEXPECTED_EXIT = re.compile(r"SYSTEM_ERROR|unexpectedly|connection error|SIGKILL|signal")


@dataclass(frozen=True)
class DeathVerdict:
    """Why a worker died, as far as its node can tell.

    Attributes:
        out_of_memory: killed for memory (Ray's memory monitor, or the kernel's OOM killer with
            evidence).
        cause: one phrase (``killed by Ray's memory monitor (...)``, ``killed by the kernel's OOM
            killer (...)``, or the exit Ray reported and what the node shows).
        node_memory: the node's memory as the probe read it (None: not probed or unreadable).
    """

    out_of_memory: bool
    cause: str
    node_memory: NodeMemory | None = None


def judge_death(ray_text: str, monitor_error: bool, last: MemorySample | None,
                probe: Callable[[int | None], NodeProbe | None]) -> DeathVerdict:
    """The :class:`DeathVerdict` for a worker Ray reports dead with ``ray_text``
    (``monitor_error``: Ray raised its own ``OutOfMemoryError``); ``last`` is the worker's last
    sample (its pid and kill counters), ``probe(pid)`` runs :func:`probe_node` on its node (None
    when the node cannot be reached)."""
    pid = last.pid if last is not None else _pid_in(ray_text)
    if monitor_error or _RAY_MONITOR.search(ray_text):
        figures = _RAY_MONITOR_FIGURES.search(ray_text)
        detail = f": node at {figures[1]}/{figures[2]} GB" if figures else ""
        found = probe(pid)
        return DeathVerdict(True, f"killed by Ray's memory monitor{detail}", found.memory if found else None)
    exit_detail = _exit_detail(ray_text)
    if not _UNEXPECTED_EXIT.search(ray_text):
        return DeathVerdict(False, exit_detail)
    found = probe(pid)
    if found is None:
        return DeathVerdict(False, f"{exit_detail}; its node could not be examined")
    if found.kernel_log:
        return DeathVerdict(True, f"killed by the kernel's OOM killer: '{found.kernel_log[:160]}'", found.memory)
    before = dict(last.oom_kills) if last is not None else {}
    rose = [(src, before[src], now) for src, now in found.oom_kills if src in before and now > before[src]]
    if rose:
        src, was, now = rose[0]
        return DeathVerdict(True, f"killed by the kernel's OOM killer: oom_kill in {src} rose from {was} to "
                                  f"{now} since its last answer", found.memory)
    evidence = "no OOM kill in the kernel log" if found.kernel_log == "" else "kernel log unreadable"
    counters = ", ".join(f"{src} oom_kill {n}" for src, n in found.oom_kills if src in before)
    return DeathVerdict(False, f"{exit_detail}; no sign of out of memory on its node ({evidence}"
                               f"{'; unchanged ' + counters if counters else ''})", found.memory)


def _pid_in(text: str) -> int | None:
    found = re.search(r"\bpid: (\d+)", text)
    return int(found[1]) if found else None


def _exit_detail(text: str) -> str:
    found = re.search(r"Worker exit type: (\S+) Worker exit detail: (.*?)(\. Some common causes|$)", text, re.S)
    if found:
        return f"its process exited ({found[1]}: {' '.join(found[2].split())})"
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "its process died"


def short_cause(error_line: str) -> str:
    """An out-of-memory exception's last line, shortened: torch's CUDA message to its first
    sentence and the size it tried to allocate."""
    line = " ".join(error_line.split())
    tried = re.search(r"Tried to allocate ([\d.]+ [KMGT]?i?B)", line)
    if tried and "CUDA out of memory" in line:
        head = line.split("CUDA out of memory", 1)[0]
        return f"{head}CUDA out of memory, tried to allocate {tried[1]}"
    return line if len(line) <= 200 else line[:197] + "..."


def _gib(n: int) -> str:
    return f"{n / GIB:.1f}"
