"""Out of memory, named: a worker that allocates past a limit, one killed by Ray's memory monitor or
by the kernel's OOM killer, and one SIGKILLed without memory evidence (reported as died, not as out
of memory); the driver's one line names the worker, its node's memory and its last peak."""

from __future__ import annotations

import os
import re
import resource
import sys
import time

import pytest
import ray.cloudpickle

from rlinf.runners.entry import one_line
from rlinf.scheduler import Worker, WorkerDiedError, WorkerError, WorkerGroup, plan_placement
from rlinf.scheduler.errors import OutOfMemoryError, OutOfMemoryKilledError, OutOfMemoryRaisedError
from rlinf.scheduler.group_call import GroupCall
from rlinf.scheduler.memory_report import (
    GIB,
    MemorySample,
    NodeMemory,
    NodeProbe,
    judge_death,
    kernel_oom_line,
    oom_kill_counters,
    probe_node,
    read_node_memory,
    worker_memory,
)
from rlinf.scheduler.ray_backend import _call_failed

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray

#: Ray's own message when its memory monitor killed a worker (Ray 2.60, shortened)
RAY_MONITOR_TEXT = (
    "1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 192.0.2.2, ID: "
    "5121) was 4.88GB used / 23.54GB limit (0.207319)\nOOM kill reason: Memory usage 5064478720B exceeded "
    "threshold of 5042618368B (19.9% of 25276514304B limit)\nRay killed 1 worker(s) based on the killing policy")
#: Ray's message for a worker that died by a signal (Ray 2.60)
RAY_SIGKILL_TEXT = (
    "The actor died unexpectedly before finishing this task.\n\tclass_name: A\n\tpid: 4242\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
    "detail: Worker unexpectedly exits with a connection error code 2. End of file. Some common causes "
    "include: (1) the process was killed by the OOM killer due to high memory usage, ...")


class Hog(Worker):
    def touch(self, mb):
        """Allocate (and free) ``mb`` MiB: the peak the driver should know."""
        block = bytearray(mb * 2**20)
        return len(block) // 2**20

    def grow_past_limit(self, headroom_mb):
        """Cap this process's address space at its current size + ``headroom_mb`` and allocate
        32 MiB blocks until that fails (the limit is lifted again before the error leaves)."""
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (size + headroom_mb * 2**20, hard))
        blocks = []
        try:
            while True:
                blocks.append(bytearray(32 * 2**20))
        finally:
            blocks.clear()
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

    def pid(self):
        return os.getpid()

    def sleep(self, s):
        time.sleep(s)
        return s


def _peak_gib(text: str) -> float:
    return float(re.search(r"last peak ([\d.]+) GiB RSS", text)[1])


@pytest.fixture(scope="module")
def hogs(ray_cluster):
    """Two workers on node 1, each having touched 300 MiB: the first test makes rank 1 run out of
    memory (it lives on), the last one kills both."""
    plan = plan_placement({"hog": "10-11"}, ray_cluster.shape)
    group = WorkerGroup.launch(ray_cluster, Hog, plan.component("hog"))
    assert group.touch(300).wait(timeout=60) == [300, 300]
    yield group
    group.shutdown()


def test_a_worker_past_its_memory_limit_is_named_with_node_figures_and_last_peak(hogs):
    with pytest.raises(OutOfMemoryRaisedError) as err:
        hogs.execute("grow_past_limit", 400, ranks=[1]).wait(timeout=60)
    exc = err.value
    assert isinstance(exc, WorkerError) and not isinstance(exc, WorkerDiedError)
    line = one_line(exc)
    assert line == str(exc) and "\n" not in line
    total = read_node_memory().total / GIB  # the fake cluster's nodes share this machine
    assert re.fullmatch(
        r"hog\[1\] on node 1 ran out of memory in grow_past_limit\(\) \(MemoryError; node 1: "
        rf"[\d.]+/{total:.1f} GiB used, [\d.]+ available(, cgroup .*)?; hog\[1\]'s last peak [\d.]+ GiB RSS\)",
        line), line
    # the peak covers the 300 MiB touched before and the blocks allocated under the limit
    assert _peak_gib(line) >= 0.3
    assert "MemoryError" in exc.remote_traceback  # the full traceback stays for error.log
    assert hogs.last_memory[0].peak_rss >= 300 * 2**20  # rank 0's sample came with touch()
    assert len(hogs.pid().wait(timeout=30)) == 2  # the process lives on


def test_ray_memory_monitor_kill_is_out_of_memory_with_rays_figures(ray_cluster):
    """What ``ray.get`` raises for a worker killed by Ray's memory monitor (its own
    ``OutOfMemoryError``) goes through the driver's path (a real monitor kill needs a Ray cluster
    started with a low ``memory_usage_threshold``: checked by hand, see docs/scheduler.md)."""
    plan = plan_placement({"monitored": "14"}, ray_cluster.shape)
    group = WorkerGroup(ray_cluster, plan.component("monitored"), "monitored", Hog, actors=[])  # no process
    group.last_memory[0] = MemorySample(pid=4242, peak_rss=3 * GIB)
    call = GroupCall(group, "update", [0], [None])

    def killed():  # what the Ray backend's result() raises for it
        raise _call_failed(ray.exceptions.OutOfMemoryError(RAY_MONITOR_TEXT))

    with pytest.raises(OutOfMemoryKilledError) as err:
        call._settle(0, killed)
    line = one_line(err.value)
    assert re.fullmatch(r"monitored\[0\] on node 1 ran out of memory in update\(\) \(killed by Ray's memory "
                        r"monitor: node at 4.88/23.54 GB; node 1: [\d.]+/[\d.]+ GiB used, [\d.]+ available"
                        r"(, cgroup .*)?; monitored\[0\]'s last peak 3.0 GiB RSS \(at its last answer\)\)", line), line
    assert isinstance(err.value, WorkerDiedError)


def test_sigkill_without_memory_evidence_is_died_and_with_evidence_is_out_of_memory(hogs):
    pids = hogs.pid().wait(timeout=30)
    call = hogs.execute("sleep", 60, ranks=[0])
    time.sleep(0.3)
    os.kill(pids[0], 9)
    with pytest.raises(WorkerDiedError) as err:
        call.wait(timeout=60)
    assert not isinstance(err.value, OutOfMemoryError)
    text = str(err.value)
    assert text.startswith("hog[0] on node 1 died during sleep(): its process exited (SYSTEM_ERROR")
    assert "no sign of out of memory on its node" in text and "ran out of memory" not in text

    # rank 1: the node's kernel log says the OOM killer took it (a real OOM kill cannot be
    # provoked here: the memory cgroup is read-only and sysrq would pick any Ray worker)
    real = hogs._probe

    def probe_with_oom_kill(node, pid):
        seen = real(node, pid)
        return NodeProbe(seen.memory, seen.oom_kills,
                         f"Out of memory: Killed process {pid} (ray::Hog) total-vm:9000000kB")

    hogs._probe = probe_with_oom_kill
    call = hogs.execute("sleep", 60, ranks=[1])
    time.sleep(0.3)
    os.kill(pids[1], 9)
    with pytest.raises(OutOfMemoryKilledError) as err:
        call.wait(timeout=60)
    line = one_line(err.value)
    assert re.fullmatch(
        r"hog\[1\] on node 1 ran out of memory in sleep\(\) \(killed by the kernel's OOM killer: "
        rf"'Out of memory: Killed process {pids[1]} \(ray::Hog\) total-vm:9000000kB'; node 1: [\d.]+/[\d.]+ "
        r"GiB used, [\d.]+ available(, cgroup .*)?; hog\[1\]'s last peak [\d.]+ GiB RSS \(at its last answer\)\)",
        line), line
    assert _peak_gib(line) >= 0.3
    # a liveness ping repeats the verdict, naming the call the worker was running
    with pytest.raises(OutOfMemoryKilledError, match=r"hog\[1\] .* in sleep\(\)"):
        hogs.execute("pid", ranks=[1]).wait(timeout=60)
    with pytest.raises(WorkerDiedError, match=r"hog\[0\] on node 1 died during sleep\(\)"):
        hogs.execute("pid", ranks=[0]).wait(timeout=60)


MONITOR_RUN = """
import time, psutil
from ray.cluster_utils import Cluster as RayTestCluster
from rlinf.runners.entry import one_line
from rlinf.scheduler import Cluster, Worker, WorkerGroup, plan_placement

class Hog(Worker):
    def touch(self, mb):
        return len(bytearray(mb * 2**20)) // 2**20

    def hog(self):
        blocks = []
        for _ in range(80):
            blocks.append(bytearray(100 * 2**20))
            time.sleep(0.05)

vm = psutil.virtual_memory()
threshold = (vm.total - vm.available + 1.5 * 2**30) / vm.total
fake = RayTestCluster(initialize_head=True, head_node_args={
    "num_cpus": 2, "num_gpus": 2, "labels": {"rlinf.io/node-rank": "0"},
    "_system_config": {"memory_usage_threshold": threshold, "memory_monitor_refresh_ms": 100}})
cluster = Cluster(num_nodes=1, address=fake.address)
group = WorkerGroup.launch(cluster, Hog, plan_placement({"actor": "0-1"}, cluster.shape).component("actor"))
group.touch(200).wait(60)
try:
    group.execute("hog", ranks=[1]).wait(120)
except Exception as exc:
    print("error:", type(exc).__name__, one_line(exc))
"""


@pytest.mark.skipif(os.environ.get("RLINF_OOM_MONITOR_TEST") != "1",
                    reason="starts its own Ray cluster with a low memory threshold (20-70 s): RLINF_OOM_MONITOR_TEST=1")
def test_a_real_ray_memory_monitor_kill_is_named():
    import subprocess

    out = subprocess.run([sys.executable, "-c", MONITOR_RUN], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "RAY_DEDUP_LOGS": "0"})
    line = next((x for x in out.stdout.splitlines() if x.startswith("error:")), out.stdout + out.stderr[-2000:])
    assert re.fullmatch(r"error: OutOfMemoryKilledError actor\[1\] on node 0 ran out of memory in hog\(\) "
                        r"\(killed by Ray's memory monitor: node at [\d.]+/[\d.]+ GB; node 0: [\d.]+/[\d.]+ GiB "
                        r"used, [\d.]+ available(, cgroup .*)?; actor\[1\]'s last peak 0.[2-9] GiB RSS "
                        r"\(at its last answer\)\)", line), line


# ---- the verdicts, without Ray ----------------------------------------------------------------
def _sample(kills=(("/proc/vmstat", 3),)):
    return MemorySample(pid=4242, peak_rss=5 * GIB, oom_kills=kills)


def _probe(kernel_log, kills=(("/proc/vmstat", 3),)):
    return lambda pid: NodeProbe(NodeMemory(total=32 * GIB, available=GIB // 2), kills, kernel_log)


def test_a_kill_counter_that_rose_is_evidence_of_the_kernel_oom_killer():
    verdict = judge_death(RAY_SIGKILL_TEXT, False, _sample(), _probe("", (("/proc/vmstat", 4),)))
    assert verdict.out_of_memory
    assert verdict.cause == "killed by the kernel's OOM killer: oom_kill in /proc/vmstat rose from 3 to 4 since " \
                            "its last answer"
    assert verdict.node_memory.describe(0) == "node 0: 31.5/32.0 GiB used, 0.5 available"


def test_a_kill_without_evidence_is_not_out_of_memory():
    verdict = judge_death(RAY_SIGKILL_TEXT, False, _sample(), _probe(""))
    assert not verdict.out_of_memory
    assert verdict.cause == ("its process exited (SYSTEM_ERROR: Worker unexpectedly exits with a connection error "
                             "code 2. End of file); no sign of out of memory on its node (no OOM kill in the "
                             "kernel log; unchanged /proc/vmstat oom_kill 3)")
    unreadable = judge_death(RAY_SIGKILL_TEXT, False, None, _probe(None))
    assert not unreadable.out_of_memory and "kernel log unreadable" in unreadable.cause
    gone = judge_death(RAY_SIGKILL_TEXT, False, _sample(), lambda pid: None)
    assert not gone.out_of_memory and gone.cause.endswith("its node could not be examined")


def test_an_intended_exit_is_not_examined():
    asked = []
    text = "The actor died because of ray.kill. Worker exit type: INTENDED_USER_EXIT Worker exit detail: ray.kill"
    verdict = judge_death(text, False, _sample(), lambda pid: asked.append(pid))
    assert not verdict.out_of_memory and asked == []
    assert verdict.cause == "its process exited (INTENDED_USER_EXIT: ray.kill)"


def test_the_kernel_log_is_matched_by_pid(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text("6,1,2,-;eth0: link up\n3,4,5,-;Out of memory: Killed process 4242 (ray::Actor) total-vm:1kB\n")
    assert kernel_oom_line(4242, str(log)) == "Out of memory: Killed process 4242 (ray::Actor) total-vm:1kB"
    assert kernel_oom_line(424, str(log)) == ""
    assert kernel_oom_line(4242, str(tmp_path / "absent")) is None


def test_node_figures_and_kill_counters_read_from_proc_and_cgroup_files(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:       33554432 kB\nMemFree: 1 kB\nMemAvailable:    1048576 kB\n")
    (tmp_path / "memory.max").write_text(f"{8 * GIB}\n")
    (tmp_path / "memory.current").write_text(f"{7 * GIB}\n")
    node = read_node_memory(str(tmp_path / "meminfo"), str(tmp_path))
    assert node.describe(2) == "node 2: 31.0/32.0 GiB used, 1.0 available, cgroup 7.0/8.0 GiB"
    (tmp_path / "vmstat").write_text("pgfault 10\noom_kill 7\n")
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "cgroup").write_text("0::/job\n")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    assert oom_kill_counters(str(tmp_path), str(tmp_path)) == (
        ("/proc/vmstat", 7), (str(tmp_path / "job" / "memory.events"), 2))


def test_a_sample_is_cheap_and_a_probe_reads_this_node():
    sample = worker_memory()
    assert sample.pid == os.getpid() and sample.peak_rss > 0 and sample.oom is None
    started = time.perf_counter()
    for _ in range(1000):
        worker_memory()
    assert (time.perf_counter() - started) / 1000 < 200e-6  # rides on every group call
    failed = worker_memory(MemoryError())
    assert failed.oom == "host" and failed.node is not None and failed.node.total > 0
    probe = probe_node(os.getpid())
    assert probe.memory.total == read_node_memory().total and probe.kernel_log in ("", None)


def test_a_survivor_noticing_an_out_of_memory_peer_names_the_peer_first():
    from rlinf.scheduler.errors import PeerDiedError

    dead = OutOfMemoryKilledError("actor[1]", 0, "update", "killed by Ray's memory monitor",
                                  memory="node 0: 23.0/23.5 GiB used, 0.5 available", peak="20.1 GiB RSS")
    survivor = WorkerError("actor[0]", 0, "update", "Traceback ...\nRuntimeError: Connection closed by peer\n")
    err = PeerDiedError(dead, survivor)
    assert str(err) == ("actor[1] on node 0 ran out of memory in update() (killed by Ray's memory monitor; node 0: "
                        "23.0/23.5 GiB used, 0.5 available; actor[1]'s last peak 20.1 GiB RSS); actor[0] noticed it "
                        "in update(): RuntimeError: Connection closed by peer")
    assert one_line(err) == str(err)
