"""The rule evaluator of web trajectories (the offline default judge), and the verdict type
every judge returns.

**Rule evaluator.** The trajectory's final ``answer`` is compared with the task's
``reference_answer`` (a string, or a list of strings: any one may match) per ``answer_type``:

- ``exact``: equal after normalisation. Normalising = Unicode NFKC, case folding, splitting into
  words, numbers and currency symbols (``$ € £ ¥ ₹``), dropping all other punctuation and
  spacing. Numbers lose thousands separators and trailing decimal zeros, so ``"1,299.50"`` is
  ``"1299.5"``. Currency symbols count only when *both* sides carry one: ``"$12.50"``,
  ``"12.50"``, ``"$12.5"`` and ``"$ 12.50."`` are all equal, ``"$12.50"`` and ``"€12.50"`` are not.
- ``number``: the first number of each side (sign, thousands separators and decimals read),
  equal within a relative tolerance of 1e-6.
- ``contains``: the normalised reference is a run of whole tokens of the normalised answer
  (same currency rule); ``"12.5"`` is not inside ``"112.5"``.

No answer (``None`` or blank) scores 0. A task whose reference cannot be used (missing, no
number for ``number``) or whose ``answer_type`` is unknown raises ``ValueError`` naming it.

**Blocking by rule** (:func:`detect_blocked`): a trajectory is blocked when the title of any of
its pages, or the title or text of its last page, looks like a block page (CAPTCHA, "verify you
are human", "access denied", HTTP 403 / 429 pages, rate limiting). The text of the last page is
read only when it is short (<= 2000 characters), as block pages are, so an article *about*
CAPTCHAs is not one.

>>> RuleEvaluator().score({"reference_answer": "$12.50", "answer_type": "exact"},
...                       {"answer": "12.5", "steps": []}).success
True
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rlinf.rewards.base import Sample, Score

ANSWER_TYPES = ("exact", "number", "contains")
CURRENCY_SYMBOLS = "$€£¥₹"

_NUMBER = r"(?:(?<!\w)-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_TOKEN = re.compile(rf"{_NUMBER}|[{CURRENCY_SYMBOLS}]|[^\W_]+")
_FIRST_NUMBER = re.compile(_NUMBER)
_BLOCK_TITLE = re.compile(
    r"^\s*(?:error\s*)?(?:403|429)\b|\b(?:403|429)\s+(?:forbidden|too many requests)|access denied|captcha|"
    r"just a moment|attention required|are you a (?:robot|human)|verify (?:that )?you are (?:a )?human|"
    r"too many requests", re.IGNORECASE)
_BLOCK_TEXT = re.compile(
    r"captcha|verify (?:that )?you are (?:a )?human|are you a robot|access denied|unusual traffic|"
    r"too many requests|rate limit|request (?:was )?blocked|\b403 forbidden\b|\berror (?:403|429)\b",
    re.IGNORECASE)
_SHORT_PAGE_CHARS = 2000


@dataclass
class JudgeResult:
    """The judgement of one trajectory; ``error`` set = the judging failed (counted, reward 0).

    >>> JudgeResult(1.0, True, "exact match").to_dict()["success"]
    True
    """

    reward: float
    success: bool
    reason: str
    error: str | None = None
    blocked: bool = False
    verdicts: dict[str, bool] = field(default_factory=dict)
    key_steps: list[int] | None = None

    def to_dict(self) -> dict:
        """Plain dict, as stored in a trajectory's ``judge`` field."""
        return asdict(self)

    def to_score(self) -> Score:
        """As a :class:`~rlinf.rewards.base.Score`: reward, success, error; the result as ``detail``."""
        return Score(self.reward, correct=self.success, error=self.error, detail=self)


class TrajectoryScorer:
    """What makes a web judge a :class:`~rlinf.rewards.base.Scorer`: ``score_many`` over its
    ``evaluate_many((task, trajectory) pairs) -> list[JudgeResult]`` (response = trajectory,
    reference = task)."""

    def evaluate_many(self, tasks_and_trajectories: Iterable[tuple[Mapping, Mapping]]) -> list[JudgeResult]:
        raise NotImplementedError

    def score_many(self, samples: Sequence[Sample]) -> list[Score]:
        return [r.to_score() for r in self.evaluate_many([(s.reference, s.response) for s in samples])]


def normalise(text: str) -> list[str]:
    """The tokens an ``exact`` / ``contains`` comparison sees (see the module docstring).

    >>> normalise("The price: $1,299.50!")
    ['the', 'price', '$', '1299.5']
    """
    tokens = []
    for token in _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold()):
        if token[-1].isdigit() and _FIRST_NUMBER.fullmatch(token):
            token = token.replace(",", "")
            if "." in token:
                token = token.rstrip("0").rstrip(".")
        tokens.append(token)
    return tokens


def first_number(text: str) -> float | None:
    """The first number written in ``text``, or None.

    >>> first_number("about -1,250.5 km"), first_number("none")
    (-1250.5, None)
    """
    match = _FIRST_NUMBER.search(unicodedata.normalize("NFKC", text))
    return float(match.group(0).replace(",", "")) if match else None


def _drop_currency_unless_both(answer: list[str], reference: list[str]) -> tuple[list[str], list[str]]:
    has = [any(t in CURRENCY_SYMBOLS for t in side) for side in (answer, reference)]
    if all(has):
        return answer, reference
    return ([t for t in answer if t not in CURRENCY_SYMBOLS], [t for t in reference if t not in CURRENCY_SYMBOLS])


def _references(task: Mapping) -> list[str]:
    refs = task.get("reference_answer")
    refs = [refs] if isinstance(refs, str) else list(refs or [])
    if not all(isinstance(r, str) and r.strip() for r in refs):
        raise ValueError(f"task {task.get('task_id')!r}: reference_answer: expected a non-empty string "
                         f"or list of strings, got {task.get('reference_answer')!r}")
    return refs


def _blank(answer: Any) -> bool:
    return answer is None or (isinstance(answer, str) and not answer.strip())


def match_answer(answer: str, reference: str, answer_type: str = "exact") -> bool:
    """Whether ``answer`` matches ``reference`` under ``answer_type`` (module docstring).

    >>> match_answer("$12.50", "€12.50"), match_answer("It costs 12.50", "$12.5", "contains")
    (False, True)
    >>> match_answer("3 items", "3.0000001", "number")
    True
    """
    if answer_type == "number":
        expected = first_number(reference)
        if expected is None:
            raise ValueError(f"reference_answer {reference!r}: holds no number (answer_type number)")
        got = first_number(answer)
        return got is not None and math.isclose(got, expected, rel_tol=1e-6, abs_tol=0.0)
    if answer_type not in ("exact", "contains"):
        raise ValueError(f"answer_type: expected one of {', '.join(ANSWER_TYPES)}, got {answer_type!r}")
    got, expected = _drop_currency_unless_both(normalise(answer), normalise(reference))
    if not expected:
        raise ValueError(f"reference_answer {reference!r}: nothing left to compare after normalisation")
    if answer_type == "exact":
        return got == expected
    width = len(expected)
    return any(got[i:i + width] == expected for i in range(len(got) - width + 1))


def _page(step: Mapping) -> Mapping:
    return step.get("observation") or {} if isinstance(step, Mapping) else {}


def detect_blocked(trajectory: Mapping) -> bool:
    """Whether the trajectory ran into a block page (rules in the module docstring).

    >>> detect_blocked({"steps": [{"observation": {"title": "Verify you are human", "text": ""}}]})
    True
    >>> detect_blocked({"steps": [{"observation": {"title": "Forbidden City", "text": "A palace."}}]})
    False
    """
    steps = trajectory.get("steps") or []
    if any(_BLOCK_TITLE.search(str(_page(s).get("title") or "")) for s in steps):
        return True
    if not steps:
        return False
    text = str(_page(steps[-1]).get("text") or "")
    return len(text) <= _SHORT_PAGE_CHARS and bool(_BLOCK_TEXT.search(text))


class RuleEvaluator(TrajectoryScorer):
    """Scores a trajectory's final answer against the task's reference (module docstring).

    >>> task = {"task_id": "t", "reference_answer": "42", "answer_type": "number"}
    >>> RuleEvaluator().score(task, {"answer": "forty-two (42)", "steps": []}).reward
    1.0
    """

    def score(self, task: Mapping, trajectory: Mapping) -> JudgeResult:
        blocked = detect_blocked(trajectory)
        answer_type = task.get("answer_type") or "exact"
        refs = _references(task)
        if not refs:
            raise ValueError(f"task {task.get('task_id')!r}: reference_answer: missing (the rule evaluator needs it)")
        answer = trajectory.get("answer")
        if _blank(answer):
            return JudgeResult(0.0, False, "no answer", blocked=blocked)
        for ref in refs:
            try:
                ok = match_answer(str(answer), ref, answer_type)
            except ValueError as exc:
                raise ValueError(f"task {task.get('task_id')!r}: {exc}") from None
            if ok:
                return JudgeResult(1.0, True, f"{answer_type} match with {ref!r}", blocked=blocked)
        return JudgeResult(0.0, False, f"no {answer_type} match with {refs!r}", blocked=blocked)

    def evaluate_many(self, tasks_and_trajectories: Iterable[tuple[Mapping, Mapping]]) -> list[JudgeResult]:
        """:meth:`score` of each pair, in order."""
        return [self.score(task, traj) for task, traj in tasks_and_trajectories]

    def stats(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        pass
