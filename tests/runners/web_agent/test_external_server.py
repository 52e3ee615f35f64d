"""A rollout-only phase (seed 004's rollout.py) through the real entry, with the policy served
by an external OpenAI-compatible server (``env_config.vllm_server_url``; here a local aiohttp
server that answers like a careful agent): env ranks on Ray, episodes, judge, saves, metrics."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("playwright")
pytest.importorskip("aiohttp")
from rlinf.engines.web.browser import find_chromium

try:
    find_chromium(None)
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"no Chromium: {exc}", allow_module_level=True)

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from test_rollout_phase import ScriptedBackend

pytestmark = pytest.mark.ray


def test_rollout_phase_with_an_external_policy_server(tmp_path):
    from rlinf.runners.web_agent.recipe import run_web
    from rlinf.runners.web_agent.store import load_iteration
    from rlinf.utils.metric_logger import read_metrics
    from tests.utils.openai_server import OpenAIServer

    agent = ScriptedBackend()
    server = OpenAIServer(reply_fn=agent.act)
    try:
        summary = run_web({
            "save_path": str(tmp_path / "run"), "data_path": "examples/web_agent/data",
            "policy_config": {"base_model": "scripted-agent", "max_new_tokens": 16},
            "model_config": {"prompt_version": "vanilla"},
            "env_config": {"vllm_server_url": server.base_url, "split": "test", "test_tasks": "test_shop_price.jsonl",
                           "test_tasks_rollout_size": 3, "test_tasks_repeat_times": 1, "server_size": 2,
                           "save_screenshots": False, "operation_timeout": 30, "wait_timeout": 60,
                           "http_pools": {op: 2 for op in ("metadata", "navigate", "allocate", "release",
                                                            "screenshot", "ac_tree", "page_metadata", "execute")}},
            "cluster": {"num_nodes": 1, "accelerators_per_node": 1, "component_placement": {"env": 0}},
            "runner": {"iterations": 1, "seed": 0}}, print_fn=lambda line: None)
    finally:
        server.close()
    assert summary["steps"] == 1.0  # one rollout batch (a rollout-only run trains nothing)
    assert summary["val/last_success_rate"] == 1.0  # split test: the batch is an evaluation
    (row,) = read_metrics(str(tmp_path / "run" / "metrics.jsonl"))
    assert row["test/success_rate"] == 1.0 and row["test/trajectories"] == 3.0
    assert {r["model"] for r in server.requests} == {"scripted-agent"}
    saved = load_iteration(str(tmp_path / "run" / "test_trajectories"), 0)
    assert len(saved) == 3 and all(t["reward"] == 1.0 and t["status"] == "answered" for t in saved)
    assert all("response_ids" not in s for t in saved for s in t["steps"])  # no tokenizer: text only
