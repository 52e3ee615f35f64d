"""Every examples/tool_agent config composes with Hydra and parses into a valid ToolAgentConfig,
GPU ones included (paths are not checked: their models, corpora and data live on GPU machines)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from rlinf.config.agent import ToolAgentConfig
from rlinf.config.resolvers import register_resolvers

CONFIG_DIR = Path(__file__).resolve().parents[2] / "examples" / "tool_agent" / "config"
NAMES = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def load(name: str, overrides=()) -> ToolAgentConfig:
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        raw = compose(name, overrides=list(overrides))
    return ToolAgentConfig.from_hydra(raw, check_paths=False)


def test_the_expected_configs_exist():
    assert {"calc_tiny_cpu", "calc_tiny_disaggregated", "searchr1-qwen2.5-3b", "torl-qwen2.5-math-1.5b"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_config_parses_and_fits_its_placement(name):
    cfg = load(name)
    cfg.check_against_plan(cfg.cluster.plan())
    assert cfg.runner.task_type == "tool_agent"
    assert cfg.data.max_prompt_length + cfg.response_budget <= cfg.runner.seq_length


def test_formats_tools_and_rewards_of_the_gpu_configs():
    sr = load("searchr1-qwen2.5-3b")
    assert (sr.agentloop.toolcall_parser, sr.reward.reward_type, sr.tools["search"]["top_k"]) == \
        ("searchr1", "exact_match", 3)
    assert sr.actor.model.model_path.endswith("Qwen2.5-3B/") and sr.rollout.engine_backend == "vllm"
    torl = load("torl-qwen2.5-math-1.5b")
    assert (torl.agentloop.toolcall_parser, torl.reward.reward_type) == ("code", "math")
    assert torl.tools["python"]["isolation"] == "auto"
    tiny = load("calc_tiny_cpu")
    assert tiny.cluster.plan().mode("actor", "rollout").value == "collocated"
    assert load("calc_tiny_disaggregated").cluster.plan().mode("actor", "rollout").value == "disaggregated"
