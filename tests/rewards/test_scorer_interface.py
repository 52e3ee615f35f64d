"""Every reward and judge is a Scorer (rlinf/rewards/base.py), and its score_many gives what its
own entry point gives."""

from __future__ import annotations

import pytest

from rlinf.rewards import LLMJudge, MathVerifier, RuleEvaluator, Sample, Score, Scorer


def test_the_shipped_scorers_implement_the_interface():
    judge = LLMJudge({"model": "m", "base_url": "http://127.0.0.1:9/v1"})  # no request is made
    try:
        for scorer in (MathVerifier(), RuleEvaluator(), judge):
            assert isinstance(scorer, Scorer), type(scorer).__name__
    finally:
        judge.close()


def test_math_verifier_score_many_matches_score():
    responses, golds = [r"so \boxed{\frac{1}{2}}", r"\boxed{3}", "no box"], ["0.5", "4", "1"]
    with MathVerifier() as verifier:
        scores = verifier.score_many(Sample.many(responses, golds))
        assert [s.correct for s in scores] == verifier.score(responses, golds) == [True, False, False]
    assert [s.value for s in scores] == [1.0, 0.0, 0.0]


def test_rule_evaluator_score_many_carries_the_judge_result():
    task = {"task_id": "t", "reference_answer": "42", "answer_type": "number"}
    trajectories = [{"answer": "forty-two (42)", "steps": []}, {"answer": None, "steps": []}]
    scores = RuleEvaluator().score_many([Sample(t, task) for t in trajectories])
    results = RuleEvaluator().evaluate_many([(task, t) for t in trajectories])
    assert [(s.value, s.correct, s.error) for s in scores] == [(1.0, True, None), (0.0, False, None)]
    assert [s.detail for s in scores] == results


def test_samples_from_lists_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="got 2 responses but 1 prompts"):
        Sample.many(["a", "b"], prompts=["p"])
    assert Sample.many(["a"]) == [Sample("a")] and Score(1.0).error is None
