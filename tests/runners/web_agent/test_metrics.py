"""Rollout metrics on a small hand-crafted list (every number checked by hand), and each of seed
004's crash rules."""

from __future__ import annotations

import pytest

from rlinf.runners.web_agent.metrics import is_crashed, is_success, rollout_metrics


def _s(kind, chars=None):
    action = None if kind is None else ({"type": kind, "text": "x"} if kind == "answer" else {"type": kind})
    return {"index": 0, "observation": {"url": "u", "title": "t", "text": ""}, "screenshot": None,
            "response": None if chars is None else "r" * chars, "action": action, "exec_error": None, "seconds": 0.0}


def _t(difficulty, steps, status="answered", reward=0.0, blocked=False, judge=None):
    return {"task": {"task_id": "t", "difficulty": difficulty}, "repeat": 0, "steps": steps, "answer": None,
            "status": status, "blocked": blocked, "reward": reward, "judge": judge}


C_STEPS = [_s("goback" if i in (3, 7) else "invalid" if i == 5 else "scroll") for i in range(12)]
TRAJS = [
    _t("easy", [_s("scroll", 10), _s("goback", 20), _s("answer", 30)], reward=1.0, judge={"success": True}),  # A
    _t("easy", [_s("click", 4), _s("answer", 2)]),                                                         # B
    _t("medium", C_STEPS, status="max_steps"),                                                             # C
    _t("hard", [_s(None, 6)], status="crashed", reward=None),                                              # D rule 3
    _t("medium", [_s("invalid_url")], status="crashed", reward=None),                                      # E rule 2
    _t("hard", [_s("click", 3), _s("click", 3)], blocked=True),                                            # F blocked
    _t("easy", [_s("scroll", 1)] * 4, status="straggler", reward=None),                                    # G rule 4
    _t("hard", [_s("scroll")] * 10, status="timeout"),                                                     # H
    _t("medium", [_s("click", 2), _s("answer", 2)], reward=1.0, blocked=True),                             # I
]


def test_every_metric_on_a_crafted_list():
    m = rollout_metrics(TRAJS)
    expected = {
        "num_trajectories": 9, "num_steps": 37, "num_success": 2, "num_crashed": 3, "num_blocked": 2,
        "success_rate": 1 / 4,          # A, B, C, H are neither crashed nor blocked; A succeeded
        "success_rate_all": 2 / 9,      # A (judge) and I (reward, though blocked)
        "avg_steps": 37 / 9,
        "avg_chars_per_response": 86 / 14,   # 14 steps carry a response (C, E, H have none)
        "goback_rate": 3 / 37, "invalid_action_rate": 1 / 37,
        "crashed_rate": 3 / 9, "blocked_rate": 2 / 9, "straggler_rate": 1 / 9, "timeout_rate": 1 / 9,
        "avg_reward": 2 / 9,
        "success_rate/easy": 1 / 2, "success_rate/medium": 0.0, "success_rate/hard": 0.0,
    }
    assert m.keys() == expected.keys()
    for key, value in expected.items():
        assert m[key] == pytest.approx(value), key


def test_empty_list_gives_zero_rates():
    m = rollout_metrics([])
    assert m["num_trajectories"] == 0 and m["success_rate"] == 0.0 and m["avg_steps"] == 0.0
    assert not [k for k in m if k.startswith("success_rate/")]


def test_missing_difficulty_is_unknown():
    m = rollout_metrics([{"task": {}, "steps": [_s("answer", 1)], "reward": 1.0}])
    assert m["success_rate/unknown"] == 1.0


def test_crash_rule_1_empty():
    for traj in (None, {}, {"steps": []}, {"steps": None}):
        assert is_crashed(traj)


def test_crash_rule_2_invalid_url_first():
    long_answered = [_s("invalid_url")] + [_s("scroll")] * 10 + [_s("answer")]
    assert is_crashed({"steps": long_answered})
    assert not is_crashed({"steps": [_s("scroll")] + long_answered[1:]})


def test_crash_rule_3_dummy_action():
    steps = [_s("scroll")] * 5 + [_s(None)] + [_s("scroll")] * 5 + [_s("answer")]
    assert is_crashed({"steps": steps})
    no_action_key = {k: v for k, v in _s("scroll").items() if k != "action"}
    assert is_crashed({"steps": [no_action_key] * 11 + [_s("answer")]})
    assert not is_crashed({"steps": [_s("scroll")] * 11 + [_s("answer")]})


def test_crash_rule_4_short_without_answer_unless_blocked():
    assert is_crashed({"steps": [_s("scroll")] * 9})
    assert not is_crashed({"steps": [_s("scroll")] * 10})
    assert not is_crashed({"steps": [_s("scroll")] * 8 + [_s("answer")]})
    assert not is_crashed({"steps": [_s("scroll")] * 9, "blocked": True})
    assert is_crashed({"steps": [_s("answer"), _s("scroll")]})   # the answer must be the last action


def test_success_prefers_the_judge():
    assert not is_success({"judge": {"success": False}, "reward": 1.0})
    assert is_success({"judge": None, "reward": 0.5}) and not is_success({"reward": None})
