"""A rollout-only phase (seed 004's rollout.py) through the real entry, with the policy served
by an external OpenAI-compatible server (``env_config.vllm_server_url``; here a local aiohttp
server that answers like a careful agent): env ranks on Ray, episodes, the LLM judges (another
local server, its API key in the environment), saves, metrics; then nothing the run wrote (its
folder, its printed lines, Ray's logs of the session) holds the run's secret, a token derived
from it, or the API key."""

from __future__ import annotations

import sys
from pathlib import Path

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


KEY = bytes(range(7, 39))  # the run's secret, made known to the test
API_KEY = "sk-test-" + "9f3a" * 10


def _judge_reply(content: str) -> str:
    return "VERDICT: NO" if "blocks automated visitors" in content else "VERDICT: YES"


def _leaks(needles: dict[str, bytes], roots: list[Path], texts: list[str]) -> list[str]:
    """``name in file`` for each needle found in a file under ``roots`` or in ``texts``."""
    found = []
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                found += [f"{name} in {path}" for name, needle in needles.items() if needle in data]
    blob = "\n".join(texts).encode()
    return found + [f"{name} in the printed lines" for name, needle in needles.items() if needle in blob]


def test_rollout_phase_with_an_external_policy_server_and_llm_judges_leaks_no_secret(tmp_path, monkeypatch):
    import ray

    from rlinf.runners.trajectory_store import load_iteration
    from rlinf.runners.web_agent.recipe import run_web
    from rlinf.scheduler.secret import RunSecret
    from rlinf.utils.metric_logger import read_metrics
    from tests.utils.openai_server import OpenAIServer

    made = []
    monkeypatch.setattr(RunSecret, "new", classmethod(lambda cls: made.append(1) or cls(KEY)))
    monkeypatch.setenv("RLINF_TEST_JUDGE_KEY", API_KEY)
    secret = RunSecret(KEY)
    needles = {"the secret's key (hex)": KEY.hex().encode(), "the secret's key": KEY,
               "the browser service's token": secret.token("web-service").encode(),
               "the sites' token": secret.token("web-site").encode(), "the API key": API_KEY.encode()}
    agent = ScriptedBackend()
    server = OpenAIServer(reply_fn=agent.act)
    judge = OpenAIServer(reply_fn=_judge_reply)
    lines: list[str] = []
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
            "openai_config": {"evaluator": "llm", "base_url": judge.base_url, "model": "judge",
                              "openai_api_key_env_var": "RLINF_TEST_JUDGE_KEY", "max_retries": 0},
            "cluster": {"num_nodes": 1, "accelerators_per_node": 1, "component_placement": {"env": 0}},
            "runner": {"iterations": 1, "seed": 0}}, print_fn=lambda *a: lines.append(" ".join(map(str, a))))
        session = Path(ray._private.worker._global_node.get_session_dir_path())
    finally:
        server.close()
        judge.close()
    assert summary["steps"] == 1.0  # one rollout batch (a rollout-only run trains nothing)
    assert summary["val/last_success_rate"] == 1.0  # split test: the batch is an evaluation
    (row,) = read_metrics(str(tmp_path / "run" / "metrics.jsonl"))
    assert row["test/success_rate"] == 1.0 and row["test/trajectories"] == 3.0
    assert {r["model"] for r in server.requests} == {"scripted-agent"}
    saved = load_iteration(str(tmp_path / "run" / "test_trajectories"), 0)
    assert len(saved) == 3 and all(t["reward"] == 1.0 and t["status"] == "answered" for t in saved)
    assert all("response_ids" not in s for t in saved for s in t["steps"])  # no tokenizer: text only
    assert all(t["judge"]["reason"].startswith("criterion_a=YES") for t in saved)  # the LLM judges decided
    # the key was in use (sent to the judge) and the run's secret was the test's
    assert judge.requests and {r["auth"] for r in judge.requests} == {f"Bearer {API_KEY}"} and made
    assert (session / "logs").is_dir() and lines
    assert _leaks(needles, [tmp_path / "run", session], lines) == []
