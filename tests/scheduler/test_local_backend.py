"""``cluster.backend: local``: worker groups inside this process, no Ray.

Calls to one group run in order, calls to different groups overlap (a receiver issued before its
sender completes), channels / tensor links / pipes carry values in memory, errors name the worker,
and the worker code that runs is the code in this process (a patched method is reached, a tracer
installed here sees the worker's frame)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rlinf.engines.simulators.single import SerialBatchSim
from rlinf.envs.base import SimSpec, SingleEnv, SingleObs
from rlinf.scheduler import CallTimeoutError, Channel, Cluster, PipeLink, TensorLink, Worker, WorkerError, WorkerGroup
from rlinf.scheduler.channel import ChannelClosedError, ChannelTimeout
from rlinf.scheduler.config import ClusterConfig
from rlinf.scheduler.local.cluster import LocalCluster
from rlinf.utils.typed_config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


class Recorder(Worker):
    def __init__(self, tag="r"):
        self.tag = tag
        self.seen = []

    def record(self, i, delay=0.0):
        time.sleep(delay)
        self.seen.append(i)
        return i

    def history(self):
        return self.seen

    def whoami(self):
        return self.group_name, self.rank, self.world_size, self.accelerators, str(self.device)

    def boom(self):
        raise ValueError("no good")

    def mutate(self, batch):
        batch["x"] += 1
        return batch

    def sleep(self, s):
        time.sleep(s)
        return s

    def send(self, tensors):
        return self.send_tensors("weights", tensors)

    def produce(self, channel, n):
        for i in range(n):
            channel.put({"i": i, "t": torch.full((3,), float(i))}, key="obs")
        return n

    def serve(self, n):
        pipe = self.pipe("p", 0)
        for _ in range(n):
            pipe.send(pipe.recv(key="req") * 10, key="resp")
        return n

    def draws(self, seed=None):
        if seed is not None:
            torch.manual_seed(seed)
        return torch.rand(3).tolist()


class Receiver(Worker):
    def recv(self):
        return {k: v.tolist() for k, v in self.recv_tensors("weights").items()}

    def recv_stream(self):
        with self.recv_tensor_stream("weights") as stream:
            return [spec[0] for spec in stream.specs], {name: t.sum().item() for name, t in stream}

    def consume(self, channel, n):
        return [channel.get(key="obs", timeout=30)["t"].tolist() for _ in range(n)]

    def ask(self, n):
        pipe = self.pipe("p", 0)
        out = []
        for i in range(n):
            pipe.send(i, key="req")
            out.append(pipe.recv(key="resp", timeout=30))
        return out

    def link_path(self):
        return self._rlinf_link_path("weights")


class BadInit(Worker):
    def __init__(self):
        raise RuntimeError("cannot start")

    def noop(self):
        return None


@pytest.fixture
def local_cluster():
    """A local cluster of 3 logical accelerators; torch.distributed and the process environment
    are left as they were."""
    saved = dict(os.environ)
    cfg = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 3,
                                   "component_placement": {"a": 0, "b": 1, "c": 2}})
    cluster = Cluster.from_config(cfg)
    yield cluster, cfg.plan(cluster.shape)
    for group in cluster.live_groups():
        group.shutdown()
    os.environ.clear()
    os.environ.update(saved)
    from rlinf.scheduler.backend import forget_cluster

    forget_cluster(cluster)  # new channels of this process are no longer its


def test_from_config_gives_a_local_cluster_of_the_config_shape(local_cluster):
    cluster, plan = local_cluster
    assert isinstance(cluster, LocalCluster) and cluster.backend.in_process and cluster.backend.name == "local"
    assert cluster.shape.accelerators_per_node == 3 and cluster.shape.num_nodes == 1
    assert cluster.origin.startswith("local mode") and cluster.node(0).ip == "127.0.0.1"
    assert [c.world_size for c in plan.components.values()] == [1, 1, 1]


def test_workers_see_their_own_rank_group_and_accelerators(local_cluster):
    cluster, plan = local_cluster
    a = WorkerGroup.launch(cluster, Recorder, plan.component("a"))
    c = WorkerGroup.launch(cluster, Recorder, plan.component("c"), name="other")
    assert a.whoami().wait(timeout=30) == [("a", 0, 1, (0,), "cpu")]
    assert c.whoami().wait(timeout=30) == [("other", 0, 1, (2,), "cpu")]
    assert "RLINF_GROUP_NAME" not in os.environ  # per instance, not the process's
    a.check_alive(timeout=5)


def test_one_groups_calls_run_in_order(local_cluster):
    cluster, plan = local_cluster
    a = WorkerGroup.launch(cluster, Recorder, plan.component("a"))
    calls = [a.record(i, 0.02 if i % 2 == 0 else 0.0) for i in range(8)]
    assert [c.wait(timeout=30) for c in calls] == [[i] for i in range(8)]
    assert a.history().wait(timeout=30) == [list(range(8))]
    assert calls[0].elapsed[0] >= 0.02 and calls[0].wall_time is not None


def test_arguments_and_results_are_copies_as_over_ray(local_cluster):
    cluster, plan = local_cluster
    a = WorkerGroup.launch(cluster, Recorder, plan.component("a"))
    batch = {"x": torch.zeros(2)}
    out = a.mutate(batch).wait(timeout=30)[0]
    assert batch["x"].tolist() == [0.0, 0.0] and out["x"].tolist() == [1.0, 1.0]


def test_a_receiver_issued_before_its_sender_completes(local_cluster):
    """Weight sync as the runners issue it: receive first, then send and wait, then wait the
    receive; a channel consumer before its producer; a pipe client before its server."""
    cluster, plan = local_cluster
    a = WorkerGroup.launch(cluster, Recorder, plan.component("a"))
    b = WorkerGroup.launch(cluster, Receiver, plan.component("b"))
    TensorLink.connect("weights", a, 0, b)
    assert b.link_path().wait(timeout=30) == ["in process"]
    weights = {"w": torch.arange(6.0).reshape(2, 3), "i": torch.tensor([1, 2], dtype=torch.int64)}
    receiving = b.recv()
    sent = a.send(weights).wait(timeout=30)
    assert sent == [6 * 4 + 2 * 8]
    assert receiving.wait(timeout=30) == [{"w": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], "i": [1, 2]}]
    streaming = b.recv_stream()
    a.send(weights).wait(timeout=30)
    assert streaming.wait(timeout=30) == [(["w", "i"], {"w": 15.0, "i": 3})]

    channel = Channel.create("local-test", maxsize=0)
    channel.declare_queue("obs", 2)  # the producer blocks on a full queue until the consumer reads
    consuming = b.consume(channel, 5)
    producing = a.produce(channel, 5)
    assert producing.wait(timeout=30) == [5]
    assert consuming.wait(timeout=30) == [[[float(i)] * 3 for i in range(5)]]
    assert channel.stats()["obs"]["total_got"] == 5
    channel.close()
    with pytest.raises(ChannelClosedError):
        channel.get(key="obs", timeout=1)

    PipeLink.connect("p", b, a, pairs=[(0, 0)])
    asking = b.ask(4)
    serving = a.serve(4)
    assert asking.wait(timeout=30) == [[0, 10, 20, 30]] and serving.wait(timeout=30) == [4]


def test_channel_in_the_driver_blocks_times_out_and_awaits(local_cluster):
    channel = Channel.create("local-driver", maxsize=1)
    assert type(channel).__name__ == "LocalChannel"
    channel.put("a", key="k")
    with pytest.raises(ChannelTimeout):
        channel.put("b", key="k", timeout=0.1)  # full: nothing added
    assert channel.qsize("k") == 1
    assert asyncio.run(channel.async_get(key="k", timeout=5)) == "a"
    with pytest.raises(ChannelTimeout):
        channel.get(key="k", timeout=0.1)
    assert Channel.connect("local-driver").qsize("k") == 0
    channel.close()


def test_a_raising_method_is_a_worker_error_naming_worker_and_method(local_cluster):
    cluster, plan = local_cluster
    a = WorkerGroup.launch(cluster, Recorder, plan.component("a"))
    with pytest.raises(WorkerError) as err:
        a.boom().wait(timeout=30)
    assert err.value.worker == "a[0]" and err.value.method == "boom"
    assert str(err.value).startswith("a[0] on node 0 raised in boom():")
    assert "ValueError: no good" in err.value.remote_traceback
    assert a.record(1).wait(timeout=30) == [1]  # the worker lives on, as a Ray actor does
    with pytest.raises(WorkerError, match=r"b\[0\] on node 0 raised in __init__\(\)"):
        WorkerGroup.launch(cluster, BadInit, plan.component("b"))


def test_wait_timeout_and_await(local_cluster):
    cluster, plan = local_cluster
    a = WorkerGroup.launch(cluster, Recorder, plan.component("a"))
    slow = a.sleep(0.5)
    with pytest.raises(CallTimeoutError, match=r"a.sleep\(\) still running on ranks \[0\]"):
        slow.wait(timeout=0.05)
    a.check_alive(timeout=1)  # pings answer while the worker is busy
    assert not slow.done()

    async def both():
        return await slow, await a.record(3)

    assert asyncio.run(both()) == ([0.5], [3])


def test_a_method_patched_by_the_test_is_reached(local_cluster, monkeypatch):
    """The worker runs this process's class: a patch made here is what the worker calls (a Ray
    worker process would import its own copy)."""
    cluster, plan = local_cluster
    reached = []

    def patched(self, i, delay=0.0):
        reached.append((threading.current_thread().name, i))
        return -i

    monkeypatch.setattr(Recorder, "record", patched)
    a = WorkerGroup.launch(cluster, Recorder, plan.component("a"))
    assert a.record(7).wait(timeout=30) == [-7]
    assert reached == [("rlinf-local a[0]#0", 7)]


def test_a_tracer_installed_in_the_driver_sees_the_worker_frame(local_cluster):
    """What ``python -m pdb`` relies on: the driver's trace function is installed in the worker
    threads of groups launched while it is set."""
    cluster, plan = local_cluster
    frames = []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "record":
            frames.append((frame.f_code.co_filename, threading.current_thread().name, frame.f_locals.get("i")))
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        a = WorkerGroup.launch(cluster, Recorder, plan.component("a"))
    finally:
        sys.settrace(previous)
    assert a.record(5).wait(timeout=30) == [5]
    assert (__file__, "rlinf-local a[0]#0", 5) in frames


def test_each_worker_draws_from_its_own_random_stream(local_cluster):
    """torch's generator is per worker, as per process: a worker's seeded stream continues however
    other groups draw, and an unseeded worker starts where a fresh process does."""
    cluster, plan = local_cluster
    a = WorkerGroup.launch(cluster, Recorder, plan.component("a"))
    b = WorkerGroup.launch(cluster, Recorder, plan.component("b"))
    first = a.draws(seed=0).wait(timeout=30)[0]
    fresh = b.draws().wait(timeout=30)[0]
    second = a.draws().wait(timeout=30)[0]
    gen = torch.Generator().manual_seed(0)
    assert first == torch.rand(3, generator=gen).tolist() and second == torch.rand(3, generator=gen).tolist()
    assert fresh == torch.rand(3, generator=torch.Generator().manual_seed(67280421310721)).tolist()


class SeedsTheGlobalGenerator(SingleEnv):
    """Resets as ManiSkill does: seed torch's process-wide generator inside ``fork_rng``, then
    draw the initial state from it (a pause between, where another thread's call may start)."""

    def spec(self):
        return SimSpec(np.zeros(1, np.float32), np.ones(1, np.float32), 5)

    def reset(self, state_id):
        with torch.random.fork_rng():
            torch.manual_seed(state_id)
            time.sleep(0.002)
            return SingleObs(state=torch.rand(3).numpy())

    def step(self, action):
        raise NotImplementedError

    def render(self):
        raise NotImplementedError


class Resetter(Worker):
    def resets(self, n):
        sim = SerialBatchSim([SeedsTheGlobalGenerator()])
        return [sim.reset(np.array([0]), np.array([7])).states[0].tolist() for _ in range(n)]


def test_an_in_process_simulators_seeded_reset_is_not_cut_by_another_groups_calls(local_cluster):
    """Each call of group b swaps b's generator states in and out of the process; a simulator
    reset in group a seeds the process-wide generator and draws from it. The swaps wait for the
    reset (rlinf.utils.global_random), so the 60 resets of state 7 give one initial state. (A
    worker drawing from the process-wide generator at that moment is not covered: the module says
    so.)"""
    cluster, plan = local_cluster
    a = WorkerGroup.launch(cluster, Resetter, plan.component("a"))
    b = WorkerGroup.launch(cluster, Recorder, plan.component("b"))
    resets = a.resets(60)
    stop = time.monotonic() + 30
    while not resets.done() and time.monotonic() < stop:
        b.record(0).wait(timeout=30)  # draws nothing: only the swaps at its start and end
    states = resets.wait(timeout=30)[0]
    assert states == [torch.rand(3, generator=torch.Generator().manual_seed(7)).tolist()] * 60


def test_shutdown_closes_pipes_and_refuses_calls(local_cluster):
    cluster, plan = local_cluster
    a = WorkerGroup.launch(cluster, Recorder, plan.component("a"))
    b = WorkerGroup.launch(cluster, Receiver, plan.component("b"))
    PipeLink.connect("p", b, a, pairs=[(0, 0)])
    asking = b.ask(1)
    a.shutdown()
    with pytest.raises(WorkerError, match="PipeClosedError"):
        asking.wait(timeout=30)
    assert a.actors == []


def test_config_backend_and_groups_folded_to_one_process():
    with pytest.raises(ConfigError) as err:
        ClusterConfig.from_dict({"backend": "lokal", "component_placement": {"a": 0}})
    assert str(err.value) == "cluster.backend: 'lokal' is not allowed; expected one of 'ray', 'local'"
    # a group on several processes is one process holding their accelerators; the modes stay
    cfg = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 3,
                                   "component_placement": {"actor": "0-1", "rollout,reward": 2}})
    plan = cfg.plan()
    assert {n: (c.world_size, c.processes[0].accelerators) for n, c in plan.components.items()} == {
        "actor": (1, (0, 1)), "rollout": (1, (2,)), "reward": (1, (2,))}
    assert plan.mode("actor", "rollout").value == "disaggregated"
    assert plan.mode("rollout", "reward").value == "collocated"
    two_on_one = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 1,
                                          "component_placement": {"env": "0:0-1", "actor": 0}}).plan()
    assert two_on_one.component("env").processes[0].accelerators == (0,)
    assert two_on_one.mode("env", "actor").value == "collocated"
    with pytest.raises(ConfigError, match=r"^cluster.num_nodes: 2, but local mode"):
        ClusterConfig.from_dict({"backend": "local", "num_nodes": 2, "component_placement": {"a": 0}})
    assert ClusterConfig.from_dict({"component_placement": {"a": 0}}).backend == "ray"


def test_check_before_start_refuses_without_ray(monkeypatch):
    from rlinf.scheduler.cluster import check_cluster_before_start

    monkeypatch.setattr("rlinf.scheduler.cluster.local_gpu_count", lambda: 0)
    ok = ClusterConfig.from_dict({"backend": "local", "component_placement": {"a,b": "all"}})
    check_cluster_before_start(ok)  # null accelerators_per_node on CPU: one slot, one process each
    two = ClusterConfig.from_dict({"backend": "local", "component_placement": {"a": "0:0-1"}})
    check_cluster_before_start(two)  # two processes on one slot: folded to one
    with pytest.raises(ConfigError, match=r"^cluster.num_nodes: 2, but local mode"):
        check_cluster_before_start(ClusterConfig.from_dict({"backend": "local", "num_nodes": 2,
                                                            "accelerators_per_node": 1,
                                                            "component_placement": {"a": 0}}))


def test_a_local_run_never_imports_ray():
    script = textwrap.dedent("""
        import sys
        from rlinf.scheduler import Cluster, Worker, WorkerGroup, Channel, TensorLink
        from rlinf.scheduler.config import ClusterConfig
        class W(Worker):
            def f(self, ch):
                ch.put(self.group_name, key="k")
                return self.rank
        cfg = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 1,
                                       "component_placement": {"w,v": 0}})
        cluster = Cluster.from_config(cfg)
        plan = cfg.plan(cluster.shape)
        w = WorkerGroup.launch(cluster, W, plan.component("w"))
        v = WorkerGroup.launch(cluster, W, plan.component("v"))
        TensorLink.connect("l", w, 0, v)
        ch = Channel.create("c")
        assert w.f(ch).wait(timeout=30) == [0] and ch.get(key="k", timeout=5) == "w"
        print("ray imported:", "ray" in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ray imported: False" in proc.stdout
