"""Interruptible generation (``should_stop``), continuation under new weights, and the engine lock
(never a half-loaded model), on the HF engine with tiny random Qwen2 models (CPU). The vLLM side
of the same checks runs in tests/engines/test_rollout_vllm.py's subprocess."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.engines.rollout.base import Generation
from rlinf.engines.rollout.continuation import continue_generations, merge_continuation, plan_continuation
from rlinf.engines.rollout.hf import HFRolloutEngine

VOCAB = 512
EOS = 3
PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [200, 201], [42, 43, 44, 45]]
SAMPLED = SamplingParams(do_sample=True, temperature=0.7, top_k=40, top_p=0.95, max_new_tokens=8,
                         min_new_tokens=0)


def _tiny_model(seed: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      tie_word_embeddings=True, eos_token_id=EOS, bos_token_id=1, pad_token_id=0,
                      initializer_range=0.3)
    return Qwen2ForCausalLM(cfg).eval()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One torch thread: on 2 loaded cores two threads made each generate call 30-60x slower."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two different tiny models (A: seed 0, B: seed 1) saved to folders."""
    out = {}
    for name, seed in (("A", 0), ("B", 1)):
        path = tmp_path_factory.mktemp(f"interrupt_{name}")
        model = _tiny_model(seed)
        model.save_pretrained(path)
        out[name] = (str(path), model)
    return out


def _teacher_forced(model, context: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) of each of ``tokens`` after ``context`` (what the actor recomputes)."""
    ids = torch.tensor([context + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(context) - 1:-1].float()
    return torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def _stop_after(polls: int):
    """A ``should_stop`` that says True at its ``polls``-th call; ``.calls`` counts the calls."""
    def poll() -> bool:
        poll.calls += 1
        return poll.calls >= polls
    poll.calls = 0
    return poll


# ---- the continuation helpers (pure) -------------------------------------------------------------

def test_plan_groups_by_owed_min_tokens_and_takes_the_largest_budget():
    sp = SamplingParams(max_new_tokens=10, min_new_tokens=3)
    part = [Generation(0, [5, 6, 7, 8], [-1.0] * 4, "interrupted"),  # owes 0, budget 6
            Generation(0, [9], [-1.0], "interrupted"),                # owes 2, budget 9
            Generation(1, [4, 3], [-1.0] * 2, "stop"),                # ended: no call
            Generation(1, [5, 5, 5, 5, 5, 5], [-1.0] * 6, "interrupted"),  # owes 0, budget 4
            Generation(1, [], [], "interrupted"),                     # never started: owes 3, budget 10
            Generation(1, [1] * 10, [-1.0] * 10, "interrupted")]      # no budget left: no call
    calls = plan_continuation([[100, 101], [200]], part, sp)
    assert [c.rows for c in calls] == [[0, 3], [1], [4]]
    assert calls[0].prompts == [[100, 101, 5, 6, 7, 8], [200, 5, 5, 5, 5, 5, 5]]
    assert calls[0].budgets == [6, 4] and calls[0].sampling.max_new_tokens == 6
    assert [(c.sampling.max_new_tokens, c.sampling.min_new_tokens) for c in calls] == [(6, 0), (9, 2), (10, 3)]
    assert calls[2].prompts == [[200]]
    assert all(replace(c.sampling, max_new_tokens=10, min_new_tokens=3) == sp for c in calls)
    with pytest.raises(ValueError, match="frequency_penalty=0.5.*cannot be continued exactly"):
        plan_continuation([[100, 101], [200]], part, replace(sp, frequency_penalty=0.5))


@pytest.mark.parametrize("cont,budget,want_tokens,want_finish", [
    (Generation(0, [7, 8, 9], [-2.0] * 3, "length"), 2, [5, 6, 7, 8], "length"),   # cut at its own budget
    (Generation(0, [7, 3], [-2.0] * 2, "stop"), 2, [5, 6, 7, 3], "stop"),          # EOS exactly at the budget
    (Generation(0, [7, 8, 3], [-2.0] * 3, "stop"), 2, [5, 6, 7, 8], "length"),     # EOS past it: never sampled
    (Generation(0, [7, 3], [-2.0] * 2, "stop"), 5, [5, 6, 7, 3], "stop"),
    (Generation(0, [7], [-2.0], "interrupted"), 5, [5, 6, 7], "interrupted"),       # stopped again
    (Generation(0, [7, 8], [-2.0] * 2, "interrupted"), 2, [5, 6, 7, 8], "length"),  # ...at its budget: done
    (Generation(0, [], [], "interrupted"), 5, [5, 6], "interrupted"),
])
def test_merge_cuts_at_the_row_budget(cont, budget, want_tokens, want_finish):
    part = Generation(0, [5, 6], [-1.0, -1.5], "interrupted")
    got = merge_continuation(part, cont, budget)
    assert (got.token_ids, got.finish_reason) == (want_tokens, want_finish)
    assert got.logprobs == ([-1.0, -1.5] + cont.logprobs)[: len(want_tokens)]


def test_merge_finds_a_stop_string_across_the_boundary():
    class Tok:  # token i reads as the letter chr(96 + i)
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(96 + i) for i in ids)

    part = Generation(0, [1, 2], [-1.0, -1.0], "interrupted")  # "ab"
    got = merge_continuation(part, Generation(0, [3, 4, 5], [-2.0] * 3, "length"), 5, tokenizer=Tok(),
                             stops=("bcd",))
    assert (got.token_ids, got.logprobs, got.finish_reason) == ([1, 2, 3, 4], [-1.0, -1.0, -2.0, -2.0], "stop")


# ---- the HF engine ----------------------------------------------------------------------------------

@pytest.mark.parametrize("decode", ["lean", "generate"])
def test_partial_rollout_logprobs_exact_across_a_weight_update(models, decode):
    """Model A samples; should_stop fires after 3 decode steps (the second batch chunk never
    starts); B's weights are loaded and every row is continued to its budget. Each token's
    reported log-prob equals a teacher-forced forward: tokens 0-2 under A, the rest under B (on
    the whole context, T = 0.7)."""
    path_a, model_a = models["A"]
    _, model_b = models["B"]
    eng = HFRolloutEngine(path_a, max_batch_size=4, decode=decode)  # 6 rows: chunks of 4 and 2
    free = eng.generate(PROMPTS, SAMPLED, n=2, seed=7)
    stop_id = free[1].token_ids[1]  # makes row 1 end on its 2nd token, before the interruption
    sp = replace(SAMPLED, stop_token_ids=(stop_id,))
    ends = {EOS, stop_id}

    poll = _stop_after(3)
    first = eng.generate(PROMPTS, sp, n=2, seed=7, should_stop=poll)
    assert poll.calls == 3  # not polled again once it said stop
    assert [g.prompt_index for g in first] == [0, 0, 1, 1, 2, 2]
    assert first[1].token_ids == free[1].token_ids[:2] and first[1].finish_reason == "stop"
    for g, f in zip(first[:4], free):
        assert len(g.logprobs) == len(g.token_ids)
        assert g.token_ids == f.token_ids[:len(g.token_ids)]  # same draws as the uninterrupted call
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(f.logprobs[:len(g.token_ids)]), atol=1e-6)
        if g.finish_reason == "interrupted":
            assert len(g.token_ids) == 3 and not ends & set(g.token_ids)
        else:
            assert g.finish_reason == "stop" and g.token_ids[-1] in ends and len(g.token_ids) <= 3
    assert [(g.token_ids, g.finish_reason) for g in first[4:]] == [([], "interrupted")] * 2

    eng.load_weights(model_b.state_dict().items())
    done = continue_generations(eng, PROMPTS, first, sp, seed=8)
    assert done[1] == first[1]  # an ended row is not continued
    for g, part in zip(done, first):
        k = len(part.token_ids)
        assert g.token_ids[:k] == part.token_ids and g.logprobs[:k] == part.logprobs
        assert len(g.logprobs) == len(g.token_ids)
        if g.token_ids[-1] in ends:
            assert g.finish_reason == "stop" and not ends & set(g.token_ids[:-1])
        else:
            assert g.finish_reason == "length" and len(g.token_ids) == sp.max_new_tokens
        prompt = PROMPTS[g.prompt_index]
        want_a = _teacher_forced(model_a, prompt, g.token_ids[:k], 0.7) if k else torch.zeros(0)
        want_b = _teacher_forced(model_b, prompt + g.token_ids[:k], g.token_ids[k:], 0.7)
        want = torch.cat([want_a, want_b])
        assert (torch.tensor(g.logprobs) - want).abs().max().item() < 2e-5, (decode, g)  # measured 7.6e-6
    # the interrupted rows with 3 tokens (budget 5) and the 2 never started (budget 8) ran in ONE
    # call of 8 tokens; a 3-token row ending "length" at 8 tokens was cut at its own budget
    assert any(len(p.token_ids) == 3 and g.finish_reason == "length" for g, p in zip(done, first))


@pytest.mark.parametrize("decode", ["lean", "generate"])
def test_a_poll_that_never_fires_changes_nothing(models, decode):
    eng = HFRolloutEngine(models["A"][0], max_batch_size=4, decode=decode)
    sp = replace(SAMPLED, min_new_tokens=2)
    plain = eng.generate(PROMPTS, sp, n=2, seed=3)
    poll = _stop_after(10 ** 9)
    polled = eng.generate(PROMPTS, sp, n=2, seed=3, should_stop=poll)
    assert poll.calls > 0
    assert polled == plain  # tokens, log-probs (bit for bit) and finish reasons
    assert {g.finish_reason for g in plain} <= {"stop", "length"}


# ---- never a half-loaded model ---------------------------------------------------------------------

def _load_in_thread(eng, stream, loaded: threading.Event) -> threading.Thread:
    def load():
        with eng.exclusive():  # held across the load and the flag: generate cannot slip in between
            eng.load_weight_stream(stream)
            loaded.set()
    return threading.Thread(target=load)


def test_generation_never_sees_a_half_loaded_model(models):
    """A slow weight stream (about 22 buckets of 10 ms) in one thread, generate in another, both
    orders: the generated log-probs are all old-weights' or all new-weights', never a mix."""
    from stream_helpers import slow_stream_of

    path_a, model_a = models["A"]
    path_b, model_b = models["B"]
    greedy = SamplingParams(do_sample=False, max_new_tokens=6, min_new_tokens=0)
    old = HFRolloutEngine(path_a).generate(PROMPTS, greedy)
    new = HFRolloutEngine(path_b).generate(PROMPTS, greedy)
    assert [g.token_ids for g in old] != [g.token_ids for g in new]
    state_a = {n: p.detach().clone() for n, p in model_a.named_parameters()}
    state_b = {n: p.detach().clone() for n, p in model_b.named_parameters()}
    eng = HFRolloutEngine(path_a)

    def same(got, want):
        return [g.token_ids for g in got] == [g.token_ids for g in want] and all(
            torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-6) for a, b in zip(got, want))

    # 1) the load is under way when generate is called: generate waits, then sees all-new weights
    started, loaded = threading.Event(), threading.Event()
    loader = _load_in_thread(eng, slow_stream_of(state_b, 64 * 1024, 0.01, started), loaded)
    loader.start()
    assert started.wait(10)
    got = eng.generate(PROMPTS, greedy)
    assert loaded.is_set()  # it waited for the whole load
    loader.join()
    assert same(got, new)

    # 2) generate is under way when the load starts (from should_stop's first poll, another
    # thread, then 0.3 s of decoding): the load waits, the call's tokens are all-old
    started, loaded = threading.Event(), threading.Event()
    loader = _load_in_thread(eng, slow_stream_of(state_a, 64 * 1024, 0.01, started), loaded)

    def poll() -> bool:
        if not loader.is_alive() and not loaded.is_set():
            loader.start()
            time.sleep(0.3)  # without the lock the whole stream would be in by now
        return False

    got = eng.generate(PROMPTS, greedy, should_stop=poll)
    assert not started.is_set()  # not one bucket was consumed during the call
    loader.join()
    assert same(got, new)  # the call ran on B's weights (loaded in 1), untouched by the A load
    assert same(eng.generate(PROMPTS, greedy), old)  # and the load happened after it


def test_loading_from_inside_generate_is_refused(models):
    """A load from should_stop (same thread) would change weights mid-call: one clear error,
    and the engine stays usable."""
    path_a, model_a = models["A"]
    eng = HFRolloutEngine(path_a)
    sp = SamplingParams(do_sample=False, max_new_tokens=4, min_new_tokens=0)

    def poll() -> bool:
        eng.load_weights(model_a.state_dict().items())
        return False

    with pytest.raises(RuntimeError, match="load_weights called inside generate on the same thread"):
        eng.generate(PROMPTS, sp, should_stop=poll)
    with eng.exclusive():  # a caller may hold the lock around a load (re-entrant on its thread)
        eng.load_weights(model_a.state_dict().items())
    assert len(eng.generate(PROMPTS, sp)) == 3


def test_sglang_refuses_should_stop():
    from rlinf.engines.rollout.sglang_engine import SGLangRolloutEngine

    eng = object.__new__(SGLangRolloutEngine)  # no SGLang here: the refusal comes first
    with pytest.raises(NotImplementedError, match="rollout.backend=sglang cannot interrupt a generate call"):
        eng.generate([[1, 2]], SamplingParams(), should_stop=lambda: False)
