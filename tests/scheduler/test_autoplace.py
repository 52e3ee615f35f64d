"""The placement planner's pure parts (issue 46): the event simulation on hand-computed steps, the
memory check, the candidates and the profile's refusals."""

from __future__ import annotations

import pytest

from rlinf.scheduler.autoplace import (
    Loop,
    ProfileError,
    Stage,
    Workflow,
    enumerate_candidates,
    parse_profile,
    peak_memory,
    plan_search,
    predict,
)
from rlinf.scheduler.autoplace.events import Task, simulate
from rlinf.scheduler.placement import ClusterShape, plan_placement

TWO = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor", receivers=("rollout",), chunks=2,
               lookahead=(0, 1))


def profile(**over):
    raw = {"accelerator_memory_gib": 80, "samples_per_step": 1, "offload_s": 0.0, "weight_sync_s": 0.5,
           "roles": {"rollout": {"seconds_per_sample": 2.0, "memory_gib": 10},
                     "actor": {"seconds_per_sample": 1.0, "memory_gib": 10}}}
    raw.update(over)
    return parse_profile(raw)


def step(placement: dict, n: int, prof=None, wf=TWO, **knobs) -> float:
    return predict(plan_placement(placement, ClusterShape(1, n)), prof or profile(), wf, **knobs).step_s


# ---- the simulation, by hand ------------------------------------------------------------------------

def test_collocated_roles_take_turns_and_pay_two_phase_switches():
    # rollout 2 + switch 1 + actor 1 + sync 0.5 + switch back 1
    assert step({"actor,rollout": "0"}, 1, profile(offload_s=1.0)) == pytest.approx(5.5)
    assert step({"actor,rollout": "0"}, 1) == pytest.approx(3.5)  # offload free: 2 + 1 + 0.5
    assert step({"actor,rollout": "0"}, 1, profile(driver_s_per_step=0.25)) == pytest.approx(3.75)


def test_a_stage_without_devices_between_collocated_roles_does_not_hide_their_phase_switch():
    wf = Workflow(flow=(Stage("rollout"), Stage("reward"), Stage("actor")), trainer="actor", receivers=("rollout",),
                  chunks=2)
    prof = profile(offload_s=1.0, roles={"rollout": {"seconds_per_sample": 2.0, "memory_gib": 10},
                                         "reward": {"seconds_per_sample": 0.001, "memory_gib": 0, "accelerator": False},
                                         "actor": {"seconds_per_sample": 1.0, "memory_gib": 10}})
    # as without the reward: rollout 2 + switch 1 + actor 1 + sync 0.5 + switch back 1 (the reward
    # scores each piece as it comes, off the device)
    assert step({"actor,rollout": "0", "reward": "0"}, 1, prof, wf) == pytest.approx(5.5)


def test_disaggregated_roles_stream_pieces_and_lookahead_hides_the_trainer():
    # 2 pieces: rollout [0,1] [1,2]; actor [1,1.5] [2,2.5]; sync [2.5,3] holds both: 3.0 per step
    assert step({"rollout": "0", "actor": "1"}, 2) == pytest.approx(3.0)
    whole = Workflow(flow=(Stage("rollout"), Stage("actor", whole_batch=True)), trainer="actor",
                     receivers=("rollout",), chunks=2)
    assert step({"rollout": "0", "actor": "1"}, 2, wf=whole) == pytest.approx(3.5)  # 2 + 1 + 0.5: no overlap
    # lookahead 1: rollout waits only for the sync two steps back; it is busy 2 s + the 0.5 s sync
    assert step({"rollout": "0", "actor": "1"}, 2, lookahead=1) == pytest.approx(2.5)


def test_more_accelerators_divide_the_work_and_measured_sizes_bend_the_line():
    # rollout on 2 accelerators: 1 s; actor 1 s; pieces [0,.5],[.5,1] / [.5,1],[1,1.5]; sync -> 2.0
    assert step({"rollout": "0-1", "actor": "2"}, 3) == pytest.approx(2.0)
    bent = profile(roles={"rollout": {"seconds_per_sample": 2.0, "memory_gib": 10, "seconds_per_sample_at": {2: 1.6}},
                          "actor": {"seconds_per_sample": 1.0, "memory_gib": 10}})
    # rollout 1.6 s on 2: pieces [0,.8],[.8,1.6]; actor [.8,1.3],[1.6,2.1]; sync 2.1-2.6
    assert step({"rollout": "0-1", "actor": "2"}, 3, bent) == pytest.approx(2.6)


def test_shared_cores_slow_processes_that_run_at_once():
    # two slots on one core: apart, the rollout's second piece and the actor's first share the core
    cpu = profile(cores_per_node=1, weight_sync_s=0.0)
    # rollout [0,1]; then rollout piece 2 and actor piece 1 together at half speed: 1 s of rollout
    # work and 0.5 s of actor work -> both run [1,2] (actor done at 2), rollout alone [2,2.5];
    # actor piece 2 [2.5,3.0]
    assert step({"rollout": "0", "actor": "1"}, 2, cpu) == pytest.approx(3.0)
    assert step({"rollout": "0", "actor": "1"}, 2, profile(weight_sync_s=0.0)) == pytest.approx(2.5)


def test_events_share_cores_and_hold_devices():
    tasks = [Task("a", 2.0, ("d0",), {0: 1}), Task("b", 1.0, ("d1",), {0: 1}),
             Task("c", 1.0, ("d0",), {0: 1}, deps=("b",))]
    # a and b share one core: b ends at 2 (1 s of work at half speed), a has 1 s left, alone: ends at 3;
    # c waits for d0
    assert simulate(tasks, {0: 1}) == {"b": (0.0, 2.0), "a": (0.0, 3.0), "c": (3.0, 4.0)}
    with pytest.raises(ValueError, match="cycle"):
        simulate([Task("x", 1.0, deps=("y",)), Task("y", 1.0, deps=("x",))])


def test_a_pipelined_loop_overlaps_env_and_policy_groups():
    wf = Workflow(flow=(Loop(("env", "rollout"), iterations=2), Stage("actor")), trainer="actor",
                  receivers=("rollout",), chunks=1, pipeline_stages=(1, 2))
    prof = parse_profile({"accelerator_memory_gib": 80, "samples_per_step": 1, "offload_s": None, "weight_sync_s": 0.0,
                          "roles": {"env": {"seconds_per_sample": 1.0, "memory_gib": 1},
                                    "rollout": {"seconds_per_sample": 1.0, "memory_gib": 1},
                                    "actor": {"seconds_per_sample": 1.0, "memory_gib": 1}}})
    placement = {"env": "0", "rollout": "1", "actor": "2"}
    # one group: env .5, policy .5, env .5, policy .5 = 2, actor 1 -> 3
    assert step(placement, 3, prof, wf) == pytest.approx(3.0)
    # two groups of .25 each: env g0 [0,.25] g1 [.25,.5] g0 [.5,.75] g1 [.75,1]; policy g1 ends at 1.25
    assert step(placement, 3, prof, wf, pipeline_stages=2) == pytest.approx(2.25)


def test_a_role_that_waits_for_tools_delays_its_last_piece_without_holding_devices():
    wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor", receivers=("rollout",), chunks=1)
    prof = profile(roles={"rollout": {"seconds_per_sample": 2.0, "memory_gib": 10, "wait_s_per_step": 1.5},
                          "actor": {"seconds_per_sample": 1.0, "memory_gib": 10}})
    assert step({"rollout": "0", "actor": "1"}, 2, prof, wf) == pytest.approx(2 + 1.5 + 1 + 0.5)


# ---- memory --------------------------------------------------------------------------------------

def test_memory_shards_offloads_and_drops_what_does_not_fit():
    wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor", receivers=("rollout",))
    roles = {"rollout": {"seconds_per_sample": 1.0, "memory_gib": 30},
             "actor": {"seconds_per_sample": 1.0, "memory_gib": 100, "shardable": True}}
    plan = plan_placement({"actor,rollout": "0-3"}, ClusterShape(1, 4))
    off = parse_profile({"accelerator_memory_gib": 40, "offload_s": 1.0, "weight_sync_s": 0, "samples_per_step": 4,
                         "roles": roles})
    assert set(peak_memory(plan, off, wf).values()) == {30.0}  # max(30, 100 / 4)
    keep = parse_profile({"accelerator_memory_gib": 40, "offload_s": None, "weight_sync_s": 0, "samples_per_step": 4,
                          "roles": roles})
    assert set(peak_memory(plan, keep, wf).values()) == {55.0}  # 30 + 25, both resident
    result = plan_search(wf, keep, ClusterShape(1, 4), current={"actor,rollout": "0-3"})
    assert result.current.dropped.startswith("needs 55.0 GiB on node 0 accelerator 0, which has 40")
    assert all(r.peak_gib <= 40 for r in result.ranked) and result.dropped
    with pytest.raises(ProfileError, match=r"roles.rollout.memory_gib: 30 GiB does not fit one accelerator of 20"):
        plan_search(wf, parse_profile({"accelerator_memory_gib": 20, "offload_s": None, "weight_sync_s": 0,
                                       "samples_per_step": 4, "roles": roles}), ClusterShape(1, 4),
                    current={"actor,rollout": "0-3"})


# ---- candidates ----------------------------------------------------------------------------------

def test_candidates_cover_the_modes_and_turn_knobs_only_where_they_act():
    cands = enumerate_candidates(TWO, ClusterShape(1, 4), {})
    labels = {c.label() for c in cands}
    assert {"rollout,actor: 0-3", "actor: 2-3, rollout: 0-1", "actor: 0-3, rollout: 0-1",
            "actor: 2-3, rollout: 0-1; lookahead 1"} <= labels
    assert not any("lookahead" in c.label() and c.label().startswith("rollout,actor") for c in cands)
    assert not any("lookahead" in c.label() and "actor: 0-3" in c.label() for c in cands)  # hybrid shares
    big = enumerate_candidates(TWO, ClusterShape(8, 8), {})
    sizes = {c.placement.get("rollout") for c in big}
    assert "0-31" in sizes and "0-4" not in sizes  # powers of two and whole nodes on 64


def test_the_planner_ranks_by_predicted_step_and_states_the_speedup():
    prof = profile(samples_per_step=8, offload_s=3.0)
    result = plan_search(TWO, prof, ClusterShape(1, 2), current={"actor,rollout": "0-1"})
    steps = [r.prediction.step_s for r in result.ranked]
    assert steps == sorted(steps)
    best = result.ranked[0]
    assert best.mode == "disaggregated" and best.candidate.lookahead == 1
    assert result.speedup(best) == pytest.approx(result.current.prediction.step_s / best.prediction.step_s)
    assert best.prediction.bottleneck == "rollout"


# ---- the profile's refusals ------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    (lambda p: p.pop("weight_sync_s"), "profile.weight_sync_s: missing (required)"),
    (lambda p: p.pop("offload_s"), "profile.offload_s: missing (required)"),
    (lambda p: p["roles"]["actor"].pop("memory_gib"), "profile.roles.actor.memory_gib: missing (required)"),
    (lambda p: p["roles"]["actor"].update(seconds_per_sample=-1.0),
     "profile.roles.actor.seconds_per_sample: must be a finite number > 0, got -1.0"),
    (lambda p: p["roles"]["actor"].update(speed=2), "profile.roles.actor.speed: unknown key"),
    (lambda p: p.update(nodes=0), "profile.nodes: must be >= 1, got 0"),
    (lambda p: p.update(source="by hand"), "profile.source: unknown key"),  # the file name is not a key
    (lambda p: p["roles"]["actor"].update(seconds_per_token=0.1), None),  # no tokens_per_sample: not used
    (lambda p: p.update(tokens_per_sample=100) or p["roles"]["actor"].update(seconds_per_token=0.1),
     "seconds_per_token x tokens_per_sample = 10 s but seconds_per_sample = 1 s per sample"),
])
def test_a_bad_profile_is_one_line_naming_the_key(change, message):
    raw = {"accelerator_memory_gib": 80, "samples_per_step": 1, "offload_s": 0.0, "weight_sync_s": 0.5,
           "roles": {"rollout": {"seconds_per_sample": 2.0, "memory_gib": 10},
                     "actor": {"seconds_per_sample": 1.0, "memory_gib": 10}}}
    change(raw)
    if message is None:
        parse_profile(raw)
        return
    with pytest.raises(ProfileError) as err:
        parse_profile(raw)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_roles_must_match_the_config():
    with pytest.raises(ProfileError, match="the config places role 'reward' but the profile has no figures"):
        plan_search(TWO, profile(), ClusterShape(1, 2), current={"actor": "0", "rollout,reward": "1"})
    extra = profile(roles={"rollout": {"seconds_per_sample": 1.0, "memory_gib": 1},
                           "actor": {"seconds_per_sample": 1.0, "memory_gib": 1},
                           "critic": {"seconds_per_sample": 1.0, "memory_gib": 1}})
    with pytest.raises(ProfileError, match="profile.roles.critic: the config has no role 'critic'"):
        plan_search(TWO, extra, ClusterShape(1, 2), current={"actor,rollout": "0-1"})


# ---- heterogeneous nodes, per-token figures, modes -----------------------------------------------------

def test_node_groups_bring_their_own_memory_cores_and_speed():
    from rlinf.scheduler.placement.plan import NodeGroup

    wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor", receivers=("rollout",), chunks=1)
    cluster = ClusterShape(2, 1, (NodeGroup("small", (1,), 1),))
    prof = parse_profile({"accelerator_memory_gib": 80, "samples_per_step": 1, "offload_s": 0.0, "weight_sync_s": 0.0,
                          "node_groups": {"small": {"accelerator_memory_gib": 20, "speed": 0.5}},
                          "roles": {"rollout": {"seconds_per_sample": 2.0, "memory_gib": 30},
                                    "actor": {"seconds_per_sample": 1.0, "memory_gib": 10}}})
    small = {"node_group": "small", "placement": "0"}
    result = plan_search(wf, prof, cluster, current={"rollout": "0", "actor": small})
    # the rollout (30 GiB) fits only node 0's 80 GiB; the actor on the half-speed node takes 2 s
    assert result.current.prediction.step_s == pytest.approx(2.0 + 2.0)
    assert all("small" not in str(r.candidate.placement.get("rollout")) for r in result.ranked)
    across = [r for r in result.ranked if r.candidate.placement.get("actor") == small]
    assert across and across[0].prediction.step_s == pytest.approx(4.0)  # roles on two kinds of nodes
    assert result.ranked[0].prediction.step_s == pytest.approx(3.0)  # both on node 0, taking turns: 2 + 1
    assert any("which has 20" in r.dropped for r in result.dropped)
    cores = parse_profile({"accelerator_memory_gib": 80, "samples_per_step": 1, "offload_s": 0.0, "weight_sync_s": 0.0,
                           "cores_per_node": 1, "node_groups": {"small": {"cores_per_node": 4}},
                           "roles": {"rollout": {"seconds_per_sample": 2.0, "memory_gib": 1},
                                     "actor": {"seconds_per_sample": 1.0, "memory_gib": 1}}})
    assert cores.cores_on(cluster, 0) == 1 and cores.cores_on(cluster, 1) == 4


def test_measured_sizes_bend_a_per_token_role_too_and_a_cpu_reward_leaves_the_mode_alone():
    prof = profile(tokens_per_sample=100, roles={
        "rollout": {"seconds_per_token": 0.02, "memory_gib": 10, "seconds_per_sample_at": {2: 1.6}},
        "actor": {"seconds_per_sample": 1.0, "memory_gib": 10}})
    # 2 s per sample from the per-token figure; on 2 accelerators the measured 1.6 s, as in the per-sample test
    assert step({"rollout": "0-1", "actor": "2"}, 3, prof) == pytest.approx(2.6)
    wf = Workflow(flow=(Stage("rollout"), Stage("reward"), Stage("actor")), trainer="actor", receivers=("rollout",))
    cpu_reward = profile(roles={"rollout": {"seconds_per_sample": 2.0, "memory_gib": 10},
                                "reward": {"seconds_per_sample": 0.01, "memory_gib": 0, "accelerator": False},
                                "actor": {"seconds_per_sample": 1.0, "memory_gib": 10}})
    result = plan_search(wf, cpu_reward, ClusterShape(1, 2), current={"rollout,reward": "0", "actor": "1"})
    assert result.current.mode == "disaggregated"
