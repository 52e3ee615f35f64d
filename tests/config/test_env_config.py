"""``env:`` typed config: the shared groups in config/env/ compose through Hydra and parse."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rlinf.config.env import EnvConfig, EnvInitParams, EnvSectionConfig, VideoConfig
from rlinf.config.reference_doc import field_docs
from rlinf.utils.typed_config import ConfigError, parse_section

ROOT = Path(__file__).resolve().parents[2]
GROUPS = sorted((ROOT / "config" / "env").glob("*.yaml"))


def compose_root(monkeypatch, config_dir=Path(__file__).parent / "data", name="embodied_env_root"):
    monkeypatch.setenv("REPO_PATH", str(ROOT))
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name=name)
    return OmegaConf.to_container(cfg, resolve=True)


def test_reference_style_root_composes_and_parses(monkeypatch):
    raw = compose_root(monkeypatch)
    env = parse_section(EnvSectionConfig, raw["env"], "env")
    assert env.train.init_params.id == "PickCube-v1" and env.train.total_num_envs == 8
    assert env.train.use_fixed_reset_state_ids and env.train.group_size == 4
    assert not env.eval.use_fixed_reset_state_ids and env.eval.total_num_envs == 4
    assert env.train.video_cfg.video_base_dir == "results/embodied-test/video"
    assert env.channel.name == "env_buffer_list" and env.enable_offload


@pytest.mark.parametrize("group", GROUPS, ids=lambda p: p.stem)
def test_every_shared_group_parses(monkeypatch, tmp_path, group):
    # the reference's defaults entries are config paths (not overridable groups): one root per group
    root = (Path(__file__).parent / "data" / "embodied_env_root.yaml").read_text()
    (tmp_path / "root.yaml").write_text(root.replace("maniskill_pick_cube", group.stem))
    raw = compose_root(monkeypatch, tmp_path, "root")
    env = parse_section(EnvSectionConfig, raw["env"], "env")
    assert env.train.episode_steps is not None or env.train.env_type == "maniskill"


@pytest.mark.parametrize("change, message", [
    ({"env_type": "mujoco"}, "env.train.env_type: 'mujoco' is not allowed"),
    ({"init_params": {"id": None}}, "env.train.init_params.id: env_type maniskill needs a task id"),
    ({"total_num_envs": 6, "group_size": 4}, "env.train.total_num_envs: 6 is not a multiple of group_size 4"),
    ({"max_episode_steps": 0}, "env.train.max_episode_steps: must be >= 1 or null, got 0"),
    ({"env_type": "libero"}, "env.train.task_suite_name: env_type libero needs a suite"),
    ({"env_type": "libero", "task_suite_name": "libero_goal", "task_ids": [3, 10]},
     r"env.train.task_ids\[1\]: libero_goal has tasks 0..9, got 10"),
    ({"video_cfg": {"fps": 0}}, "env.train.video_cfg.fps: must be >= 1, got 0"),
    ({"init_params": {"camera_heights": 4}}, "env.train.init_params.camera_heights: must be >= 8 or null"),
    ({"simulator_type": "maniskill"}, "env.train.simulator_type: unknown key"),
])
def test_bad_values_name_the_key(change, message):
    raw = {"env_type": "maniskill", "init_params": {"id": "PickCube-v1"}}
    for key, value in change.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    with pytest.raises(ConfigError, match=message):
        parse_section(EnvConfig, raw, "env.train")


@pytest.mark.parametrize("cls", [EnvSectionConfig, EnvConfig, EnvInitParams, VideoConfig])
def test_every_field_is_documented(cls):
    assert set(field_docs(cls)) == {f.name for f in dataclasses.fields(cls)}


def test_envs_per_process_is_maniskill_only_and_positive():
    from rlinf.config.env import EnvConfig
    from rlinf.utils.typed_config import ConfigError, parse_section

    ok = parse_section(EnvConfig, {"env_type": "maniskill", "init_params": {"id": "PushCube-v1"},
                                   "envs_per_process": 4}, "env.train")
    assert ok.envs_per_process == 4
    with pytest.raises(ConfigError, match="env.train.envs_per_process"):
        parse_section(EnvConfig, {"env_type": "toy", "envs_per_process": 2}, "env.train")
    with pytest.raises(ConfigError, match="env.train.envs_per_process"):
        parse_section(EnvConfig, {"env_type": "maniskill", "init_params": {"id": "PushCube-v1"},
                                  "envs_per_process": 0}, "env.train")


def test_sim_in_worker_is_maniskill_cpu_only_and_excludes_envs_per_process():
    from rlinf.config.env import EnvConfig
    from rlinf.utils.typed_config import ConfigError, parse_section

    base = {"env_type": "maniskill", "init_params": {"id": "PushCube-v1"}, "sim_in_worker": True}
    assert parse_section(EnvConfig, base, "env.train").sim_in_worker
    with pytest.raises(ConfigError, match="env.eval.sim_in_worker.*libero"):
        parse_section(EnvConfig, {"env_type": "libero", "task_suite_name": "libero_10",
                                  "sim_in_worker": True}, "env.eval")
    with pytest.raises(ConfigError, match="env.train.sim_in_worker.*gpu"):
        parse_section(EnvConfig, {**base, "init_params": {"id": "PushCube-v1", "sim_backend": "gpu"}},
                      "env.train")
    with pytest.raises(ConfigError, match="env.train.envs_per_process.*no effect"):
        parse_section(EnvConfig, {**base, "envs_per_process": 4}, "env.train")


def test_new_ppo_and_rollout_keys_are_checked():
    from rlinf.config.algorithm import AlgorithmConfig
    from rlinf.config.rollout import RolloutConfig
    from rlinf.utils.typed_config import ConfigError, parse_section

    algo = parse_section(AlgorithmConfig, {"adv_type": "gae", "target_kl": 0.1,
                                           "normalize_minibatch_advantages": True}, "algorithm")
    assert algo.target_kl == 0.1 and algo.normalize_minibatch_advantages
    assert parse_section(AlgorithmConfig, {"adv_type": "gae"}, "algorithm").target_kl is None
    with pytest.raises(ConfigError, match="algorithm.target_kl"):
        parse_section(AlgorithmConfig, {"adv_type": "gae", "target_kl": 0.0}, "algorithm")
    roll = parse_section(RolloutConfig, {"normalize_states": True}, "rollout")
    assert roll.normalize_states and roll.state_norm_clip == 10.0
    with pytest.raises(ConfigError, match="rollout.state_norm_clip"):
        parse_section(RolloutConfig, {"state_norm_clip": -1}, "rollout")


def test_algorithm_episode_rules_are_inherited_by_env_splits_without_their_own():
    from rlinf.config.embodied import EmbodiedConfig

    env = {"env_type": "toy", "total_num_envs": 4}
    raw = {"cluster": {"num_nodes": 1, "accelerators_per_node": 1, "component_placement": {"env,rollout,actor": "all"}},
           "runner": {"task_type": "embodied"},
           "algorithm": {"adv_type": "gae", "auto_reset": True, "ignore_terminations": True},
           "env": {"train": dict(env), "eval": {**env, "auto_reset": False}},
           "actor": {"model": {"model_type": "mlp", "action_dim": 2, "num_action_chunks": 1},
                     "micro_batch_size": 4, "global_batch_size": 8},
           "critic": {"use_critic_model": True}}
    cfg = EmbodiedConfig.from_dict(raw)
    assert cfg.env.train.auto_reset and cfg.env.train.ignore_terminations
    assert not cfg.env.eval.auto_reset and cfg.env.eval.ignore_terminations  # eval keeps its own
    raw["env"]["train"]["auto_reset"] = False
    with pytest.raises(ConfigError, match=r"algorithm.auto_reset: True, but every env split sets its own"):
        EmbodiedConfig.from_dict(raw)
