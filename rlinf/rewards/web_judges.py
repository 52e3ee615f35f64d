"""Judges of web trajectories: a rule evaluator (offline default) and LLM judges (seed 000).

The rule evaluator, the answer rules and :class:`JudgeResult` live in
:mod:`rlinf.rewards.rule_judge` (re-exported here).

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

>>> type(make_judge("rule")).__name__
'RuleEvaluator'
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlinf.config.reward import check_env_var_name
from rlinf.rewards.base import JudgeError
from rlinf.rewards.openai_client import ChatClient, Endpoint
from rlinf.rewards.rule_judge import (  # noqa: F401 - re-exported
    ANSWER_TYPES,
    JudgeResult,
    RuleEvaluator,
    TrajectoryScorer,
    _blank,
    _page,
    _references,
    detect_blocked,
    first_number,
    match_answer,
    normalise,
)

JUDGE_KINDS = ("blocking_detection", "keypoint_detection", "evaluation")
ENDPOINT_KEYS = ("model", "base_url", "openai_api_key_env_var")
VERDICT_LINE = "End your reply with one line: VERDICT: YES or VERDICT: NO."
_VERDICT = re.compile(r"VERDICT\s*:\s*\**\s*(YES|NO)\b", re.IGNORECASE)


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
            if key == "openai_api_key_env_var":  # a name, never a key (the refusal never repeats it)
                check_env_var_name(value, f"openai_config.{kind}.{key}")
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


class LLMJudge(TrajectoryScorer):
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
