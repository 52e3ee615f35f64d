"""The multi-turn agent loop on a scripted engine: token-in/token-out sequences, loss masks,
log-probs, turn spans, budgets, end reasons and failures answered (never raised)."""

from __future__ import annotations

import threading
import time

import pytest

from rlinf.config.algorithm import SamplingParams
from rlinf.engines.rollout.base import Generation, RolloutEngine
from rlinf.engines.tools.base import Tool, ToolResult
from rlinf.engines.tools.formats import get_format, render_tool_messages
from rlinf.engines.tools.pool import ToolPool
from rlinf.workers.rollout.agent_loop import AgentBudgets, AgentLoop
from toolkits.tiny_math.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


class ScriptedEngine(RolloutEngine):
    """Answers each context with the next scripted text of the episode (by its prompt's first
    token), log-prob -(k+1)/10 for the k-th token of a call, EOS appended when asked."""

    def __init__(self, tok, scripts: dict[int, list[str]]):
        self.tok, self.scripts, self.calls = tok, {k: list(v) for k, v in scripts.items()}, []
        self.eos_token_ids = [tok.eos_token_id]

    def generate(self, prompts, sampling, n=1, seed=None):
        out = []
        self.calls.append((len(prompts), sampling.max_new_tokens, tuple(sampling.stop)))
        for i, p in enumerate(prompts):
            text = self.scripts[p[0]].pop(0)
            eos = text.endswith("<EOS>")
            ids = self.tok.encode(text.removesuffix("<EOS>"), add_special_tokens=False)
            ids = ids + [self.tok.eos_token_id] if eos else ids
            ids = ids[:sampling.max_new_tokens]
            out.append(Generation(i, ids, [-(k + 1) / 10 for k in range(len(ids))],
                                  "stop" if eos else "length"))
        return out

    def load_weights(self, named_tensors):
        pass


class Mul(Tool):
    name = "mul"
    parameters = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                  "required": ["a", "b"]}

    def call(self, arguments, session):
        session.state["n"] = session.state.get("n", 0) + 1
        return ToolResult(str(arguments["a"] * arguments["b"]))


class Raises(Tool):
    name = "boom"

    def call(self, arguments, session):
        raise RuntimeError("kaput")


class Hangs(Tool):
    name = "hang"

    def __init__(self, options=None):
        super().__init__(options)
        self.release = threading.Event()

    def call(self, arguments, session):
        self.release.wait(10)
        return ToolResult("late")


class NotText(Tool):
    name = "bytes"

    def call(self, arguments, session):
        return b"\x00\x01"


CALL = '<tool_call>{"name": "mul", "arguments": {"a": 12, "b": 34}}</tool_call>'


def _pool(timeout_s=5.0):
    return ToolPool({"mul": Mul(), "boom": Raises(), "hang": Hangs(), "bytes": NotText()},
                    max_concurrency=4, timeout_s=timeout_s)


def _prompt(tok, first: int) -> list[int]:
    return [first] + tok.encode("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)


def test_a_hermes_episode_is_one_sequence_with_tool_tokens_masked_and_logprobs_kept(tok):
    pool = _pool()
    engine = ScriptedEngine(tok, {5: [CALL + "<EOS>", "It is \\boxed{408}<EOS>"]})
    loop = AgentLoop(engine, tok, get_format("hermes"), pool, AgentBudgets(max_turns=3, max_response_length=800))
    prompt = _prompt(tok, 5)
    (ep,) = loop.run([prompt], SamplingParams(max_new_tokens=200), n=1, seed=0)
    turn1 = tok.encode(CALL, add_special_tokens=False) + [tok.eos_token_id]
    cont = tok.encode(render_tool_messages(tok, ["408"], ended_with_eos=True), add_special_tokens=False)
    turn2 = tok.encode("It is \\boxed{408}", add_special_tokens=False) + [tok.eos_token_id]
    assert ep.response_ids == turn1 + cont + turn2  # token in, token out: nothing re-tokenised
    assert ep.loss_mask == [1] * len(turn1) + [0] * len(cont) + [1] * len(turn2)
    assert ep.logprobs[:len(turn1)] == [-(k + 1) / 10 for k in range(len(turn1))]
    assert ep.logprobs[len(turn1):len(turn1) + len(cont)] == [0.0] * len(cont)
    assert ep.logprobs[-len(turn2):] == [-(k + 1) / 10 for k in range(len(turn2))]
    assert ep.turns == [(0, len(turn1)), (len(turn1) + len(cont), len(turn1) + len(cont) + len(turn2))]
    assert (ep.end_reason, ep.tool_calls, ep.invalid_calls, ep.tool_errors) == ("answer", 1, 0, 0)
    assert "<|im_start|>tool\n408<|im_end|>" in tok.decode(cont)
    # the second round saw the whole context: prompt + turn 1 + tool tokens
    assert engine.calls[1][0] == 1
    pool.close()


def test_broken_json_unknown_tool_raising_and_non_text_tools_are_answered_and_counted(tok):
    pool = _pool()
    scripts = {1: ['<tool_call>{"name": mul}</tool_call><EOS>', "\\boxed{1}<EOS>"],
               2: ['<tool_call>{"name": "nope", "arguments": {}}</tool_call><EOS>', "\\boxed{2}<EOS>"],
               3: ['<tool_call>{"name": "boom", "arguments": {}}</tool_call><EOS>', "\\boxed{3}<EOS>"],
               4: ['<tool_call>{"name": "bytes", "arguments": {}}</tool_call><EOS>', "\\boxed{4}<EOS>"],
               6: ['<tool_call>{"name": "mul", "arguments": {"a": "x"}}</tool_call><EOS>', "\\boxed{6}<EOS>"]}
    engine = ScriptedEngine(tok, scripts)
    loop = AgentLoop(engine, tok, get_format("hermes"), pool, AgentBudgets(max_turns=3, max_response_length=600))
    eps = loop.run([_prompt(tok, k) for k in scripts], SamplingParams(max_new_tokens=200), n=1)
    texts = {k: tok.decode([t for t, m in zip(e.response_ids, e.loss_mask) if m == 0])
             for k, e in zip(scripts, eps)}
    assert all(e.end_reason == "answer" for e in eps)  # every episode went on after its bad call
    assert eps[0].invalid_calls == 1 and "not JSON" in texts[1]
    assert "unknown tool 'nope'" in texts[2] and eps[1].tool_errors == 1
    assert "RuntimeError: kaput" in texts[3] and eps[2].tool_errors == 1
    assert "not text" in texts[4] and eps[3].tool_errors == 1
    assert "missing argument 'b'" in texts[6]
    assert pool.counts["unknown_tool"] == 1 and pool.counts["errors"] == 2 and pool.counts["bad_arguments"] == 1
    pool.close()


def test_a_hanging_tool_times_out_and_the_episode_goes_on(tok):
    pool = _pool(timeout_s=0.3)
    engine = ScriptedEngine(tok, {7: ['<tool_call>{"name": "hang", "arguments": {}}</tool_call><EOS>',
                                      "\\boxed{7}<EOS>"]})
    loop = AgentLoop(engine, tok, get_format("hermes"), pool, AgentBudgets(max_turns=2, max_response_length=600))
    t0 = time.perf_counter()
    (ep,) = loop.run([_prompt(tok, 7)], SamplingParams(max_new_tokens=200))
    assert time.perf_counter() - t0 < 5
    assert ep.tool_timeouts == 1 and ep.end_reason == "answer"
    assert "did not finish within 0.3 s" in tok.decode(ep.response_ids)
    pool.tools["hang"].release.set()
    pool.close()


def test_budgets_end_episodes_with_their_reason(tok):
    pool = _pool()
    forever = [CALL + "<EOS>"] * 5
    engine = ScriptedEngine(tok, {1: list(forever), 2: list(forever), 3: ["x" * 80]})
    loop = AgentLoop(engine, tok, get_format("hermes"), pool, AgentBudgets(max_turns=2, max_response_length=800))
    a, = loop.run([_prompt(tok, 1)], SamplingParams(max_new_tokens=200))
    assert (a.end_reason, len(a.turns), a.tool_calls) == ("max_turns", 2, 1)
    short = AgentLoop(engine, tok, get_format("hermes"), pool, AgentBudgets(max_turns=5, max_response_length=40))
    b, = short.run([_prompt(tok, 2)], SamplingParams(max_new_tokens=200))
    assert b.end_reason == "length" and len(b.response_ids) <= 40
    c, = short.run([_prompt(tok, 3)], SamplingParams(max_new_tokens=200))
    assert c.end_reason == "length" and len(c.response_ids) == 40  # cut inside a turn
    fail = AgentLoop(ScriptedEngine(tok, {4: ['<tool_call>{"name": "boom", "arguments": {}}</tool_call><EOS>']}),
                     tok, get_format("hermes"), pool,
                     AgentBudgets(max_turns=3, max_response_length=800, continue_at_tool_failure=False))
    d, = fail.run([_prompt(tok, 4)], SamplingParams(max_new_tokens=200))
    assert d.end_reason == "tool_failure" and d.loss_mask == [1] * len(d.response_ids)
    pool.close()


def test_searchr1_pauses_at_the_stop_string_and_answers_in_the_same_turn(tok):
    class Search(Tool):
        name = "search"
        parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}

        def call(self, arguments, session):
            return ToolResult(f"Doc 1 (Title: {arguments['query']}) Quell.")

    pool = ToolPool({"search": Search()})
    engine = ScriptedEngine(tok, {9: ["<search>zorvex</search> and more", "<answer>Quell</answer><EOS>"]})
    loop = AgentLoop(engine, tok, get_format("searchr1"), pool, AgentBudgets(max_turns=3, max_response_length=600))
    ep, = loop.run([_prompt(tok, 9)], SamplingParams(max_new_tokens=200, stop=("STOP",)))
    assert engine.calls[0][2] == ("STOP", "</search>")  # the user's stops plus the format's
    text = tok.decode(ep.response_ids)
    assert " and more" not in text  # cut at the stop string
    assert "<information>Doc 1 (Title: zorvex) Quell.</information>" in text
    assert ep.end_reason == "answer" and get_format("searchr1").answer_text(ep.model_text, "") == "Quell"
    pool.close()


def test_tool_calls_of_some_episodes_overlap_with_generation_of_others(tok):
    class Slow(Tool):
        name = "mul"
        parameters = Mul.parameters

        def call(self, arguments, session):
            time.sleep(0.4 if session.episode_id.startswith("1.") else 0.0)
            return ToolResult("1")

    pool = ToolPool({"mul": Slow()}, max_concurrency=4)
    scripts = {k: [CALL + "<EOS>", "\\boxed{1}<EOS>"] for k in (1, 2, 3)}
    engine = ScriptedEngine(tok, scripts)
    loop = AgentLoop(engine, tok, get_format("hermes"), pool, AgentBudgets(max_turns=3, max_response_length=600,
                                                                          wait_fraction=0.5))
    eps = loop.run([_prompt(tok, k) for k in scripts], SamplingParams(max_new_tokens=200))
    assert all(e.end_reason == "answer" for e in eps)
    # round 1: all three; round 2: the two fast ones (the slow call still running); round 3: the slow one
    assert [c[0] for c in engine.calls] == [3, 2, 1]
    pool.close()
