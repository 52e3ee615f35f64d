"""Judges of web trajectories: a rule evaluator (offline default) and LLM judges (seed 000).

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

**LLM judges** (:class:`LLMJudge`), per trajectory, each call through the endpoint of its kind
(``openai_config`` default, merged under its per-kind override):

1. ``blocking_detection``, 1 call: is the last page a block page? YES ends the judging
   (reward 0, ``blocked`` True).
2. ``keypoint_detection``, N-1 calls for N steps: does step i (< N-1) matter for the task? The
   steps judged YES and always the last step are the pages shown to the evaluation.
3. ``evaluation``, 2 + R calls: ``criterion_a`` (did the agent complete the task?),
   ``criterion_b`` (is the final answer supported by the pages shown?) and one
   ``reference_answer`` call per reference (R). Success = every verdict YES; reward 1 or 0.
   With no answer and R >= 1 the evaluation calls are skipped (reward 0).

Every prompt is one user message, built deterministically from the task and the pages (texts cut
to ``max_page_chars``), and ends with ``End your reply with one line: VERDICT: YES or VERDICT:
NO.``; the last ``VERDICT:`` line of the reply is read. A failed call (timeout, HTTP 5xx / 429
after the client's retries, 4xx, an unparseable verdict) fails the trajectory's judging: it is
counted (``failures``), and scores 0 with ``JudgeResult.error`` set (``on_failure: zero``) or
raises :class:`JudgeError` (``on_failure: stop``), after which no new call starts.

>>> RuleEvaluator().score({"reference_answer": "$12.50", "answer_type": "exact"},
...                       {"answer": "12.5", "steps": []}).success
True
"""

from __future__ import annotations

import json
import math
import re
import threading
import unicodedata
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from rlinf.engines.judge.openai_client import ChatClient, Endpoint

ANSWER_TYPES = ("exact", "number", "contains")
JUDGE_KINDS = ("blocking_detection", "keypoint_detection", "evaluation")
ENDPOINT_KEYS = ("model", "base_url", "openai_api_key_env_var")
CURRENCY_SYMBOLS = "$€£¥₹"
VERDICT_LINE = "End your reply with one line: VERDICT: YES or VERDICT: NO."

_NUMBER = r"(?:(?<!\w)-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_TOKEN = re.compile(rf"{_NUMBER}|[{CURRENCY_SYMBOLS}]|[^\W_]+")
_FIRST_NUMBER = re.compile(_NUMBER)
_VERDICT = re.compile(r"VERDICT\s*:\s*\**\s*(YES|NO)\b", re.IGNORECASE)
_BLOCK_TITLE = re.compile(
    r"^\s*(?:error\s*)?(?:403|429)\b|\b(?:403|429)\s+(?:forbidden|too many requests)|access denied|captcha|"
    r"just a moment|attention required|are you a (?:robot|human)|verify (?:that )?you are (?:a )?human|"
    r"too many requests", re.IGNORECASE)
_BLOCK_TEXT = re.compile(
    r"captcha|verify (?:that )?you are (?:a )?human|are you a robot|access denied|unusual traffic|"
    r"too many requests|rate limit|request (?:was )?blocked|\b403 forbidden\b|\berror (?:403|429)\b",
    re.IGNORECASE)
_SHORT_PAGE_CHARS = 2000


class JudgeError(RuntimeError):
    """A judge call failed under ``on_failure: stop``."""


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


# ----------------------------------------------------------------------------- rules


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


class RuleEvaluator:
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


# ----------------------------------------------------------------------------- LLM judges


def _field(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _known_keys(section: Any, path: str, allowed: tuple[str, ...]) -> None:
    for key in section if isinstance(section, Mapping) else ():
        if key not in allowed:
            raise ValueError(f"{path}.{key}: unknown key; expected {', '.join(allowed)}")


def resolve_endpoints(openai_config: Any) -> dict[str, Endpoint]:
    """The endpoint of each judge kind: its override's keys over the defaults.

    >>> eps = resolve_endpoints({"model": "big", "base_url": "http://h/v1",
    ...                          "blocking_detection": {"model": "lite"}})
    >>> eps["blocking_detection"].model, eps["evaluation"].model, eps["evaluation"].api_key_env_var
    ('lite', 'big', 'OPENAI_API_KEY')
    """
    _known_keys(openai_config, "openai_config", ENDPOINT_KEYS + JUDGE_KINDS)
    endpoints = {}
    for kind in JUDGE_KINDS:
        own = _field(openai_config, kind)
        _known_keys(own, f"openai_config.{kind}", ENDPOINT_KEYS)
        values = {}
        for key in ENDPOINT_KEYS:
            value = _field(own, key) or _field(openai_config, key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"openai_config.{kind}.{key}: expected a string, got {value!r}")
            values[key] = value
        for key in ("model", "base_url"):
            if not values[key]:
                raise ValueError(f"openai_config.{kind}.{key}: missing; set openai_config.{key} "
                                 f"or openai_config.{kind}.{key}")
        endpoints[kind] = Endpoint(values["base_url"], values["model"],
                                   values["openai_api_key_env_var"] or "OPENAI_API_KEY")
    return endpoints


def parse_verdict(text: str | None) -> bool | None:
    """The last ``VERDICT: YES|NO`` of a reply (True / False), or None when there is none.

    >>> parse_verdict("The page shows a price.\\nVERDICT: YES"), parse_verdict("maybe")
    (True, None)
    """
    found = _VERDICT.findall(text or "")
    return found[-1].upper() == "YES" if found else None


class _CallFailed(Exception):
    pass


class _Aborted(Exception):
    pass


class LLMJudge:
    """LLM judges over OpenAI-compatible endpoints (module docstring).

    Args:
        openai_config: mapping or object with ``model`` / ``base_url`` /
            ``openai_api_key_env_var`` and optional per-kind overrides ``keypoint_detection``,
            ``blocking_detection``, ``evaluation`` (seed 000's keys).
        evaluation_workers: trajectories judged at once (so at most that many calls in flight).
        timeout_s, max_retries, backoff_s, max_tokens: per call, see ``ChatClient``.
        on_failure: ``zero`` (score 0, counted) or ``stop`` (raise :class:`JudgeError`).
        max_page_chars: each page's text is cut to this many characters in prompts.

    Example (needs a server)::

        judge = LLMJudge({"model": "m", "base_url": "http://127.0.0.1:8000/v1"})  # doctest: +SKIP
        judge.evaluate_many([(task, trajectory)])[0].reward                       # doctest: +SKIP
    """

    def __init__(self, openai_config: Any, *, evaluation_workers: int = 16, timeout_s: float = 60.0,
                 max_retries: int = 2, backoff_s: float = 0.5, max_tokens: int = 256,
                 on_failure: str = "zero", max_page_chars: int = 3000):
        if on_failure not in ("zero", "stop"):
            raise ValueError(f"on_failure: expected 'zero' or 'stop', got {on_failure!r}")
        if not isinstance(evaluation_workers, int) or evaluation_workers < 1:
            raise ValueError(f"evaluation_workers: expected an integer >= 1, got {evaluation_workers!r}")
        if max_page_chars < 1:
            raise ValueError(f"max_page_chars: expected >= 1, got {max_page_chars!r}")
        self.endpoints = resolve_endpoints(openai_config)
        self.workers, self.on_failure, self.max_page_chars = evaluation_workers, on_failure, max_page_chars
        clients: dict[Endpoint, ChatClient] = {}
        for endpoint in self.endpoints.values():
            if endpoint not in clients:
                clients[endpoint] = ChatClient(endpoint, max_connections=evaluation_workers, timeout_s=timeout_s,
                                               max_retries=max_retries, backoff_s=backoff_s, max_tokens=max_tokens)
        self._clients = {kind: clients[ep] for kind, ep in self.endpoints.items()}
        self._lock = threading.Lock()
        self.calls = {kind: 0 for kind in JUDGE_KINDS}
        self.failures = 0

    def endpoint_for(self, task_name: str) -> Endpoint:
        """The endpoint the ``task_name`` judge kind calls."""
        if task_name not in self.endpoints:
            raise ValueError(f"judge kind: expected one of {', '.join(JUDGE_KINDS)}, got {task_name!r}")
        return self.endpoints[task_name]

    def stats(self) -> dict[str, float]:
        """Counters for logging: calls per kind and failed trajectories."""
        with self._lock:
            out = {f"judge/calls/{kind}": float(n) for kind, n in self.calls.items()}
            out["judge/failures"] = float(self.failures)
        return out

    # -- prompts ---------------------------------------------------------------------------

    def _page_text(self, step: Mapping) -> str:
        page = _page(step)
        text = str(page.get("text") or "")[:self.max_page_chars]
        return f"Title: {page.get('title') or ''}\nURL: {page.get('url') or ''}\nPage text:\n{text}"

    def blocking_prompt(self, step: Mapping) -> str:
        return ("You check whether a web page blocks automated visitors (a CAPTCHA, 'verify you are human', "
                "access denied, HTTP 403 or 429, rate limiting).\n" + self._page_text(step)
                + "\nQuestion: is this page a blocking page?\n" + VERDICT_LINE)

    def keypoint_prompt(self, task: Mapping, step: Mapping, index: int, total: int) -> str:
        return (f"You pick the steps of a web agent's attempt that matter for judging it.\n"
                f"Task: {task.get('instruction', '')}\nStep {index + 1} of {total}.\n{self._page_text(step)}\n"
                f"Agent's reply: {step.get('response') or ''}\n"
                "Question: does this step show information or an action needed to complete the task?\n"
                + VERDICT_LINE)

    def evaluation_prompt(self, task: Mapping, trajectory: Mapping, key_steps: list[Mapping], question: str) -> str:
        pages = "\n".join(f"--- step {int(s.get('index', i)) + 1}\n{self._page_text(s)}\n"
                          f"Action: {json.dumps(s.get('action'), sort_keys=True)}" for i, s in enumerate(key_steps))
        answer = trajectory.get("answer")
        return (f"You judge a web agent's attempt at a task.\nTask: {task.get('instruction', '')}\n"
                f"Key steps ({len(key_steps)} of {len(trajectory.get('steps') or [])}):\n{pages}\n"
                f"Final answer: {'(none)' if _blank(answer) else answer}\n{question}\n" + VERDICT_LINE)

    # -- judging ---------------------------------------------------------------------------

    def _ask(self, kind: str, prompt: str, abort: threading.Event) -> bool:
        if abort.is_set():
            raise _Aborted
        with self._lock:
            self.calls[kind] += 1
        reply = self._clients[kind].complete([{"role": "user", "content": prompt}])
        if reply.error is not None:
            raise _CallFailed(f"{kind}: {reply.error} (after {reply.attempts} attempts)")
        verdict = parse_verdict(reply.text)
        if verdict is None:
            raise _CallFailed(f"{kind}: no 'VERDICT: YES|NO' line in the reply {reply.text[-120:]!r}")
        return verdict

    def _judge(self, task: Mapping, trajectory: Mapping, abort: threading.Event) -> JudgeResult:
        steps = list(trajectory.get("steps") or [])
        refs = _references(task)
        verdicts: dict[str, bool] = {}
        try:
            if steps and self._ask("blocking_detection", self.blocking_prompt(steps[-1]), abort):
                return JudgeResult(0.0, False, "blocked page", blocked=True, verdicts={"blocked": True})
            verdicts["blocked"] = False
            if _blank(trajectory.get("answer")) and refs:
                return JudgeResult(0.0, False, "no answer", verdicts=verdicts)
            keep = [i for i in range(len(steps) - 1)
                    if self._ask("keypoint_detection", self.keypoint_prompt(task, steps[i], i, len(steps)), abort)]
            keep += [len(steps) - 1] if steps else []
            shown = [steps[i] for i in keep]
            questions = [("criterion_a", "Question: did the agent complete the task?"),
                         ("criterion_b", "Question: is the final answer supported by the pages shown above?")]
            questions += [(f"reference_answer_{j}", f"Reference answer: {ref}\n"
                           "Question: does the final answer match the reference answer?") for j, ref in enumerate(refs)]
            for name, question in questions:
                prompt = self.evaluation_prompt(task, trajectory, shown, question)
                verdicts[name] = self._ask("evaluation", prompt, abort)
        except _CallFailed as exc:
            with self._lock:
                self.failures += 1
            if self.on_failure == "stop":
                abort.set()
                raise JudgeError(f"judge of task {task.get('task_id')!r}: {exc}") from None
            return JudgeResult(0.0, False, "judge failure", error=str(exc), verdicts=verdicts)
        except _Aborted:
            return JudgeResult(0.0, False, "aborted", error="aborted: another judging failed")
        success = all(verdicts[name] for name, _ in questions)
        reason = " ".join(f"{name}={'YES' if verdicts[name] else 'NO'}" for name, _ in questions)
        return JudgeResult(1.0 if success else 0.0, success, reason, verdicts=verdicts, key_steps=keep)

    def score(self, task: Mapping, trajectory: Mapping) -> JudgeResult:
        """The judgement of one trajectory."""
        return self.evaluate_many([(task, trajectory)])[0]

    def evaluate_many(self, tasks_and_trajectories: Iterable[tuple[Mapping, Mapping]]) -> list[JudgeResult]:
        """Judgements in input order, at most ``evaluation_workers`` trajectories at a time."""
        pairs = list(tasks_and_trajectories)
        for task, _ in pairs:
            _references(task)
        abort = threading.Event()
        with ThreadPoolExecutor(max(1, min(self.workers, len(pairs))), thread_name_prefix="web-judge") as pool:
            futures = [pool.submit(self._judge, task, traj, abort) for task, traj in pairs]
            try:
                return [f.result() for f in futures]
            except BaseException:
                abort.set()
                for f in futures:
                    f.cancel()
                raise

    def close(self) -> None:
        for client in set(self._clients.values()):
            client.close()


def make_judge(kind: str = "rule", **kwargs: Any) -> RuleEvaluator | LLMJudge:
    """The judge of ``kind``: ``rule`` (offline default, no arguments) or ``llm`` (LLMJudge's).

    >>> type(make_judge("rule")).__name__
    'RuleEvaluator'
    """
    if kind == "rule":
        if kwargs:
            raise ValueError(f"judge kind 'rule' takes no settings, got {sorted(kwargs)}")
        return RuleEvaluator()
    if kind == "llm":
        return LLMJudge(**kwargs)
    raise ValueError(f"judge kind: expected 'rule' or 'llm', got {kind!r}")
