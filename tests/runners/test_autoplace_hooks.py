"""The recipes' ``placement_workflow`` hooks (issue 46) on shipped configs: the roles the step uses,
in its order, the knobs each config may turn, the batch; a placed role the step does not use is
left out of the workflow and of the placement the planner plans from. No Ray."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from rlinf.runners.autoplace_profile import used_placement
from rlinf.runners.memory_plan import load_config
from rlinf.scheduler.autoplace import Loop, Stage, parse_profile, plan_search
from rlinf.scheduler.placement import ClusterShape
from rlinf.utils.typed_config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def workflow_of(path: str, **changes):
    """The hook's workflow for a shipped config, with dotted-key ``changes`` to its raw tree."""
    cfg, raw, recipe = load_config(path)
    if changes:
        raw = copy.deepcopy(raw)
        for key, value in changes.items():
            *head, last = key.split(".")
            node = raw
            for part in head:
                node = node.setdefault(part, {})
            node[last] = value
        cfg = recipe.config_cls.from_dict(raw, check_paths=False)
    return recipe.placement_workflow(cfg), cfg


def stages(wf) -> list[tuple[str, bool]]:
    return [(s.role, s.whole_batch) for s in wf.flow]


def test_math_step_is_rollout_reward_actor_with_the_batch_and_no_knob_in_sync_ppo():
    wf, cfg = workflow_of("examples/math/config/grpo_tiny_cpu.yaml")
    assert stages(wf) == [("rollout", False), ("reward", False), ("actor", True)]
    assert (wf.trainer, wf.receivers) == ("actor", ("rollout",))
    assert wf.samples_per_step == cfg.data.rollout_batch_size * cfg.algorithm.group_size == 256
    assert wf.lookahead == (0,) and wf.lookahead_key is None  # ppo loss: rollout may not run ahead
    # the tool agent is the math step with multi-turn episodes
    agent, cfg = workflow_of("examples/tool_agent/config/calc_tiny_disaggregated.yaml")
    assert stages(agent) == stages(wf) and agent.samples_per_step == 16 * 8


def test_math_lookahead_follows_the_configs_mode():
    wf, _ = workflow_of("examples/math/config/grpo_tiny_async.yaml")  # decoupled_ppo, mode derived
    assert wf.lookahead == (0, 1, 2) and wf.lookahead_now == 1
    assert wf.lookahead_key == "algorithm.max_head_offpolicyness"
    wf, _ = workflow_of("examples/math/config/grpo_tiny_async.yaml", **{"runner.rollout_mode": "async"})
    assert wf.lookahead == (1, 2)  # async refuses 0 (and so every collocated placement)
    wf, _ = workflow_of("examples/math/config/grpo_tiny_fully_async.yaml")
    assert wf.lookahead == (1, 2) and wf.lookahead_now == 2
    wf, _ = workflow_of("examples/math/config/grpo_tiny_async.yaml",
                        **{"runner.rollout_mode": "sync", "algorithm.max_head_offpolicyness": 0})
    assert wf.lookahead == (0,) and wf.lookahead_key is None


def test_a_placed_inference_is_a_role_only_when_the_step_runs_it():
    wf, cfg = workflow_of("examples/math/config/grpo_tiny_dapo.yaml")  # kl_beta > 0, inference apart
    assert stages(wf) == [("rollout", False), ("reward", False), ("inference", False), ("actor", True)]
    placement = dict(cfg.cluster.component_placement)
    assert used_placement(placement, wf) == placement
    wf, cfg = workflow_of("examples/math/config/grpo_tiny_dapo.yaml", **{"algorithm.kl_beta": 0.0})
    assert "inference" not in wf.roles()
    planned = used_placement(cfg.cluster.component_placement, wf)
    assert planned == {"actor": "0-1", "rollout,reward": 3}
    # the planner plans the used roles: a profile without inference is complete
    prof = parse_profile({"accelerator_memory_gib": 80, "offload_s": 1.0, "weight_sync_s": 0.1,
                          "samples_per_step": wf.samples_per_step,
                          "roles": {r: {"seconds_per_sample": 0.01, "memory_gib": 1} for r in wf.roles()}})
    result = plan_search(wf, prof, ClusterShape(1, 4), current=planned)
    assert result.current is not None and result.ranked
    assert all("inference" not in c.candidate.label() for c in result.ranked)
    # inference on the actor's devices: the actor's frozen copy gives the reference log-probs
    wf, _ = workflow_of("examples/math/config/grpo_tiny_dapo.yaml",
                        **{"cluster.component_placement": {"actor,inference": "0-1", "rollout,reward": 3}})
    assert "inference" not in wf.roles()


def test_a_placed_critic_scores_before_the_actor_and_an_unplaced_reward_is_the_drivers():
    wf, _ = workflow_of("examples/math/config/ppo_tiny_cpu.yaml")  # critic on the actor's devices, not placed
    assert stages(wf) == [("rollout", False), ("reward", False), ("actor", True)]
    wf, _ = workflow_of("examples/math/config/ppo_tiny_cpu.yaml",
                        **{"cluster.component_placement": {"actor": 0, "critic": 1, "rollout": "0-1"}})
    assert stages(wf) == [("rollout", False), ("critic", False), ("actor", True)]


def test_embodied_step_is_the_env_policy_loop_then_the_actor_with_its_knobs():
    wf, cfg = workflow_of("examples/embodiment/config/toy_ppo_mlp.yaml")
    assert wf.flow == (Loop(("env", "rollout"), iterations=20), Stage("actor", whole_batch=True))
    assert wf.samples_per_step == 16 * 20 == cfg.env.train.total_num_envs * cfg.chunk_steps
    assert (wf.lookahead, wf.lookahead_key, wf.lookahead_now) == ((0, 1), "algorithm.max_head_offpolicyness", 0)
    assert wf.pipeline_key == "rollout.pipeline_stage_num"
    assert wf.pipeline_stages == (1, 2, 4) and wf.pipeline_stages_now == 2  # 16 envs: 3 does not divide them
    wf, _ = workflow_of("examples/embodiment/config/toy_ppo_mlp.yaml", **{"algorithm.rollout_epoch": 2})
    assert wf.flow[0].iterations == 40 and wf.samples_per_step == 640 and wf.lookahead == (0,)
    wf, _ = workflow_of("examples/embodiment/config/maniskill_ppo_flow_noise_cpu.yaml")  # decoupled_ppo
    assert wf.lookahead == (1,) and wf.lookahead_key is None
    wf, _ = workflow_of("examples/embodiment/config/libero_ppo_pi0_tiny_cpu.yaml")  # offload: no overlap
    assert wf.lookahead == (0,)
    wf, _ = workflow_of("examples/embodiment/config/libero_grpo_pi0_tiny_cpu.yaml")  # 2 envs in one group
    assert wf.pipeline_stages == (1,) and wf.pipeline_key is None


def test_candidate_settings_write_the_keys_the_configs_accept():
    """A candidate's knob settings, written into the config, are never what the config refuses."""
    wf, cfg = workflow_of("examples/embodiment/config/toy_ppo_mlp.yaml")
    prof = parse_profile({"accelerator_memory_gib": 80, "offload_s": None, "weight_sync_s": 0.01,
                          "roles": {r: {"seconds_per_sample": 0.001, "memory_gib": 0.1} for r in wf.roles()},
                          "samples_per_step": wf.samples_per_step})
    result = plan_search(wf, prof, ClusterShape(1, 2), current=cfg.cluster.component_placement,
                         current_lookahead=wf.lookahead_now, current_stages=wf.pipeline_stages_now)
    tried = 0
    for ranked in result.ranked:
        settings = ranked.candidate.settings(wf)
        try:
            workflow_of("examples/embodiment/config/toy_ppo_mlp.yaml", **settings)
        except ConfigError as exc:  # process counts (env per rollout, envs per process): the placement's rules
            assert str(exc).startswith(("cluster.component_placement", "env.")), (settings, exc)
            continue
        tried += 1
    assert tried >= 5


@pytest.mark.parametrize("path", ["examples/embodiment/config/maniskill_sac_mlp_cpu.yaml",
                                  "examples/web_agent/config/web_agent_tiny_cpu.yaml"])
def test_off_policy_embodied_and_the_web_agent_are_not_planned(path):
    assert workflow_of(path)[0] is None
