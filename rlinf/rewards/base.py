"""The one interface every reward and judge implements: a :class:`Scorer` turns
:class:`Sample` s into :class:`Score` s, in order, one per sample.

A sample is what is scored (``response``), what it is scored against (``reference``) and the
``prompt`` for scorers that read it:

=========================================  ========================  ==================  ===========
scorer                                     response                  reference           prompt
=========================================  ========================  ==================  ===========
:class:`~rlinf.rewards.MathVerifier`       model text                gold answer         unused
:class:`~rlinf.rewards.HFRewardModel`      model text                unused              prompt text
:class:`~rlinf.rewards.ChatJudge`          model text                gold answer         prompt text
:class:`~rlinf.rewards.RuleEvaluator`,     web trajectory (mapping:  web task (mapping:  unused
:class:`~rlinf.rewards.LLMJudge`           ``answer``, ``steps``)    ``reference_answer``)
=========================================  ========================  ==================  ===========

A score's ``value`` is the scorer's own, before any weight or scale of the caller: 1 / 0 for a
verified math answer, the reward model's logit, the judge's number in [0, 1], the web judge's
reward. ``correct`` is the verdict where the scorer gives one; ``error`` says the scoring of that
sample failed (value 0, counted by the caller); ``detail`` is the scorer's own record of it (the
web judges' :class:`~rlinf.rewards.JudgeResult`, the chat client's reply).

Each scorer keeps its former entry point (``MathVerifier.score``, ``HFRewardModel.score``,
``evaluate_many`` of the web judges, :func:`~rlinf.rewards.math_reward`); ``score_many`` is a thin
adapter over it, so the callers that need the richer form keep it.

Example (a scorer of one's own, and two shipped ones):
    >>> class ExactMatch:
    ...     def score_many(self, samples):
    ...         return [Score(float(s.response == s.reference), correct=s.response == s.reference)
    ...                 for s in samples]
    ...     def close(self):
    ...         pass
    >>> isinstance(ExactMatch(), Scorer)
    True
    >>> [s.value for s in ExactMatch().score_many([Sample("4", "4"), Sample("5", "4")])]
    [1.0, 0.0]
    >>> from rlinf.rewards import MathVerifier, RuleEvaluator
    >>> with MathVerifier() as verifier:  # no box: scored without starting a child process
    ...     verifier.score_many([Sample("I think it is 4.", "4")])
    [Score(value=0.0, correct=False, error=None, detail=None)]
    >>> task = {"task_id": "t", "reference_answer": "$12.50"}
    >>> RuleEvaluator().score_many([Sample({"answer": "12.5", "steps": []}, task)])[0].correct
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["JudgeError", "Sample", "Score", "Scorer"]


class JudgeError(RuntimeError):
    """A judge's call failed and its ``on_failure`` is ``stop``."""


@dataclass(frozen=True)
class Sample:
    """One thing to score (the module docstring says what each scorer reads)."""

    response: Any
    reference: Any = None
    prompt: str = ""

    @classmethod
    def many(cls, responses: Sequence[Any], references: Sequence[Any] | None = None,
             prompts: Sequence[str] | None = None) -> list[Sample]:
        """Samples from parallel lists (``None``: the field's default for every sample).

        >>> [s.reference for s in Sample.many(["a", "b"], ["1", "2"])]
        ['1', '2']
        >>> Sample.many(["a", "b"], ["1"])
        Traceback (most recent call last):
        ...
        ValueError: got 2 responses but 1 references
        """
        n = len(responses)
        for name, values in (("references", references), ("prompts", prompts)):
            if values is not None and len(values) != n:
                raise ValueError(f"got {n} responses but {len(values)} {name}")
        return [cls(r, None if references is None else references[i], "" if prompts is None else prompts[i])
                for i, r in enumerate(responses)]


@dataclass(frozen=True)
class Score:
    """The score of one sample (the module docstring says what each field holds)."""

    value: float
    correct: bool | None = None
    error: str | None = None
    detail: Any = None


@runtime_checkable
class Scorer(Protocol):
    """Scores samples in order; ``close`` frees what it holds (processes, connections, a model)."""

    def score_many(self, samples: Sequence[Sample]) -> list[Score]:
        """One :class:`Score` per sample, in order."""
        ...

    def close(self) -> None:
        ...
