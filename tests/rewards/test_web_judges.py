"""Web-trajectory judges: the rule evaluator's answer matching and block detection, and the LLM
judges over real HTTP (a local OpenAI-compatible server): per-kind endpoints, call counts, key-step
selection, verdicts, failure policy and the concurrency bound."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from rlinf.config.reward import OpenAIConfig, OpenAIEndpointConfig
from rlinf.rewards.web_judges import (
    JudgeError,
    LLMJudge,
    RuleEvaluator,
    detect_blocked,
    make_judge,
    match_answer,
    parse_verdict,
    resolve_endpoints,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "utils"))
from openai_server import OpenAIServer


def _task(ref="$12.50", answer_type="exact", task_id="shop-price-0007"):
    return {"task_id": task_id, "instruction": "What is the price of the Blue Kettle?", "start_url": "/shop",
            "difficulty": "easy", "reference_answer": ref, "domain": "shop", "family": "shop_price",
            "answer_type": answer_type}


def _step(i, title="Kitchen", text="Blue Kettle $12.50", action=None):
    return {"index": i, "observation": {"url": f"http://site/p{i}", "title": title, "text": text},
            "screenshot": None, "response": f"reply {i}", "action": action or {"type": "scroll", "direction": "down"},
            "exec_error": None, "seconds": 0.1}


def _traj(answer="$12.50", n_steps=4, **step_kw):
    steps = [_step(i, text=f"page {i} text", **step_kw) for i in range(n_steps)]
    if n_steps:
        steps[-1]["action"] = {"type": "answer", "text": answer}
    return {"task": _task(), "repeat": 0, "steps": steps, "answer": answer, "status": "answered"}


@pytest.mark.parametrize("answer,ref,expected", [
    ("$12.50", "$12.50", True), ("12.50", "$12.50", True), ("$12.5", "$12.50", True), ("$ 12.50.", "$12.50", True),
    ("€12.50", "$12.50", False), ("$12.51", "$12.50", False), ("  Blue   KETTLE! ", "blue kettle", True),
    ("1,299.00", "1299", True), ("Blue Kettle 2", "blue kettle", False), ("Café", "CAFÉ", True),
])
def test_exact_matching(answer, ref, expected):
    assert match_answer(answer, ref, "exact") is expected


@pytest.mark.parametrize("answer,ref,expected", [
    ("about 100.00009 units", "100", True), ("100.0002", "100", False), ("-3 degrees", "-3", True),
    ("3 degrees", "-3", False), ("1,250.5 km", "1250.5", True), ("no number", "7", False), ("0", "0.0", True),
    ("item-42", "42", True),
])
def test_number_matching(answer, ref, expected):
    assert match_answer(answer, ref, "number") is expected


@pytest.mark.parametrize("answer,ref,expected", [
    ("The kettle costs $12.50 today", "$12.50", True), ("costs 12.50", "$12.5", True),
    ("costs $112.50", "$12.50", False), ("blue kettles", "blue kettle", False), ("a Blue Kettle.", "blue kettle", True),
])
def test_contains_matching(answer, ref, expected):
    assert match_answer(answer, ref, "contains") is expected


def test_rule_evaluator_scores_and_reasons():
    rule = RuleEvaluator()
    good = rule.score(_task(), _traj("$12.5"))
    assert (good.reward, good.success, good.blocked, good.error) == (1.0, True, False, None)
    bad = rule.score(_task(), _traj("$13"))
    assert (bad.reward, bad.success) == (0.0, False) and "no exact match" in bad.reason
    for missing in (None, "", "   "):
        res = rule.score(_task(), _traj(missing))
        assert (res.reward, res.reason) == (0.0, "no answer")
    multi = _task(ref=["12.50", "twelve fifty"])
    assert rule.score(multi, _traj("Twelve fifty")).success
    assert [r.reward for r in rule.evaluate_many([(_task(), _traj("$12.50")), (_task(), _traj("x"))])] == [1.0, 0.0]


def test_rule_evaluator_refuses_bad_tasks_with_one_line():
    with pytest.raises(ValueError, match=r"task 'shop-price-0007': answer_type: expected one of exact, number"):
        RuleEvaluator().score(_task(answer_type="fuzzy"), _traj())
    with pytest.raises(ValueError, match=r"task 'shop-price-0007': reference_answer 'n/a': holds no number"):
        RuleEvaluator().score(_task(ref="n/a", answer_type="number"), _traj("3"))
    with pytest.raises(ValueError, match=r"reference_answer: expected a non-empty string"):
        RuleEvaluator().score(_task(ref=""), _traj())


def test_detect_blocked_by_titles_and_last_page():
    assert detect_blocked({"steps": [_step(0, title="Just a moment...")]})
    assert detect_blocked({"steps": [_step(0, title="429 Too Many Requests", text="")]})
    assert detect_blocked({"steps": [_step(0), _step(1, title="Check", text="Please verify you are human")]})
    assert detect_blocked({"steps": [_step(0, title="Access Denied"), _step(1)]})   # any page's title
    assert not detect_blocked({"steps": [_step(0, text="captcha here"), _step(1)]})  # text: last page only
    long_article = "CAPTCHA is a challenge-response test. " * 100
    assert not detect_blocked({"steps": [_step(0, title="Wiki: Turing tests", text=long_article)]})
    assert not detect_blocked({"steps": [_step(0, title="Forbidden City", text="A palace in Beijing.")]})
    assert not detect_blocked({"steps": []}) and not detect_blocked({"steps": [{"action": None}]})
    assert RuleEvaluator().score(_task(), {"answer": "$12.50", "steps": [_step(0, title="Attention Required")]}).blocked


def test_resolve_endpoints_merges_overrides_and_names_bad_keys():
    eps = resolve_endpoints({"model": "big", "base_url": "http://a/v1", "openai_api_key_env_var": "KEY_A",
                             "keypoint_detection": {"model": "lite", "base_url": "http://b/v1"},
                             "evaluation": {"openai_api_key_env_var": "KEY_B"}})
    assert (eps["keypoint_detection"].model, eps["keypoint_detection"].base_url,
            eps["keypoint_detection"].api_key_env_var) == ("lite", "http://b/v1", "KEY_A")
    assert (eps["evaluation"].model, eps["evaluation"].api_key_env_var) == ("big", "KEY_B")
    assert eps["blocking_detection"].base_url == "http://a/v1"
    typed = OpenAIConfig(model="big", base_url="http://a/v1", evaluation=OpenAIEndpointConfig(model="judge"))
    assert [resolve_endpoints(typed)[k].model for k in ("blocking_detection", "evaluation")] == ["big", "judge"]
    with pytest.raises(ValueError, match=r"^openai_config\.evaluation\.modle: unknown key"):
        resolve_endpoints({"model": "m", "base_url": "u", "evaluation": {"modle": "x"}})
    with pytest.raises(ValueError, match=r"^openai_config\.blocking_detection\.model: missing"):
        resolve_endpoints({"base_url": "u", "evaluation": {"model": "x"}})
    with pytest.raises(ValueError, match=r"^on_failure: expected 'zero' or 'stop'"):
        LLMJudge({"model": "m", "base_url": "u"}, on_failure="retry")
    with pytest.raises(ValueError, match=r"^judge kind: expected 'rule' or 'llm', got 'gpt'"):
        make_judge("gpt")
    assert parse_verdict("VERDICT: NO\nwait\nVerdict: **YES**") is True and parse_verdict("YES") is None


def _grader(content: str) -> str:
    """Blocking: NO unless the page says CAPTCHA; keypoints: YES for pages mentioning 'price';
    evaluation: YES unless the reference question's final answer differs from the reference."""
    if content.startswith("You check whether"):
        return "Looks fine.\nVERDICT: " + ("YES" if "CAPTCHA" in content.split("Page text:")[1] else "NO")
    if content.startswith("You pick the steps"):
        return "VERDICT: " + ("YES" if "price" in content.split("Page text:")[1] else "NO")
    ref = re.search(r"Reference answer: (.*)", content)
    final = re.search(r"Final answer: (.*)", content).group(1)
    return "VERDICT: " + ("NO" if ref and ref.group(1) != final else "YES")


@pytest.fixture
def server():
    srv = OpenAIServer(reply_fn=_grader)
    yield srv
    srv.close()


def _config(srv, **over):
    return {"model": "big", "base_url": srv.base_url, "openai_api_key_env_var": "WEBJ_KEY_A",
            "blocking_detection": {"model": "lite"}, "keypoint_detection": {"model": "lite"},
            "evaluation": {"openai_api_key_env_var": "WEBJ_KEY_B"}, **over}


def test_llm_judge_calls_per_kind_key_steps_and_verdicts(server, monkeypatch):
    monkeypatch.setenv("WEBJ_KEY_A", "aaa")
    monkeypatch.setenv("WEBJ_KEY_B", "bbb")
    judge = LLMJudge(_config(server), evaluation_workers=2, timeout_s=10, max_retries=0)
    try:
        traj = _traj("$12.50", n_steps=4)
        traj["steps"][1]["observation"]["text"] = "the price list"
        res = judge.evaluate_many([(_task(), traj)])[0]
        assert (res.reward, res.success, res.blocked, res.error) == (1.0, True, False, None)
        assert res.key_steps == [1, 3]
        assert res.reason == "criterion_a=YES criterion_b=YES reference_answer_0=YES"
        # 1 blocking + N-1 = 3 keypoint + 2 + R = 3 evaluation calls
        assert judge.stats() == {"judge/calls/blocking_detection": 1.0, "judge/calls/keypoint_detection": 3.0,
                                 "judge/calls/evaluation": 3.0, "judge/failures": 0.0}
        kinds = [(r["content"].split()[1], r["model"], r["auth"]) for r in server.requests]
        assert kinds == [("check", "lite", "Bearer aaa")] + [("pick", "lite", "Bearer aaa")] * 3 \
            + [("judge", "big", "Bearer bbb")] * 3
        evaluation = server.requests[-1]["content"]
        assert "the price list" in evaluation and "page 3 text" in evaluation and "page 0 text" not in evaluation
        assert evaluation.rstrip().endswith("VERDICT: YES or VERDICT: NO.")
        wrong = judge.score(_task(), _traj("$99"))
        assert (wrong.reward, wrong.success) == (0.0, False)
        assert wrong.reason == "criterion_a=YES criterion_b=YES reference_answer_0=NO"
        assert judge.endpoint_for("evaluation").api_key_env_var == "WEBJ_KEY_B"
    finally:
        judge.close()


def test_llm_judge_blocked_and_no_answer_short_cuts(server):
    judge = LLMJudge(_config(server), max_retries=0)
    try:
        blocked = _traj("$12.50", n_steps=3)
        blocked["steps"][-1]["observation"]["text"] = "Solve this CAPTCHA"
        res = judge.score(_task(), blocked)
        assert (res.reward, res.blocked, res.reason) == (0.0, True, "blocked page")
        res = judge.score(_task(), _traj(None, n_steps=3))
        assert (res.reward, res.reason, res.blocked) == (0.0, "no answer", False)
        assert judge.calls == {"blocking_detection": 2, "keypoint_detection": 0, "evaluation": 0}
    finally:
        judge.close()


def test_llm_judge_failures_zero_counted_and_stop_raises():
    srv = OpenAIServer(reply="I cannot tell.")
    try:
        judge = LLMJudge({"model": "m", "base_url": srv.base_url}, max_retries=0)
        res = judge.score(_task(), _traj())
        assert (res.reward, res.success) == (0.0, False)
        assert "blocking_detection: no 'VERDICT: YES|NO' line" in res.error and judge.failures == 1
        judge.close()
        stopper = LLMJudge({"model": "m", "base_url": srv.base_url}, max_retries=0, on_failure="stop",
                           evaluation_workers=1)
        before = len(srv.requests)
        with pytest.raises(JudgeError, match=r"judge of task 'shop-price-0007': blocking_detection"):
            stopper.evaluate_many([(_task(), _traj())] * 4)
        assert len(srv.requests) - before == 1 and stopper.failures == 1   # no call started after the failure
        stopper.close()
    finally:
        srv.close()


def test_llm_judge_5xx_after_retries_and_timeout():
    failing = OpenAIServer(fail_first=100, reply="VERDICT: YES")
    try:
        judge = LLMJudge({"model": "m", "base_url": failing.base_url}, max_retries=2, backoff_s=0.01)
        res = judge.score(_task(), _traj())
        assert res.reward == 0.0 and "HTTP 500" in res.error and "after 3 attempts" in res.error
        assert len(failing.requests) == 3
        judge.close()
    finally:
        failing.close()
    slow = OpenAIServer(delay_s=1.0, reply="VERDICT: YES")
    try:
        judge = LLMJudge({"model": "m", "base_url": slow.base_url}, max_retries=0, timeout_s=0.2)
        res = judge.score(_task(), _traj())
        assert res.reward == 0.0 and "Timeout" in res.error and judge.stats()["judge/failures"] == 1.0
        judge.close()
    finally:
        slow.close()


def test_llm_judge_bounds_trajectories_in_flight():
    srv = OpenAIServer(delay_s=0.05, reply_fn=_grader)
    try:
        judge = LLMJudge({"model": "m", "base_url": srv.base_url}, evaluation_workers=2, max_retries=0)
        results = judge.evaluate_many([(_task(), _traj("$12.50", n_steps=1))] * 6 + [(_task(), _traj("$1", n_steps=1))])
        assert [r.reward for r in results] == [1.0] * 6 + [0.0]   # input order kept
        assert srv.peak_in_flight == 2 and len(srv.requests) == 7 * 4
        judge.close()
    finally:
        srv.close()


def test_make_judge_builds_both_kinds(server):
    assert isinstance(make_judge(), RuleEvaluator)
    judge = make_judge("llm", openai_config={"model": "m", "base_url": server.base_url}, evaluation_workers=3)
    assert isinstance(judge, LLMJudge) and judge.workers == 3
    judge.close()


def _env_var_fields():
    """(class, field) of every config field naming an environment variable, and every field whose
    name says it holds a key, in every config dataclass (read from rlinf.config, so a new one is
    covered)."""
    import dataclasses
    import importlib
    import pkgutil

    import rlinf.config

    found, keys = set(), set()
    for info in pkgutil.iter_modules(rlinf.config.__path__):
        for obj in vars(importlib.import_module(f"rlinf.config.{info.name}")).values():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj):
                for f in dataclasses.fields(obj):
                    if f.name.endswith("_env_var"):
                        found.add((obj, f.name))
                    elif re.search(r"api_?key|secret|password|bearer", f.name, re.IGNORECASE):
                        keys.add((obj.__name__, f.name))
    return sorted(found, key=lambda cf: (cf[0].__name__, cf[1])), keys


LITERAL = "sk-proj-" + "Zq81" * 12


def test_a_config_names_key_variables_and_never_takes_a_literal_key():
    from rlinf.utils.typed_config import ConfigError, parse_section

    fields, key_fields = _env_var_fields()
    assert key_fields == set()  # no config field holds a key itself
    names = {(cls.__name__, name) for cls, name in fields}
    assert {("WebOpenAIConfig", "openai_api_key_env_var"), ("OpenAIConfig", "openai_api_key_env_var"),
            ("OpenAIEndpointConfig", "openai_api_key_env_var"), ("WebLogConfig", "wandb_key_env_var")} <= names
    for cls, name in fields:
        assert parse_section(cls, {name: "MY_KEY_2"}, "sec") is not None  # a name is taken
        for literal in (LITERAL, "AIzaSyD" + "x" * 30, "my_key"):
            with pytest.raises(ConfigError) as err:
                parse_section(cls, {name: literal}, "sec")
            assert str(err.value).startswith(f"sec.{name}: expected the name of an environment variable")
            assert literal not in str(err.value)  # the refusal never repeats what may be a key
    with pytest.raises(ConfigError) as err:  # nor is a key taken under a key of its own
        parse_section(OpenAIConfig, {"api_key": LITERAL}, "reward.openai_config")
    assert str(err.value).startswith("reward.openai_config.api_key: unknown key") and LITERAL not in str(err.value)
    with pytest.raises(ConfigError) as err:  # the judges' own parsing of a mapping says the same
        resolve_endpoints({"model": "m", "base_url": "http://h/v1", "evaluation": {"openai_api_key_env_var": LITERAL}})
    assert str(err.value).startswith("openai_config.evaluation.openai_api_key_env_var: expected the name")
    assert LITERAL not in str(err.value)
