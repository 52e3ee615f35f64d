"""A measured profile from measured steps (issue 46), figure by figure on hand-made steps: the
warm-up step skipped, busy CPU seconds x units / samples, waiting and threads from wall vs CPU,
offload per simulated phase switch, sync, driver, memory and shardable from the recipe's estimate.
No run (the end-to-end runs: test_autoplace_advice.py, tests/toolkits/test_autoplace_measure.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from rlinf.runners.autoplace_profile import MeasuredRun, StepRecord, build_profile, switches_per_step
from rlinf.scheduler.autoplace import Loop, Stage, Workflow, parse_profile
from rlinf.scheduler.memory import GIB, Capacity, ComponentMemory, MemoryEstimate, MemoryItem
from rlinf.scheduler.placement import ClusterShape, plan_placement


class SizedRecipe:
    """A recipe's memory hook: rollout holds 1 GiB of weights on every rank, the actor's 2 GiB are
    sharded over its ranks (plus 1 GiB of activations)."""

    def memory_estimate(self, cfg, plan, capacity, start=None):
        n = plan.component("actor").world_size * len(plan.component("actor").processes[0].accelerators)
        return MemoryEstimate({
            "rollout": ComponentMemory("rollout", (MemoryItem("weights", GIB),)),
            "actor": ComponentMemory("actor", (MemoryItem("weights", 2 * GIB // n), MemoryItem("activations", GIB)))})


WF = Workflow(flow=(Stage("rollout"), Stage("actor", whole_batch=True)), trainer="actor", receivers=("rollout",),
              samples_per_step=10, external_waits=("rollout",))  # the rollout waits for tools
PLAN = plan_placement({"actor,rollout": "0-1"}, ClusterShape(1, 2))


def measured(steps, capacity=None, plan=PLAN):
    cfg = SimpleNamespace(cluster=SimpleNamespace(component_placement={"actor,rollout": "0-1"}, backend="ray"))
    run = MeasuredRun(SizedRecipe(), cfg, plan, ClusterShape(1, 2),
                      capacity or Capacity(None, 8 * GIB, "RAM", kind="cpu"), WF, steps, "test.yaml")
    return build_profile(run)


def step(scale=1.0):
    return StepRecord(wall_s=5.0 * scale, driver_cpu_s=0.05 * scale,
                      roles={"rollout": {0: [2.0 * scale, 1.4 * scale], 1: [1.5 * scale, 1.2 * scale]},
                             "actor": {0: [1.0 * scale, 2.0 * scale], 1: [0.9 * scale, 1.8 * scale]}},
                      sync_s=0.3 * scale, offload_s=0.8 * scale)


def test_only_roles_that_wait_outside_the_run_get_their_wall_minus_cpu():
    global WF
    saved, WF = WF, dataclasses.replace(WF, external_waits=())
    try:
        profile, _ = measured([step(), step()])
    finally:
        WF = saved
    assert "wait_s_per_step" not in profile["roles"]["rollout"]  # waiting for cores / ranks: simulated


def test_a_cpu_profile_from_measured_steps_figure_by_figure():
    profile, header = measured([step(10.0), step(), step()])  # the first (10x slower) is warm-up
    rollout, actor = profile["roles"]["rollout"], profile["roles"]["actor"]
    # rollout: CPU 1.4 s on its busiest process (wall 2.0: 0.6 s waiting), 2 processes, 10 samples
    assert rollout == {"seconds_per_sample": pytest.approx(0.28), "memory_gib": 1.0,
                       "wait_s_per_step": pytest.approx(0.6)}
    # actor: 2 CPU seconds per wall second -> 2 threads, busy = wall 1.0 s; weights shrink on 2 ranks
    assert actor == {"seconds_per_sample": pytest.approx(0.2), "memory_gib": 3.0, "shardable": True,
                     "threads_per_process": 2.0}
    # 0.8 s of offload/onload per step over 2 switches (rollout -> actor, actor -> rollout)
    assert switches_per_step(PLAN, WF, {"rollout": 1.0, "actor": 3.0}) == 2
    assert profile["offload_s"] == pytest.approx(0.4) and profile["weight_sync_s"] == pytest.approx(0.3)
    assert profile["driver_s_per_step"] == pytest.approx(0.05) and profile["samples_per_step"] == 10
    assert (profile["nodes"], profile["accelerators_per_node"], profile["accelerator_memory_gib"]) == (1, 2, 8.0)
    assert profile["cores_per_node"] >= 1
    assert parse_profile(profile).role("rollout").work_s(parse_profile(profile)) == pytest.approx(2.8)
    assert "from 2 training step(s) (step 1 of 3 skipped: warm-up) of test.yaml" in header[0]
    assert any("measured: 0.8 s of offload/onload calls per step over 2 phase switch(es)" in h for h in header)


def test_a_gpu_profile_counts_wall_seconds_per_accelerator_and_states_the_offload_it_assumes():
    gpu = Capacity(80 * GIB, 512 * GIB, "torch.cuda", kind="gpu")
    one = step()
    one.offload_s = 0.0  # nothing offloaded: the figure is assumed from memory
    profile, header = measured([one], capacity=gpu)  # one step: nothing skipped
    assert profile["roles"]["rollout"] == {"seconds_per_sample": pytest.approx(0.4), "memory_gib": 1.0}
    assert profile["roles"]["actor"]["seconds_per_sample"] == pytest.approx(0.2)
    assert "cores_per_node" not in profile and profile["accelerator_memory_gib"] == 80.0
    assert profile["offload_s"] == pytest.approx(2 * 3.0 / 12.0)
    assert "from 1 training step(s) of" in header[0] and any("assumed: no phase switch measured" in h for h in header)


def test_a_role_without_a_call_in_the_steps_and_no_steps_are_refused():
    lonely = StepRecord(1.0, 0.0, roles={"actor": {0: [1.0, 1.0]}})
    with pytest.raises(ValueError, match="role rollout finished no call within a measured step"):
        measured([lonely])
    with pytest.raises(ValueError, match="no training step was measured"):
        measured([])


def test_a_loop_switches_where_it_shares_devices_with_the_trainer():
    wf = Workflow(flow=(Loop(("env", "rollout"), 4), Stage("actor")), trainer="actor", receivers=("rollout",))
    apart = plan_placement({"env": 0, "rollout": 1, "actor": 2}, ClusterShape(1, 3))
    shared = plan_placement({"env,rollout,actor": "all"}, ClusterShape(1, 3))
    held = {"env": 1.0, "rollout": 1.0, "actor": 1.0}
    assert switches_per_step(apart, wf, held) == 0
    assert switches_per_step(shared, wf, held) == 2
    assert switches_per_step(shared, wf, {**held, "actor": 0.0}) == 0
