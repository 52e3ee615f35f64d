"""HFRolloutEngine on a tiny random Qwen2 (CPU): greedy parity with ``model.generate``, the log-prob
definition (log_softmax(raw_logits / T) of the sampled token), n / ordering, EOS, seeds,
min_new_tokens, in-place weight loading, and the factory."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.config.rollout import RolloutConfig
from rlinf.engines.rollout.factory import make_rollout_engine
from rlinf.engines.rollout.hf import HFRolloutEngine

VOCAB = 512
EOS = 3


def _tiny_model(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      tie_word_embeddings=True, eos_token_id=EOS, bos_token_id=1, pad_token_id=0,
                      initializer_range=0.3)  # peaky logits: no near-ties between batched / unbatched
    return Qwen2ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_qwen2")
    model = _tiny_model()
    model.save_pretrained(path)
    return str(path), model


@pytest.fixture(scope="module")
def engine(tiny):
    return HFRolloutEngine(tiny[0], max_batch_size=64)


PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [200, 201], [42, 43, 44, 45]]


def _reference_logprobs(model, prompt, response, temperature):
    """What the actor recomputes: log_softmax(logits / T) of each response token."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(response)[:, None])[:, 0]


def _hf_greedy(model, prompt, max_new_tokens):
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=EOS, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.mark.slow
def test_greedy_matches_model_generate(tiny, engine):
    _, model = tiny
    sp = SamplingParams(do_sample=False, max_new_tokens=10, min_new_tokens=0)
    gens = engine.generate(PROMPTS, sp)
    for g in gens:
        want = _hf_greedy(model, PROMPTS[g.prompt_index], 10)
        if EOS in want:
            want = want[: want.index(EOS) + 1]
        assert g.token_ids == want
        assert len(g.logprobs) == len(g.token_ids)
        ref = _reference_logprobs(model, PROMPTS[g.prompt_index], g.token_ids, 1.0)
        assert torch.allclose(torch.tensor(g.logprobs), ref, atol=1e-4)


@pytest.mark.slow
def test_chunking_does_not_change_greedy(tiny, engine):
    small = HFRolloutEngine(tiny[0], max_batch_size=2)
    sp = SamplingParams(do_sample=False, max_new_tokens=6, min_new_tokens=0)
    assert [g.token_ids for g in small.generate(PROMPTS, sp, n=2)] == \
        [g.token_ids for g in engine.generate(PROMPTS, sp, n=2)]


@pytest.mark.slow
@pytest.mark.parametrize("temperature,top_k,top_p,rep", [(1.0, -1, 1.0, 1.0), (0.7, 20, 0.9, 1.2)])
def test_sampled_logprobs_match_recompute(tiny, engine, temperature, top_k, top_p, rep):
    _, model = tiny
    sp = SamplingParams(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p,
                        repetition_penalty=rep, max_new_tokens=12, min_new_tokens=2)
    gens = engine.generate(PROMPTS, sp, n=3, seed=7)
    for g in gens:
        assert len(g.logprobs) == len(g.token_ids) >= 2
        ref = _reference_logprobs(model, PROMPTS[g.prompt_index], g.token_ids, temperature)
        assert (torch.tensor(g.logprobs) - ref).abs().max().item() < 1e-4


def test_n_samples_prompt_major(engine):
    sp = SamplingParams(do_sample=True, temperature=1.0, max_new_tokens=8, min_new_tokens=8)
    gens = engine.generate(PROMPTS, sp, n=4, seed=1)
    assert [g.prompt_index for g in gens] == [0] * 4 + [1] * 4 + [2] * 4
    for i in range(len(PROMPTS)):
        group = [tuple(g.token_ids) for g in gens[4 * i: 4 * i + 4]]
        assert len(set(group)) > 1, "samples of one prompt should differ"


@pytest.mark.slow
def test_eos_stops_and_is_kept(tiny, engine):
    path, _ = tiny
    sp = SamplingParams(do_sample=False, max_new_tokens=10, min_new_tokens=0)
    free = engine.generate([PROMPTS[0]], sp)[0].token_ids
    # Make the 4th greedy token (first occurrence) the EOS id: generation must stop right there.
    k = next(i for i in range(3, len(free)) if free[i] not in free[:i])
    stopper = HFRolloutEngine(path, eos_token_id=free[k])
    gens = stopper.generate([PROMPTS[0], PROMPTS[1]], sp)
    assert gens[0].token_ids == free[: k + 1] and gens[0].finish_reason == "stop"
    assert len(gens[0].logprobs) == k + 1
    if free[k] not in engine.generate([PROMPTS[1]], sp)[0].token_ids:
        assert gens[1].finish_reason == "length" and len(gens[1].token_ids) == 10


@pytest.mark.slow
def test_min_new_tokens_blocks_early_eos(tiny, engine):
    path, _ = tiny
    def greedy(min_new):
        return SamplingParams(do_sample=False, max_new_tokens=6, min_new_tokens=min_new)

    first = engine.generate([PROMPTS[2]], greedy(0))[0]
    stopper = HFRolloutEngine(path, eos_token_id=first.token_ids[0])
    now = stopper.generate([PROMPTS[2]], greedy(0))[0]
    assert now.token_ids == first.token_ids[:1] and now.finish_reason == "stop"
    held = stopper.generate([PROMPTS[2]], greedy(3))[0]
    assert len(held.token_ids) >= 3 and first.token_ids[0] not in held.token_ids[:3]


@pytest.mark.slow
def test_seed_reproducible(engine):
    sp = SamplingParams(do_sample=True, temperature=1.0, max_new_tokens=8, min_new_tokens=8)
    a = [g.token_ids for g in engine.generate(PROMPTS, sp, n=2, seed=123)]
    b = [g.token_ids for g in engine.generate(PROMPTS, sp, n=2, seed=123)]
    c = [g.token_ids for g in engine.generate(PROMPTS, sp, n=2, seed=124)]
    assert a == b and a != c


@pytest.mark.slow
def test_top_k_disabled_values_agree(engine):
    base = dict(do_sample=True, temperature=1.0, max_new_tokens=6, min_new_tokens=6)
    runs = [[g.token_ids for g in engine.generate(PROMPTS, SamplingParams(top_k=k, **base), seed=5)]
            for k in (0, -1, VOCAB, 1000000)]
    assert all(r == runs[0] for r in runs)
    top1 = engine.generate(PROMPTS, SamplingParams(top_k=1, **base), seed=5)
    greedy = engine.generate(PROMPTS, SamplingParams(do_sample=False, max_new_tokens=6, min_new_tokens=6))
    assert [g.token_ids for g in top1] == [g.token_ids for g in greedy]


@pytest.mark.slow
def test_load_weights_in_place(tiny):
    path, model = tiny
    eng = HFRolloutEngine(path)
    sp = SamplingParams(do_sample=False, max_new_tokens=8, min_new_tokens=0)
    before = [g.token_ids for g in eng.generate(PROMPTS, sp)]
    new = _tiny_model(seed=1)
    params_before = {n: p for n, p in eng.model.named_parameters()}
    eng.load_weights(new.state_dict().items())  # includes the tied lm_head.weight
    assert all(p is params_before[n] for n, p in eng.model.named_parameters()), "must copy in place"
    after = [g.token_ids for g in eng.generate(PROMPTS, sp)]
    assert after != before
    for g, toks in zip(eng.generate(PROMPTS, sp), after):
        want = _hf_greedy(new, PROMPTS[g.prompt_index], 8)
        assert toks == (want[: want.index(EOS) + 1] if EOS in want else want)
    # Without the tied alias it is just as complete.
    eng.load_weights((n, p) for n, p in model.named_parameters())
    assert [g.token_ids for g in eng.generate(PROMPTS, sp)] == before


def test_load_weight_stream_copies_pieces_in_place(tiny):
    """A weight stream with buckets smaller than the embedding: tensors arrive in pieces through
    one reused buffer; the engine copies each piece into place and ends with the new weights."""
    from stream_helpers import stream_of

    path, model = tiny
    eng = HFRolloutEngine(path)
    new = _tiny_model(seed=2)
    state = {n: p.detach() for n, p in new.named_parameters()}  # tied lm_head.weight left out
    bucket = 256  # bytes: every matrix comes in several pieces
    assert max(t.numel() * t.element_size() for t in state.values()) > 4 * bucket
    params_before = {n: p for n, p in eng.model.named_parameters()}
    with stream_of(state, bucket) as stream:
        eng.load_weight_stream(stream)
    assert [b.numel() for b in stream.link.buffers] == [bucket, bucket]  # two buckets in flight at most
    assert all(p is params_before[n] for n, p in eng.model.named_parameters()), "must copy in place"
    for name, value in new.state_dict().items():
        assert torch.equal(eng.model.state_dict()[name], value), name
    with pytest.raises(KeyError, match="model.norm.weight"):  # checked before any piece arrives
        eng.load_weight_stream(stream_of({k: v for k, v in state.items() if k != "model.norm.weight"}, bucket))


def test_load_weights_strict(tiny):
    path, model = tiny
    eng = HFRolloutEngine(path)
    good = dict(model.state_dict())
    with pytest.raises(KeyError, match="model.layers.9.bogus"):
        eng.load_weights(list(good.items()) + [("model.layers.9.bogus", torch.zeros(1))])
    missing = {k: v for k, v in good.items() if k != "model.norm.weight"}
    with pytest.raises(KeyError, match="model.norm.weight"):
        eng.load_weights(missing.items())
    bad = dict(good, **{"model.norm.weight": torch.zeros(3)})
    with pytest.raises(ValueError, match="model.norm.weight"):
        eng.load_weights(bad.items())
    # nothing was written by the failed calls
    assert torch.equal(eng.model.model.norm.weight, model.model.norm.weight)


def test_offload_onload_noop_on_cpu(engine):
    engine.offload()
    engine.onload()
    assert next(engine.model.parameters()).device.type == "cpu"


def test_factory(tiny):
    from rlinf.utils.typed_config import ConfigError

    with pytest.raises(ValueError, match=r"rollout\.backend.*huggingface, vllm, sglang"):
        make_rollout_engine("trt", tiny[0], RolloutConfig())
    with pytest.raises(ConfigError):
        make_rollout_engine("trt", tiny[0], RolloutConfig())
    eng = make_rollout_engine("huggingface", tiny[0], RolloutConfig(eos=5), max_batch_size=4)
    assert isinstance(eng, HFRolloutEngine) and eng.eos_token_ids == [5] and eng.max_batch_size == 4


def test_rejects_empty_prompt(engine):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([[1], []], SamplingParams())


# ---- the lean decode loop (rlinf.engines.rollout.lean_decode) vs model.generate ----------------

@pytest.mark.slow
def test_lean_loop_is_the_default_and_agrees_with_generate(tiny, engine):
    path, _ = tiny
    assert engine.decode_path == "lean"
    plain = HFRolloutEngine(path, max_batch_size=64, decode="generate")
    assert plain.decode_path.startswith("generate (")
    greedy = SamplingParams(do_sample=False, max_new_tokens=10, min_new_tokens=0)
    assert [g.token_ids for g in engine.generate(PROMPTS, greedy, n=2)] == \
        [g.token_ids for g in plain.generate(PROMPTS, greedy, n=2)]
    for sp in (SamplingParams(do_sample=True, temperature=0.8, top_k=20, top_p=0.9, max_new_tokens=12,
                              min_new_tokens=3, repetition_penalty=1.1, frequency_penalty=0.5),
               SamplingParams(do_sample=True, temperature=1.0, max_new_tokens=9, min_new_tokens=9, min_p=0.05)):
        lean, ref = engine.generate(PROMPTS, sp, n=3, seed=11), plain.generate(PROMPTS, sp, n=3, seed=11)
        assert [g.token_ids for g in lean] == [g.token_ids for g in ref]  # same RNG draws, same scores
        assert [g.finish_reason for g in lean] == [g.finish_reason for g in ref]
        for a, b in zip(lean, ref):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


@pytest.mark.slow
def test_lean_loop_stops_when_every_row_finished(tiny):
    path, _ = tiny
    sp = SamplingParams(do_sample=False, max_new_tokens=10, min_new_tokens=0)
    lean = HFRolloutEngine(path, eos_token_id=[3, 5, 7])
    plain = HFRolloutEngine(path, eos_token_id=[3, 5, 7], decode="generate")
    free = HFRolloutEngine(path).generate([PROMPTS[0]], sp)[0].token_ids
    stop = HFRolloutEngine(path, eos_token_id=free[2]), HFRolloutEngine(path, eos_token_id=free[2], decode="generate")
    assert [g.token_ids for g in lean.generate(PROMPTS, sp)] == [g.token_ids for g in plain.generate(PROMPTS, sp)]
    got = stop[0].generate([PROMPTS[0]] * 3, sp)
    assert [g.token_ids for g in got] == [g.token_ids for g in stop[1].generate([PROMPTS[0]] * 3, sp)]
    assert all(g.finish_reason == "stop" and len(g.token_ids) <= 3 for g in got)


class _CharTokenizer:
    """Token ``i`` reads as the character ``chr(0x4E00 + i)`` (one character per token)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(0x4E00 + i) for i in ids)

    def batch_decode(self, rows, skip_special_tokens=True):
        return [self.decode(r) for r in rows]


@pytest.mark.slow
def test_stop_strings_end_rows_while_decoding(tiny, monkeypatch):
    """With the tokenizer, a row ends at the token completing a stop string (as vLLM does) and
    the batch stops decoding once every row has; without it the row runs to max_new_tokens."""
    from rlinf.engines.rollout import lean_decode

    path, _ = tiny
    sp = SamplingParams(do_sample=False, max_new_tokens=12, min_new_tokens=0)
    free = HFRolloutEngine(path).generate([PROMPTS[0]], sp)[0].token_ids
    assert len(free) == 12 and EOS not in free
    stop = _CharTokenizer().decode(free[3:5])
    steps = []
    real_forward = lean_decode._forward
    monkeypatch.setattr(lean_decode, "_forward", lambda *a, **k: steps.append(1) or real_forward(*a, **k))
    for decode in ("lean", "generate"):
        eng = HFRolloutEngine(path, decode=decode)
        eng.set_tokenizer(_CharTokenizer())
        steps.clear()
        got = eng.generate([PROMPTS[0]] * 2, replace(sp, stop=(stop,)))
        assert [g.token_ids for g in got] == [free[:5]] * 2 and {g.finish_reason for g in got} == {"stop"}
        assert [len(g.logprobs) for g in got] == [5, 5]
        if decode == "lean":
            assert len(steps) == 5  # prefill + 4 decode steps, not 12
    untold = HFRolloutEngine(path).generate([PROMPTS[0]], replace(sp, stop=(stop,)))[0]
    assert untold.token_ids == free and untold.finish_reason == "length"  # the caller cuts (cut_at_stop)


def test_other_architectures_fall_back_to_generate(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64,
                               eos_token_id=EOS, bos_token_id=1)).save_pretrained(tmp_path)
    eng = HFRolloutEngine(str(tmp_path))
    assert eng.decode_path == "generate (model_type 'gpt2' is not one of qwen2, qwen3, llama, mistral)"
    gens = eng.generate(PROMPTS, SamplingParams(do_sample=False, max_new_tokens=4, min_new_tokens=4))
    assert all(len(g.token_ids) == 4 for g in gens)


@pytest.mark.slow
def test_lean_loop_runs_llama_and_qwen3(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  eos_token_id=EOS, bos_token_id=1, pad_token_id=0, initializer_range=0.3)
    for name, cls, cfg in (("llama", LlamaForCausalLM, LlamaConfig(**common)),
                           ("qwen3", Qwen3ForCausalLM, Qwen3Config(head_dim=16, **common))):
        torch.manual_seed(0)
        cls(cfg).save_pretrained(tmp_path / name)
        lean, plain = HFRolloutEngine(str(tmp_path / name)), HFRolloutEngine(str(tmp_path / name), decode="generate")
        assert lean.decode_path == "lean", name
        sp = SamplingParams(do_sample=True, temperature=1.0, max_new_tokens=8, min_new_tokens=0)
        assert [g.token_ids for g in lean.generate(PROMPTS, sp, n=2, seed=3)] == \
            [g.token_ids for g in plain.generate(PROMPTS, sp, n=2, seed=3)], name
