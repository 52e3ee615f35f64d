"""Question-answering rewards (``reward.reward_type``: ``exact_match``, ``f1``), as Search-R1
and SQuAD score answers: both sides normalised (lower case, punctuation and the articles a / an /
the dropped, whitespace collapsed), then compared whole (exact match) or by tokens (F1).

A gold may list several accepted answers: a JSON list (``["Paris", "City of Paris"]``), as
question-answering datasets store them; the best match counts.

Example:
    >>> normalize_answer("The  Eiffel Tower!")
    'eiffel tower'
    >>> exact_match("the eiffel tower", '["Eiffel Tower", "tour Eiffel"]')
    True
    >>> round(token_f1("eiffel tower in paris", "Eiffel Tower"), 3)   # P 2/4, R 2/2
    0.667
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter

__all__ = ["normalize_answer", "gold_answers", "exact_match", "token_f1"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces."""
    text = _ARTICLES.sub(" ", str(text).lower().translate(_PUNCT))
    return " ".join(text.split())


def gold_answers(gold: str) -> list[str]:
    """The accepted answers: a JSON list's items, else the text itself."""
    text = str(gold).strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError:
            return [text]
        if isinstance(items, list) and items:
            return [str(x) for x in items]
    return [text]


def exact_match(prediction: str, gold: str) -> bool:
    """Normalised equality with any accepted answer."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in gold_answers(gold))


def token_f1(prediction: str, gold: str) -> float:
    """Best token-overlap F1 over the accepted answers (0 when either side is empty)."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for g in gold_answers(gold):
        ref = normalize_answer(g).split()
        common = sum((Counter(pred) & Counter(ref)).values())
        if not pred or not ref or common == 0:
            continue
        p, r = common / len(pred), common / len(ref)
        best = max(best, 2 * p * r / (p + r))
    return best
