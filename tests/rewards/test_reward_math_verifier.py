"""MathVerifier / math_reward: hand-checked pairs, threads, hostile answers, pool recovery."""

import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from rlinf.config.reward import RewardConfig
from rlinf.rewards import (
    MathVerifier,
    extract_boxed_answer,
    get_reward_fn,
    math_reward,
)
from rlinf.rewards import math_verify as mvr


def boxed(answer: str) -> str:
    return f"Reasoning... so the final answer is $\\boxed{{{answer}}}$."


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(num_processes=2) as v:
        yield v


def run_in_thread(fn, limit_s=30.0):
    """Run fn() in a fresh (non-main) thread; return its result, failing if it does not end."""
    out = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test thread
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    start = time.perf_counter()
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"call did not return within {limit_s} s"
    if "error" in out:
        raise out["error"]
    return out["value"], time.perf_counter() - start


# (gold, boxed answer, expected). Each expectation follows math-verify's rules (read off its
# docs and checked by hand): numeric equality to 6 decimals, symbolic simplification, an
# assignment "x=3" reduced to its value, sets unordered, intervals by endpoints and openness.
PAIRS = [
    (r"\frac{1}{2}", "0.5", True),
    ("2", "2.0", True),
    ("2", r"\sqrt{4}", True),
    (r"\sqrt{4}", "2", True),
    ("3", "x=3", True),  # the answer's assignment counts as its value
    ("x=3", "3", True),
    (r"\{1,2\}", r"\{2,1\}", True),  # sets are unordered
    ("[1,2)", "[1, 2)", True),
    ("(1,2]", "[1,2]", False),  # different openness
    (r"\frac{3}{4}", r"\dfrac{3}{4}", True),
    (r"2\sqrt{2}", r"\sqrt{8}", True),
    ("x^2+2x+1", "(x+1)^2", True),  # symbolic equality
    ("1/2", r"\frac12", True),
    (r"\frac{3}{2}", r"1\frac{1}{2}", True),  # mixed number
    ("1000", "1,000", True),  # thousands separator
    ("18", r"18 \text{ dollars}", True),  # trailing units text is dropped
    (r"10\%", "10", True),
    ("5", "6", False),
    ("-2", "2", False),
    (r"\frac{1}{3}", "0.333", False),  # 1/3 - 0.333 is far beyond 6-decimal rounding
    (r"\pi", "3.14159", False),
    (r"\text{east}", r"\text{west}", False),
    ("4", "4,5", False),  # a set of two is not one number
    (r"\boxed{7}", "7", True),  # a gold that is itself a boxed solution
    (18, "18", True),  # a non-string gold
]


def test_hand_checked_pairs(verifier):
    got = verifier.score([boxed(a) for _, a, _ in PAIRS], [g for g, _, _ in PAIRS])
    wrong = [(g, a, want) for (g, a, want), have in zip(PAIRS, got) if have != want]
    assert wrong == []


def test_last_box_is_the_answer(verifier):
    response = r"Try \boxed{5}. No, recheck: \boxed{6}"
    assert verifier.score([response, response], ["6", "5"]) == [True, False]


def test_missing_or_empty_answers_need_no_process():
    with MathVerifier() as fresh:
        got = fresh.score(["The answer is 4.", boxed(""), None, r"\boxed{4", boxed("4")],
                          ["4", "4", "4", "4", None])
        assert got == [False] * 5
        assert fresh.pids == []  # nothing reached math-verify, so no child was started


def test_score_from_a_non_main_thread(verifier):
    got, _ = run_in_thread(lambda: verifier.score([boxed("0.5"), boxed("3")], [r"\frac12", "4"]))
    assert got == [True, False]


def test_fresh_verifier_created_and_used_off_the_main_thread():
    def work():
        with MathVerifier(timeout_s=0.5) as v:
            return v.score([boxed(r"\sqrt{4}"), boxed("9^{9^{9^{9^{9}}}}")], ["2", "2"])

    got, _ = run_in_thread(work)
    assert got == [True, False]


def test_concurrent_callers_are_serialized(verifier):
    def call(k):
        return verifier.score([boxed(str(k)), boxed(str(k + 1))], [str(k), str(k)])

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(call, range(8))) == [[True, False]] * 8


HOSTILE = {
    "nested_frac": "\\frac{" * 999 + "1" + "}{2}" * 999,
    "open_parens": "(" * 10000,
    "balanced_parens": "(" * 4999 + "1" + ")" * 4999,
    "long_sum": "+".join(f"x_{{{i}}}" for i in range(1234)),
    "power_tower": "9^{9^{9^{9^{9^{9}}}}}",
    "huge_power": "10^{10^{10}}",
}


def test_hostile_answers_score_incorrect_and_return():
    answers = list(HOSTILE.values())
    assert max(map(len, answers)) <= 10000
    assert all(extract_boxed_answer(boxed(a)) == a for a in answers)  # all reach math-verify
    with MathVerifier(num_processes=2, timeout_s=0.5, max_answer_chars=None) as v:
        responses = [boxed(a) for a in answers]
        got, seconds = run_in_thread(lambda: v.score(responses, ["2"] * len(answers)))
        print(f"{len(answers)} hostile answers, 2 processes, 0.5 s budget: {seconds:.2f} s")
        assert got == [False] * len(answers)
        assert v.score([boxed("2")], ["2"]) == [True]  # the pool recovered


@pytest.mark.parametrize("cap", [2048, None], ids=["default-cap", "no-cap"])
def test_hostile_10k_answer_with_default_budget(cap):
    answer = ("(" * 10000)
    with MathVerifier(max_answer_chars=cap) as v:
        got, seconds = run_in_thread(lambda: v.score([boxed(answer)], ["2"]))
        print(f"10k-char '((((' answer, max_answer_chars={cap}: {seconds:.2f} s")
        assert got == [False]


def test_pool_recovers_after_a_timeout():
    with MathVerifier(timeout_s=0.5) as v:
        assert v.score([boxed("2")], ["2"]) == [True]
        before = v.pids
        assert v.score([boxed("10^{10^{10}}"), boxed("3")], ["2", "3"]) == [False, True]
        assert v.pids != before  # the stuck child was replaced
        assert v.score([boxed("0.5")], [r"\frac{1}{2}"]) == [True]


def test_pool_recovers_after_a_child_is_killed():
    with MathVerifier() as v:
        assert v.score([boxed("2")], ["2"]) == [True]
        os.kill(v.pids[0], signal.SIGKILL)
        assert v.score([boxed("2"), boxed("3")], ["2", "2"]) == [True, False]


def test_batch_bound_cuts_a_slow_batch_short():
    with MathVerifier(timeout_s=30.0, total_timeout_s=0.5) as v:
        assert v.score([boxed("2")], ["2"]) == [True]  # warm: the child is ready
        responses = [boxed("9^{9^{9^{9^{9}}}}"), boxed("2")]
        got, _ = run_in_thread(lambda: v.score(responses, ["2", "2"]))
        assert got == [False, False]  # the second pair never got its turn
        assert v.score([boxed("2")], ["2"]) == [True]


def test_close_leaves_no_child_processes():
    v = MathVerifier(num_processes=2)
    assert v.score([boxed("2"), boxed("3")], ["2", "3"]) == [True, True]
    pids = set(v.pids)
    assert len(pids) == 2 and pids <= {p.pid for p in mp.active_children()}
    v.close()
    assert not pids & {p.pid for p in mp.active_children()}
    v.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        v.score([boxed("2")], ["2"])


def test_pickling_keeps_config_only(verifier):
    clone = pickle.loads(pickle.dumps(verifier))
    assert repr(clone) == repr(verifier) and clone.pids == []
    with clone:
        assert clone.score([boxed("2")], ["2"]) == [True]


def test_argument_checks(verifier):
    with pytest.raises(ValueError, match="2 responses but 1 golds"):
        verifier.score(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="start_method"):
        MathVerifier(start_method="fork")
    with pytest.raises(ValueError, match="timeout_s"):
        MathVerifier(timeout_s=0)
    built = MathVerifier.from_config(RewardConfig(verify_timeout_s=3.0, verify_processes=2))
    assert (built.num_processes, built.timeout_s) == (2, 3.0)


def test_math_reward_values_and_signs(verifier):
    responses = [boxed("0.5"), boxed("0.6"), "no box"]
    golds = [r"\frac{1}{2}"] * 3
    rewards = math_reward(responses, golds, reward_scale=5.0, verifier=verifier)
    assert rewards.dtype == torch.float32
    assert torch.equal(rewards, torch.tensor([5.0, -5.0, -5.0]))
    rewards = math_reward(responses, golds, verifier=verifier)  # default scale 1.0
    assert torch.equal(rewards, torch.tensor([1.0, -1.0, -1.0]))
    assert math_reward([], [], reward_scale=5.0, verifier=verifier).shape == (0,)


def test_math_reward_default_verifier_restarts_after_close():
    assert torch.equal(math_reward([boxed("2")], ["2"], reward_scale=2.0), torch.tensor([2.0]))
    shared = mvr._default_verifier()
    shared.close()
    assert torch.equal(math_reward([boxed("3")], ["2"], reward_scale=2.0), torch.tensor([-2.0]))
    mvr._default_verifier().close()


def test_registry():
    assert get_reward_fn("math") is math_reward
    with pytest.raises(ValueError, match="unknown reward type.*'nope'.*registered: math"):
        get_reward_fn("nope")
