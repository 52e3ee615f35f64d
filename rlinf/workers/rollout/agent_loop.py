"""Multi-turn tool episodes on a rollout engine, token in / token out.

One :class:`Episode` is one token sequence after its prompt: the model's tokens exactly as
generated (never re-tokenised from messages), each turn followed by the tokens of its tool
results, which get loss mask 0 and log-prob 0. Turn boundaries and the episode's counts
(turns, calls, invalid calls, tool errors and timeouts) are recorded with its end reason:

* ``answer``: a turn without a call (``hermes`` / ``code``) or with ``<answer>`` (``searchr1``);
* ``max_turns``: the last allowed turn still asked for a tool;
* ``length``: the response budget (model + tool tokens) ran out, in a turn or before a result
  could be appended;
* ``tool_failure``: a call failed and ``continue_at_tool_failure`` is off.

:class:`AgentLoop` runs many episodes at once. Every generation round takes the episodes whose
results are in; tool calls run on a :class:`~rlinf.engines.tools.pool.ToolPool` meanwhile. A
round starts once at least ``wait_fraction`` (default half) of the unfinished episodes are ready,
so the calls of the rest overlap with its generation.

Example (any :class:`~rlinf.engines.rollout.base.RolloutEngine`; see
tests/workers/rollout/test_agent_loop.py for a scripted one)::

    loop = AgentLoop(engine, tokenizer, get_format("hermes"), pool, AgentBudgets(max_turns=3,
                     max_response_length=256))
    episodes = loop.run([prompt_ids], sampling, n=4, seed=0)          # doctest: +SKIP
"""

from __future__ import annotations

import math
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field, replace

from rlinf.config.algorithm import SamplingParams
from rlinf.engines.rollout.stops import cut_at_stop
from rlinf.engines.tools.base import ToolResult, ToolSession
from rlinf.engines.tools.formats import ToolFormat

__all__ = ["AgentBudgets", "Episode", "AgentLoop", "truncate_tokens"]


@dataclass(frozen=True)
class AgentBudgets:
    """``agentloop`` budgets.

    Attributes:
        max_turns: model turns per episode (>= 1).
        max_response_length: tokens after the prompt, model and tool together.
        max_tool_response_length: tokens of one tool result (cut in the middle).
        max_parallel_calls: calls run per turn; further ones are answered with an error.
        wait_fraction: share of pending episodes whose results the loop waits for before the
            next round when none is ready (1 = all: no overlap).
        continue_at_tool_failure: False: a failed or timed-out call ends the episode
            (``tool_failure``) instead of being shown to the model.
    """

    max_turns: int = 5
    max_response_length: int = 1024
    max_tool_response_length: int = 256
    max_parallel_calls: int = 1
    wait_fraction: float = 0.5
    continue_at_tool_failure: bool = True


@dataclass
class Episode:
    """One episode's tokens and figures (see the module docstring)."""

    prompt_index: int
    prompt_ids: list[int]
    session: ToolSession
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # policy version per token (-1: a tool's)
    turns: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of each model turn
    turn_texts: list[str] = field(default_factory=list)
    turn_results: dict[int, list[dict]] = field(default_factory=dict)  # turn -> [{status, text}] shown
    tool_calls: int = 0
    invalid_calls: int = 0
    tool_errors: int = 0
    tool_timeouts: int = 0
    tool_seconds: float = 0.0
    end_reason: str | None = None
    ended_with_eos: bool = False
    pending: list[Future] = field(default_factory=list)

    @property
    def model_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def model_text(self) -> str:
        return "".join(self.turn_texts)

    def stats(self) -> dict:
        """The figures that go with the sample (``RolloutBatch.episodes``)."""
        return {"turns": len(self.turns), "tool_calls": self.tool_calls, "invalid_calls": self.invalid_calls,
                "tool_errors": self.tool_errors, "tool_timeouts": self.tool_timeouts,
                "tool_seconds": round(self.tool_seconds, 4), "end_reason": self.end_reason,
                "model_tokens": self.model_tokens, "tool_tokens": len(self.response_ids) - self.model_tokens,
                "turn_spans": list(self.turns), "turn_texts": list(self.turn_texts),
                "turn_versions": [sorted(set(self.versions[a:b])) for a, b in self.turns],
                "turn_results": [self.turn_results.get(i, []) for i in range(len(self.turns))]}


def truncate_tokens(ids: list[int], limit: int, tokenizer) -> list[int]:
    """``ids`` cut in the middle to ``limit`` tokens with a marker (``limit`` <= 0: no cut).

    >>> class Tok:
    ...     def encode(self, text, add_special_tokens=False):
    ...         return [-1]
    >>> truncate_tokens(list(range(10)), 5, Tok())
    [0, 1, -1, 8, 9]
    """
    if limit <= 0 or len(ids) <= limit:
        return ids
    marker = tokenizer.encode("\n...\n", add_special_tokens=False)
    keep = max(limit - len(marker), 2)
    head = keep // 2
    return ids[:head] + marker + ids[len(ids) - (keep - head):]


class AgentLoop:
    """Runs episodes on ``engine`` (see the module docstring).

    Args:
        engine: the rollout engine (``generate(prompts, sampling, n, seed)``).
        tokenizer: the model's tokenizer (decodes turns, encodes results and continuations).
        fmt: the tool-call format.
        pool: runs the calls.
        budgets: turns and lengths.
    """

    def __init__(self, engine, tokenizer, fmt: ToolFormat, pool, budgets: AgentBudgets):
        self.engine, self.tokenizer, self.fmt, self.pool, self.budgets = engine, tokenizer, fmt, pool, budgets
        self.eos_ids = set(getattr(engine, "eos_token_ids", None) or [tokenizer.eos_token_id])
        self.timing = {"generate_s": 0.0, "tool_wait_s": 0.0, "rounds": 0}
        #: the policy version tokens are tagged with (the rollout worker keeps it current)
        self.version = 0

    def run(self, prompts: list[list[int]], sampling: SamplingParams, n: int = 1,
            seed: int | None = None) -> list[Episode]:
        """``n`` episodes per prompt, prompt-major (as ``engine.generate`` orders samples)."""
        tag = "" if seed is None else f"s{seed}/"  # every call names its episodes apart (tool latency draws)
        episodes = [Episode(i, list(p), ToolSession(f"{tag}{i}.{k}")) for i, p in enumerate(prompts) for k in range(n)]
        stops = tuple(dict.fromkeys([*sampling.stop, *self.fmt.stop_strings]))
        ready, waiting = list(episodes), []
        rnd = 0
        while ready or waiting:
            need = max(1, math.ceil((len(ready) + len(waiting)) * self.budgets.wait_fraction))
            if waiting and len(ready) < need:  # wait for enough results to make a round worth it
                more, waiting = self._collect(waiting, min(need - len(ready), len(waiting)))
                ready += more
                continue
            self._generate_round(ready, sampling, stops, None if seed is None else seed + 7919 * rnd)
            rnd += 1
            waiting += [e for e in ready if e.pending]
            ready = []
        for e in episodes:
            e.end_reason = e.end_reason or "length"
        return episodes

    # ---- one generation round --------------------------------------------------------------------
    def _generate_round(self, batch: list[Episode], sampling: SamplingParams, stops: tuple[str, ...],
                        seed: int | None) -> None:
        room = [self.budgets.max_response_length - len(e.response_ids) for e in batch]
        turn_sampling = replace(sampling, stop=stops, max_new_tokens=max(1, min(sampling.max_new_tokens, max(room))),
                                min_new_tokens=min(sampling.min_new_tokens, 1))
        t0 = time.perf_counter()
        gens = self.engine.generate([e.prompt_ids + e.response_ids for e in batch], turn_sampling, n=1, seed=seed)
        self.timing["generate_s"] += time.perf_counter() - t0
        self.timing["rounds"] += 1
        for g in gens:
            versions = [self.version] * len(g.token_ids)
            self.finish_turn(batch[g.prompt_index], list(g.token_ids), list(g.logprobs), versions,
                             room[g.prompt_index], stops)

    def finish_turn(self, e: Episode, ids: list[int], lps: list[float], versions: list[int], limit: int,
                    stops: tuple[str, ...]) -> None:
        """Append a model turn's tokens (cut at a stop string and at ``limit``) to ``e`` and act
        on it: end the episode or submit its tool calls."""
        cut = cut_at_stop(ids, self.tokenizer, stops) if stops else None
        if cut is not None:
            ids, lps, versions = ids[:cut], lps[:cut], versions[:cut]
        over = len(ids) > limit or (len(ids) == limit and cut is None and not (ids and ids[-1] in self.eos_ids))
        ids, lps, versions = ids[:limit], lps[:limit], versions[:limit]
        start = len(e.response_ids)
        e.response_ids += ids
        e.loss_mask += [1] * len(ids)
        e.logprobs += lps
        e.versions += versions
        e.turns.append((start, len(e.response_ids)))
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        e.turn_texts.append(text)
        e.ended_with_eos = bool(ids) and ids[-1] in self.eos_ids
        stopped = cut is not None or e.ended_with_eos
        self._after_turn(e, text, stopped and not over)

    def _after_turn(self, e: Episode, text: str, finished_turn: bool) -> None:
        if not finished_turn:
            e.end_reason = "length"
            return
        turn = self.fmt.parse(text)
        if not turn.wants_tools:
            e.end_reason = "answer"
            return
        if len(e.turns) >= self.budgets.max_turns:
            e.end_reason = "max_turns"
            e.invalid_calls += len(turn.invalid)
            return
        e.invalid_calls += len(turn.invalid)
        answers: list[Future] = []
        for message in turn.invalid:
            answers.append(_settled(ToolResult(f"Error: {message}.", "error")))
        for i, call in enumerate(turn.calls):
            if i >= self.budgets.max_parallel_calls:
                e.invalid_calls += 1
                limit = self.budgets.max_parallel_calls
                answers.append(_settled(ToolResult(f"Error: at most {limit} call(s) per turn; {call.name} not run.",
                                                   "error")))
                continue
            e.tool_calls += 1
            answers.append(self.pool.submit(call.name, call.arguments, e.session))
        e.pending = answers

    # ---- results -----------------------------------------------------------------------------------
    def _collect(self, waiting: list[Episode], need: int) -> tuple[list[Episode], list[Episode]]:
        """Wait until at least ``need`` of ``waiting`` have every result and append them;
        returns (episodes ready to generate, still waiting)."""
        t0 = time.perf_counter()
        while True:
            done = [e for e in waiting if all(f.done() for f in e.pending)]
            if len(done) >= need:
                break
            wait([f for e in waiting for f in e.pending if not f.done()], timeout=1.0, return_when=FIRST_COMPLETED)
        self.timing["tool_wait_s"] += time.perf_counter() - t0
        ready = [e for e in done if self._append_results(e)]
        return ready, [e for e in waiting if e not in done]

    def _append_results(self, e: Episode) -> bool:
        """Append the turn's results (mask 0); False when the episode ended (no room)."""
        results = [f.result() for f in e.pending]
        e.pending = []
        texts = []
        for r in results:
            e.tool_errors += r.status == "error"
            e.tool_timeouts += r.status == "timeout"
            e.tool_seconds += float(r.info.get("seconds", 0.0))
            ids = self.tokenizer.encode(r.text, add_special_tokens=False)
            limit = self.budgets.max_tool_response_length
            texts.append(r.text if len(ids) <= limit else
                         self.tokenizer.decode(truncate_tokens(ids, limit, self.tokenizer)))
        e.turn_results[len(e.turns) - 1] = [{"status": r.status, "text": t} for r, t in zip(results, texts)]
        if not self.budgets.continue_at_tool_failure and any(r.status != "ok" for r in results):
            e.end_reason = "tool_failure"
            return False
        cont = self.tokenizer.encode(self.fmt.continuation(texts, self.tokenizer, e.ended_with_eos),
                                     add_special_tokens=False)
        if len(e.response_ids) + len(cont) >= self.budgets.max_response_length:
            e.end_reason = "length"
            return False
        e.response_ids += cont
        e.loss_mask += [0] * len(cont)
        e.logprobs += [0.0] * len(cont)
        e.versions += [-1] * len(cont)
        return True


def _settled(result: ToolResult) -> Future:
    f: Future = Future()
    f.set_result(result)
    return f
