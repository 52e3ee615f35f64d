"""``runner.rollout_mode`` (sync | async | fully_async) and the fully_async keys of ``rollout``
(issue 45): the derived mode, the resolved concurrency, and every refusal before Ray as one line
naming its key; other recipes refuse the math keys or keep their own meaning."""

from __future__ import annotations

import copy

import pytest

from rlinf.config.agent import ToolAgentConfig
from rlinf.config.embodied import EmbodiedConfig
from rlinf.config.embodied_offpolicy import OffPolicyEmbodiedConfig
from rlinf.config.math import MathConfig
from rlinf.config.web import WebAgentConfig
from rlinf.utils.typed_config import ConfigError

#: actor and rollout on accelerators of their own; a loss that corrects off-policy samples
BASE = {"cluster": {"num_nodes": 1, "accelerators_per_node": 2,
                    "component_placement": {"actor": 0, "rollout,reward": 1}},
        "data": {"train_data_paths": ["train.jsonl"], "rollout_batch_size": 3},
        "algorithm": {"group_size": 4, "loss_type": "decoupled_ppo"},
        "actor": {"model": {"model_path": "models/tiny"}}}
TOOL = {**BASE, "runner": {"task_type": "tool_agent"}, "tools": {"calculator": {}}}
ROOTS = {"math": (MathConfig, BASE), "tool_agent": (ToolAgentConfig, TOOL)}


def changed(base: dict, changes: dict) -> dict:
    raw = copy.deepcopy(base)
    for path, value in changes.items():
        node = raw
        *parents, last = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return raw


def parse(kind: str, changes: dict):
    cls, base = ROOTS[kind]
    return cls.from_dict(changed(base, changes), check_paths=False)


@pytest.mark.parametrize("kind", ["math", "tool_agent"])
@pytest.mark.parametrize("changes, mode", [
    ({}, "sync"),
    ({"algorithm.max_head_offpolicyness": 2}, "async"),
    ({"runner.rollout_mode": "sync"}, "sync"),
    ({"runner.rollout_mode": "async", "algorithm.max_head_offpolicyness": 1}, "async"),
    ({"runner.rollout_mode": "fully_async"}, "fully_async"),
    ({"runner.rollout_mode": "fully_async", "algorithm.max_head_offpolicyness": 3}, "fully_async"),
])
def test_the_mode_is_derived_or_as_written(kind, changes, mode):
    cfg = parse(kind, changes)
    assert cfg.rollout_mode == mode and cfg.runner.rollout_mode == changes.get("runner.rollout_mode")


def test_concurrency_resolves_from_the_batch_and_counts_whole_groups():
    cfg = parse("math", {"runner.rollout_mode": "fully_async"})
    assert (cfg.max_concurrent_rollouts, cfg.max_groups_in_flight) == (12, 3)  # 3 prompts x 4 samples
    assert (cfg.rollout.pause_grace_period, cfg.rollout.partial_rollout) == (0.0, True)
    cfg = parse("math", {"runner.rollout_mode": "fully_async", "rollout.max_concurrent_rollouts": 10,
                         "rollout.pause_grace_period": 0.5, "rollout.partial_rollout": False})
    assert (cfg.max_concurrent_rollouts, cfg.max_groups_in_flight) == (10, 2)
    assert (cfg.rollout.pause_grace_period, cfg.rollout.partial_rollout) == (0.5, False)
    assert cfg.notes() == ["rollout.max_concurrent_rollouts: 10: groups of algorithm.group_size 4 start whole, "
                           "so at most 8 episodes run at once"]
    assert parse("math", {"runner.rollout_mode": "fully_async", "rollout.max_concurrent_rollouts": 8}).notes() == []


@pytest.mark.parametrize("kind", ["math", "tool_agent"])
@pytest.mark.parametrize("changes, key, words", [
    ({"runner.rollout_mode": "sync", "algorithm.max_head_offpolicyness": 1}, "runner.rollout_mode",
     "sync contradicts algorithm.max_head_offpolicyness = 1"),
    ({"runner.rollout_mode": "async"}, "runner.rollout_mode", "which is 0"),
    ({"runner.rollout_mode": "eventually"}, "runner.rollout_mode", "expected one of 'sync', 'async', 'fully_async'"),
    ({"runner.rollout_mode": "fully_async", "algorithm.loss_type": "ppo"}, "algorithm.loss_type",
     "ppo cannot correct samples from older policy versions"),
    ({"runner.rollout_mode": "fully_async", "rollout.max_concurrent_rollouts": 3}, "rollout.max_concurrent_rollouts",
     "3 is fewer than one group (algorithm.group_size = 4)"),
    ({"runner.rollout_mode": "fully_async", "rollout.max_concurrent_rollouts": 0}, "rollout.max_concurrent_rollouts",
     "must be >= 1"),
    ({"runner.rollout_mode": "fully_async", "rollout.pause_grace_period": -0.5}, "rollout.pause_grace_period",
     "must be >= 0 seconds, got -0.5"),
    ({"runner.rollout_mode": "fully_async", "algorithm.sampling_params.frequency_penalty": 0.5},
     "algorithm.sampling_params.frequency_penalty", "0.5 counts the response tokens of one generate call"),
    ({"runner.rollout_mode": "fully_async", "algorithm.dynamic_sampling": True}, "algorithm.dynamic_sampling",
     "generates continuously and takes finished groups as they come"),
    ({"runner.rollout_mode": "fully_async", "algorithm.max_head_offpolicyness": -1},
     "algorithm.max_head_offpolicyness", "must be >= 0, got -1"),
    # outside fully_async nothing reads the fully_async keys
    ({"rollout.max_concurrent_rollouts": 8}, "rollout.max_concurrent_rollouts",
     "8 has no effect: read only when runner.rollout_mode is fully_async (this run is sync"),
    ({"algorithm.max_head_offpolicyness": 1, "rollout.pause_grace_period": 2.0}, "rollout.pause_grace_period",
     "(this run is async"),
    ({"rollout.partial_rollout": False}, "rollout.partial_rollout", "False has no effect"),
    # collocated: the same placement value (known before the cluster's shape), or the plan's
    ({"runner.rollout_mode": "fully_async", "cluster.component_placement": {"actor,rollout,reward": "all"}},
     "runner.rollout_mode", "places both on 'all', collocated"),
    ({"runner.rollout_mode": "fully_async", "cluster.accelerators_per_node": None,
      "cluster.component_placement": {"actor": "0-1", "rollout,reward": "0-1"}},
     "runner.rollout_mode", "places both on '0-1', collocated"),
    ({"runner.rollout_mode": "fully_async", "cluster.component_placement": {"actor": "0-1", "rollout,reward": "all"}},
     "runner.rollout_mode", "makes them collocated"),
    ({"runner.rollout_mode": "fully_async", "cluster.component_placement": {"actor": "all", "rollout,reward": 1}},
     "runner.rollout_mode", "makes them hybrid"),
])
def test_refusals_are_one_line_naming_the_key(kind, changes, key, words):
    with pytest.raises(ConfigError) as err:
        parse(kind, changes)
    assert err.value.key == key and words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_embodied_recipes_refuse_the_math_keys_or_keep_their_own():
    embodied = {"cluster": {"num_nodes": 1, "accelerators_per_node": 1,
                            "component_placement": {"env,rollout,actor": "all"}},
                "runner": {"task_type": "embodied"}, "algorithm": {"adv_type": "gae"},
                "critic": {"use_critic_model": True},
                "env": {"train": {"env_type": "toy", "total_num_envs": 4},
                        "eval": {"env_type": "toy", "total_num_envs": 4}},
                "actor": {"model": {"model_type": "mlp", "action_dim": 2, "num_action_chunks": 1},
                          "micro_batch_size": 4, "global_batch_size": 8}}
    for path, value in (("runner.rollout_mode", "fully_async"), ("rollout.pause_grace_period", 1.0)):
        with pytest.raises(ConfigError) as err:
            EmbodiedConfig.from_dict(changed(embodied, {path: value}))
        assert err.value.key == path and "read by math runs only" in str(err.value)
    offpolicy = changed(embodied, {"algorithm": {"loss_type": "embodied_sac"}, "critic": {},
                                   "env.train.auto_reset": True,
                                   "actor": {"model": {"model_type": "sac_mlp", "action_dim": 2},
                                             "global_batch_size": 8}})
    assert OffPolicyEmbodiedConfig.from_dict(changed(offpolicy, {"runner.rollout_mode": "async"})).runner.rollout_mode \
        == "async"
    with pytest.raises(ConfigError) as err:
        OffPolicyEmbodiedConfig.from_dict(changed(offpolicy, {"runner.rollout_mode": "fully_async"}))
    assert err.value.key == "runner.rollout_mode" and "expected one of 'sync', 'async'" in str(err.value)


@pytest.mark.parametrize("mode", ["async", "fully_async"])
def test_the_web_agent_refuses_asynchronous_modes_saying_what_they_would_take(mode):
    raw = {"save_path": "r", "policy_config": {"base_model": "m"},
           "cluster": {"num_nodes": 1, "accelerators_per_node": 2,
                       "component_placement": {"env": 0, "rollout": 0, "actor": 1}},
           "env_config": {"test_tasks_rollout_size": 2, "test_tasks_repeat_times": 1}}
    sync = WebAgentConfig.from_dict(changed(raw, {"runner.rollout_mode": "sync"}), check_paths=False)
    assert sync.runner.rollout_mode == "sync"
    with pytest.raises(ConfigError) as err:
        WebAgentConfig.from_dict(changed(raw, {"runner.rollout_mode": mode}), check_paths=False)
    text = str(err.value)
    assert err.value.key == "runner.rollout_mode" and f"{mode!r} is refused" in text and "\n" not in text
    assert "env_config.vllm_server_url) cannot receive weights" in text and "loading weights while episodes" in text
