"""Every examples/math config composes with Hydra and parses into a valid MathConfig, GPU ones
included (paths are not checked: those models live on GPU machines)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from rlinf.config.math import MathConfig
from rlinf.config.resolvers import register_resolvers
from rlinf.utils.typed_config import ConfigError

CONFIG_DIR = Path(__file__).resolve().parents[2] / "examples" / "math" / "config"
NAMES = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def load(name: str, overrides=()) -> MathConfig:
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        raw = compose(name, overrides=list(overrides))
    return MathConfig.from_hydra(raw, check_paths=False)


def test_the_expected_configs_exist():
    for name in ("grpo_tiny_cpu", "grpo_tiny_disaggregated", "grpo_tiny_async", "grpo_tiny_vllm",
                 "grpo_tiny_dapo", "qwen2.5-1.5b-grpo-fsdp", "qwen2.5-1.5b-grpo-disaggregated",
                 "grpo_tiny_megatron_cpu", "qwen2.5-1.5b-grpo-megatron"):
        assert name in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_config_parses_and_fits_its_placement(name):
    cfg = load(name)
    plan = cfg.cluster.plan()
    cfg.check_against_plan(plan)
    assert cfg.algorithm.sampling_params.max_new_tokens == cfg.runner.seq_length - cfg.data.max_prompt_length
    assert {"actor", "rollout"} <= set(plan.components)


def test_modes_follow_the_placement():
    assert load("grpo_tiny_cpu").cluster.plan().mode("actor", "rollout").value == "collocated"
    assert load("grpo_tiny_disaggregated").cluster.plan().mode("actor", "rollout").value == "disaggregated"
    dapo = load("grpo_tiny_dapo").cluster.plan()
    assert dapo.mode("actor", "inference").value == "disaggregated"
    gpu = load("qwen2.5-1.5b-grpo-disaggregated")
    assert gpu.cluster.plan().component("actor").world_size == 4
    assert gpu.algorithm.loss_type == "decoupled_ppo" and gpu.rollout.engine_backend == "vllm"


def test_overrides_are_checked_before_anything_starts():
    with pytest.raises(ConfigError, match="algorithm.max_head_offpolicyness"):
        load("grpo_tiny_cpu", ["++algorithm.max_head_offpolicyness=1", "algorithm.loss_type=decoupled_ppo"])
    with pytest.raises(ConfigError, match="data.rollout_batch_size"):
        load("grpo_tiny_cpu", ["data.rollout_batch_size=3", "algorithm.group_size=3"])
    with pytest.raises(ConfigError, match="algorithm.sampling_params.max_new_tokens"):
        load("grpo_tiny_cpu", ["algorithm.sampling_params.max_new_tokens=500"])
    with pytest.raises(ConfigError, match="algorithm.bogus_key"):
        load("grpo_tiny_cpu", ["+algorithm.bogus_key=1"])
