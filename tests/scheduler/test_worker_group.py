"""WorkerGroup on a real fake multi-node Ray cluster: placement, env, calls, errors, death."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest
import ray.cloudpickle

from rlinf.scheduler import (
    CallTimeoutError,
    Cluster,
    ClusterError,
    Worker,
    WorkerDiedError,
    WorkerError,
    WorkerGroup,
    plan_placement,
)

# Workers cannot import tests/: ship this module's classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray


class Probe(Worker):
    def __init__(self, tag="x"):
        self.tag = tag

    def where(self):
        import ray

        env = {k: os.environ.get(k) for k in
               ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "CUDA_VISIBLE_DEVICES")}
        import torch

        return {"rank": self.rank, "node": self.node_rank, "accelerators": self.accelerators,
                "node_id": ray.get_runtime_context().get_node_id(), "env": env, "tag": self.tag,
                "pid": os.getpid(), "device": str(self.device), "threads": torch.get_num_threads()}

    def fail(self, message):
        raise ValueError(message)

    def sleep(self, seconds):
        time.sleep(seconds)
        return self.rank

    def spin(self, cpu_seconds):
        """Busy until this process has used ``cpu_seconds`` of CPU (not wall: on a loaded machine
        a wall-time spin gets only part of a core)."""
        end = time.process_time() + cpu_seconds
        while time.process_time() < end:
            pass
        return self.rank

    def allreduce_rank(self):
        import torch
        import torch.distributed as dist

        self.init_process_group()
        t = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(t)
        return t.item()


class BrokenInit(Worker):
    def __init__(self):
        raise RuntimeError("cannot load the model")

    def noop(self):
        return None


@pytest.fixture(scope="module")
def spread(ray_cluster):
    """Rank 0 holds accelerators 0-1 of node 0; rank 1 is global rank 14 (node 1, local 6);
    rank 2 is global rank 15 (node 1, local 7)."""
    plan = plan_placement({"probe": "0-1:0,14:1,15:2"}, ray_cluster.shape)
    group = WorkerGroup.launch(ray_cluster, Probe, plan.component("probe"), kwargs={"tag": "t"})
    yield group
    group.shutdown()


def test_node_spanning_rank_runs_on_node_1_and_sees_local_device_6(ray_cluster, spread):
    info = spread.where().wait(timeout=60)
    assert [i["rank"] for i in info] == [0, 1, 2]
    assert info[1]["node"] == 1 and info[1]["accelerators"] == (6,)
    assert info[1]["node_id"] == ray_cluster.node(1).node_id
    assert info[0]["node_id"] == ray_cluster.node(0).node_id
    assert info[1]["env"]["CUDA_VISIBLE_DEVICES"] == "6"
    # a process with several accelerators sees all of them
    assert info[0]["accelerators"] == (0, 1) and info[0]["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    # Logical GPUs only: no CUDA here, so the worker computes on the CPU.
    assert info[1]["device"] == "cpu"
    assert info[0]["tag"] == "t"
    # torch threads: the slots' share of the node's cores (2 CPUs, 8 slots per fake node: 1 each)
    for i in info:
        node = ray_cluster.node(i["node"])
        if "OMP_NUM_THREADS" not in os.environ:
            assert i["threads"] == node.threads_for(len(i["accelerators"])) == 1


def test_a_worker_gets_its_slots_share_of_the_cores():
    from rlinf.scheduler.cluster import NodeInfo

    cpu_node = NodeInfo(0, "n", "127.0.0.1", num_accelerators=4, has_gpus=False, is_head=True, num_cpus=2)
    assert [cpu_node.threads_for(k) for k in (0, 1, 2, 4)] == [1, 1, 1, 2]
    gpu_node = NodeInfo(0, "n", "127.0.0.1", num_accelerators=8, has_gpus=True, is_head=True, num_cpus=128)
    assert [gpu_node.threads_for(k) for k in (1, 2, 8)] == [16, 32, 128]


def test_distributed_env_is_complete_and_torch_distributed_works(spread):
    info = spread.where().wait(timeout=60)
    for i in info:
        assert i["env"]["RANK"] == str(i["rank"])
        assert i["env"]["WORLD_SIZE"] == "3"
    assert [(i["env"]["LOCAL_RANK"], i["env"]["LOCAL_WORLD_SIZE"]) for i in info] == [
        ("0", "1"), ("0", "2"), ("1", "2")]
    assert len({i["env"]["MASTER_PORT"] for i in info}) == 1
    assert len({i["env"]["MASTER_ADDR"] for i in info}) == 1
    # gloo all-reduce across the two nodes: rank r contributes r + 1 -> 1 + 2 + 3
    out = spread.execute("allreduce_rank").wait(timeout=120)
    assert out == [6.0, 6.0, 6.0]


def test_per_rank_arguments_results_and_elapsed(spread):
    spread.call_stats.reset()
    call = spread.execute("sleep", 0.2, ranks=[1])
    assert call.wait(timeout=30) == [1]
    assert call.results_by_rank == {1: 1}
    assert call.elapsed[1] >= 0.2
    assert call.wall_time >= call.elapsed[1]
    # the worker process's CPU time: sleeping costs none, spinning costs (nearly) its wall time
    assert call.cpu_time[1] < 0.1
    spun = spread.execute("spin", 0.3, ranks=[0])
    spun.wait(timeout=30)
    assert 0.3 <= spun.cpu_time[0] <= spun.elapsed[0] + 0.05
    stats = spread.call_stats.take()
    assert set(stats) == {"sleep", "spin"} and list(stats["sleep"].ranks) == [1]
    assert stats["spin"].calls == 1 and stats["spin"].cpu_s == spun.cpu_time[0]


def test_async_await(spread):
    async def main():
        return await spread.sleep(0.05)

    assert asyncio.run(main()) == [0, 1, 2]


def test_exception_names_worker_rank_node_and_remote_traceback(spread):
    with pytest.raises(WorkerError) as err:
        spread.execute("fail", "disk is full", ranks=[1]).wait(timeout=30)
    text = str(err.value)
    assert err.value.worker == "probe[1]" and err.value.node == 1
    assert "probe[1] on node 1 raised in fail()" in text
    assert "ValueError: disk is full" in text
    assert "in fail" in text  # the remote frame, not only the message
    assert "_rlinf_call" not in text


def test_timeout_names_ranks_still_running(spread):
    with pytest.raises(CallTimeoutError) as err:
        spread.sleep(3).wait(timeout=0.3)
    assert err.value.pending_ranks == [0, 1, 2]
    spread.sleep(0).wait(timeout=30)  # the group is usable afterwards


def test_unknown_method_fails_before_any_call(spread):
    with pytest.raises(AttributeError, match="no public method 'nope'"):
        spread.nope()
    with pytest.raises(IndexError, match="ranks 0-2"):
        spread.execute("sleep", 0, ranks=[5])
    with pytest.raises(ValueError, match=r"name a rank twice"):
        spread.execute("sleep", 0, ranks=[0, 0])


def test_check_alive_answers_while_workers_are_busy(spread):
    busy = spread.sleep(3)
    spread.check_alive(timeout=2)  # would time out if the ping queued behind sleep()
    assert busy.wait(timeout=30) == [0, 1, 2]


def test_failed_init_is_reported_at_launch(ray_cluster):
    plan = plan_placement({"broken": "3"}, ray_cluster.shape)
    with pytest.raises((WorkerError, WorkerDiedError)) as err:
        WorkerGroup.launch(ray_cluster, BrokenInit, plan.component("broken"), start_timeout=60)
    assert "broken[0]" in str(err.value)
    assert "cannot load the model" in str(err.value)
    assert "__init__" in str(err.value)


class HalfBroken(Worker):
    def __init__(self, pid_dir):
        pid_file = f"{pid_dir}/rank0.pid"
        if self.rank == 0:
            with open(pid_file + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(pid_file + ".tmp", pid_file)
            return
        deadline = time.monotonic() + 60  # fail only once rank 0 is up
        while not os.path.exists(pid_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError("rank 1 cannot start")


def test_failed_launch_kills_the_ranks_that_did_start(ray_cluster, tmp_path):
    plan = plan_placement({"half": "4-5"}, ray_cluster.shape)
    with pytest.raises(WorkerError, match=r"half\[1\](.|\n)*rank 1 cannot start"):
        WorkerGroup.launch(ray_cluster, HalfBroken, plan.component("half"),
                           args=(str(tmp_path),), start_timeout=60)
    pid = int((tmp_path / "rank0.pid").read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)  # still running?
        except ProcessLookupError:
            return
        time.sleep(0.2)
    pytest.fail(f"rank 0 (pid {pid}) of the failed group is still running")


def test_killed_worker_is_reported_as_died_not_a_hang(ray_cluster):
    plan = plan_placement({"victim": "8-9"}, ray_cluster.shape)
    group = WorkerGroup.launch(ray_cluster, Probe, plan.component("victim"))
    pids = [i["pid"] for i in group.where().wait(timeout=60)]
    call = group.sleep(60)
    time.sleep(0.5)
    os.kill(pids[1], 9)
    with pytest.raises(WorkerDiedError) as err:
        call.wait(timeout=30)  # a hang would surface as CallTimeoutError instead
    assert err.value.worker == "victim[1]" and err.value.node == 1
    with pytest.raises(WorkerDiedError):
        group.check_alive(timeout=30)
    group.shutdown()


def test_non_worker_class_is_rejected(ray_cluster):
    plan = plan_placement({"x": "0"}, ray_cluster.shape)
    with pytest.raises(TypeError, match="must subclass"):
        WorkerGroup.launch(ray_cluster, dict, plan.component("x"))


def test_cluster_with_too_few_nodes_is_an_error(ray_cluster):
    with pytest.raises(ClusterError, match="cluster.num_nodes=3 but the Ray cluster has 2"):
        Cluster(num_nodes=3)


def test_master_ports_are_never_handed_out_twice_and_sit_below_the_ephemeral_range(ray_cluster):
    """Groups started together (and restarted after a kill) each get their own rendezvous port, taken
    from below ``ip_local_port_range`` so outgoing connections cannot grab it before ``listen``."""
    from rlinf.scheduler.nodes import bind_free_port, ephemeral_range
    from rlinf.scheduler.ray_backend import free_port_on

    node = ray_cluster.node(0)
    ports = [free_port_on(node) for _ in range(30)]
    assert len(set(ports)) == 30
    low, _ = ephemeral_range()
    assert all(1024 <= p < low for p in ports)
    taken = list(range(max(1024, low - 12000), low - 1))  # all but one candidate avoided
    assert bind_free_port(taken) == low - 1
