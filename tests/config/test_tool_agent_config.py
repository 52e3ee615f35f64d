"""The tool agent's config: agentloop / tools keys refused with one line naming the key, before
Ray; a user's own tool by class_path."""

from __future__ import annotations

import copy

import pytest

from rlinf.config.agent import ToolAgentConfig
from rlinf.engines.tools.base import Tool, ToolResult, ToolSession, make_tool
from rlinf.engines.tools.pool import ToolPool
from rlinf.runners.tool_agent.recipe import build_tools
from rlinf.utils.typed_config import ConfigError

BASE = {
    "cluster": {"num_nodes": 1, "accelerators_per_node": 2, "component_placement": {"actor,rollout,reward": "all"}},
    "runner": {"task_type": "tool_agent", "seq_length": 192},
    "algorithm": {"group_size": 4, "sampling_params": {"max_new_tokens": 64}},
    "data": {"train_data_paths": ["x.jsonl"], "rollout_batch_size": 4, "max_prompt_length": 80},
    "actor": {"model": {"model_path": "m"}},
    "agentloop": {"max_turns": 2, "max_response_length": 112},
    "tools": {"calculator": {}},
}


def _cfg(**changes):
    raw = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        node = raw
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    return ToolAgentConfig.from_dict(raw, check_paths=False)


class Reverse(Tool):
    """A user's tool, outside the runtime (named by class_path in YAML)."""

    name = "reverse"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    def call(self, arguments, session):
        return ToolResult(arguments["text"][::-1])


def test_a_valid_config_parses_with_its_budget():
    cfg = _cfg()
    assert cfg.response_budget == 112 and cfg.agentloop.toolcall_parser == "hermes"
    assert _cfg(**{"agentloop.max_response_length": None}).response_budget == 192 - 80


@pytest.mark.parametrize("changes, key", [
    ({"agentloop.max_turns": 0}, "agentloop.max_turns: must be >= 1"),
    ({"agentloop.toolcall_parser": "xml"}, "agentloop.toolcall_parser: 'xml' is not allowed"),
    ({"agentloop.max_response_length": 200}, "agentloop.max_response_length: data.max_prompt_length (80)"),
    ({"agentloop.wait_fraction": 0}, "agentloop.wait_fraction"),
    ({"agentloop.train_mode": "per_step"}, "agentloop.train_mode: 'per_step' is not allowed"),
    ({"agentloop.bogus": 1}, "agentloop.bogus: unknown key"),
    ({"tools": {}}, "tools: name at least one tool"),
    ({"tools": {"calculator": 3}}, "tools.calculator: expected a mapping"),
    ({"agentloop.toolcall_parser": "searchr1"}, "tools: agentloop.toolcall_parser searchr1 calls the 'search' tool"),
    ({"runner.task_type": "math"}, "runner.task_type: must be tool_agent"),
    ({"tools": {"python": {"timeout_s": 60}}}, "agentloop.tool_timeout_s: 30 s is shorter than tools.python"),
    ({"runner.max_minutes": 0}, "runner.max_minutes: must be > 0"),
])
def test_bad_agent_keys_are_one_line_naming_the_key(changes, key):
    with pytest.raises(ConfigError) as info:
        _cfg(**changes)
    assert str(info.value).startswith(key), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("tools, key", [
    ({"hammer": {}}, "tools.hammer: unknown tool; registered tools are calculator, python, search"),
    ({"calculator": {"precision": 3}}, "tools.calculator.precision: unknown key"),
    ({"search": {}}, "tools.search"),
    ({"search": {"corpus_path": "/no/such/corpus.jsonl"}}, "tools.search.corpus_path"),
    ({"mine": {"class_path": "no.such.module:Tool"}}, "tools.mine.class_path: cannot import"),
    ({"mine": {"class_path": "rlinf.engines.tools.base:ToolResult"}}, "tools.mine.class_path: "),
])
def test_tools_are_built_and_checked_before_ray(tools, key):
    cfg = _cfg(tools=tools)
    with pytest.raises(ConfigError) as info:
        build_tools(cfg)
    assert str(info.value).startswith(key), str(info.value)


def test_a_users_own_tool_by_class_path_runs_in_the_pool():
    tools = build_tools(_cfg(tools={"rev": {"class_path": f"{__name__}:Reverse"}, "calculator": {}}))
    assert tools["rev"].name == "rev" and isinstance(tools["rev"], Reverse)
    pool = ToolPool(tools)
    assert pool.submit("rev", {"text": "abc"}, ToolSession()).result().text == "cba"
    assert pool.submit("rev", {}, ToolSession()).result().status == "error"  # schema checked
    pool.close()
    assert make_tool("calculator", {}).schema()["function"]["name"] == "calculator"
