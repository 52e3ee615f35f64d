"""The generation worker builds a well-formed RolloutBatch from engine output."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.config.rollout import RolloutConfig
from rlinf.data.prompt_dataset import Prompt, PromptBatch
from rlinf.workers.rollout.generation_worker import GenerationWorker


def tiny_model_with_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {f"w{i}": i for i in range(64)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w2"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="w0", eos_token="w1").save_pretrained(path)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True, eos_token_id=1, pad_token_id=0)
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    return str(path)


def test_generate_builds_group_major_batch(tmp_path):
    worker = GenerationWorker(tiny_model_with_tokenizer(tmp_path), RolloutConfig(backend="huggingface",
                                                                                 detokenize=True))
    prompts = PromptBatch((Prompt(7, (5, 6, 7), "3"), Prompt(9, (8,), "4")))
    batch = worker.generate(prompts, SamplingParams(max_new_tokens=5, min_new_tokens=0), n=3, seed=1)
    assert batch.batch_size == 6 and batch.group_size == 3
    assert batch.group_ids.tolist() == [7, 7, 7, 9, 9, 9] and batch.answers == ["3"] * 3 + ["4"] * 3
    assert batch.prompt_ids[0].tolist() == [5, 6, 7] and batch.prompt_ids[3].tolist() == [0, 0, 8]
    assert batch.rollout_logprobs.shape == batch.response_ids.shape
    assert torch.all(batch.rollout_logprobs[batch.response_mask == 1] <= 0)
    assert torch.all(batch.rollout_logprobs[batch.response_mask == 0] == 0)
    assert all(r in ("stop", "length") for r in batch.finish_reasons)
    assert batch.texts[0] == worker.tokenizer.decode(
        batch.response_ids[0][batch.response_mask[0] == 1].tolist(), skip_special_tokens=True)
    assert batch.policy_version == 0


def test_the_saved_tokenizer_is_loaded_not_the_model_types(tmp_path):
    from rlinf.data.tokenizer import load_tokenizer

    tok = load_tokenizer(tiny_model_with_tokenizer(tmp_path))
    assert tok("w5 w6")["input_ids"] == [5, 6]  # AutoTokenizer would give a Qwen2Tokenizer: []


PROMPTS = PromptBatch((Prompt(7, (5, 6, 7), "3"), Prompt(9, (8,), "4"), Prompt(11, (9, 9), "5")))
GREEDY = SamplingParams(do_sample=False, max_new_tokens=4, min_new_tokens=0)


def test_without_detokenize_the_reward_decodes_the_same_text(tmp_path):
    from rlinf.config.reward import RewardConfig
    from rlinf.workers.reward.math_reward_worker import MathRewardWorker

    model = tiny_model_with_tokenizer(tmp_path)
    plain = GenerationWorker(model, RolloutConfig()).generate(PROMPTS, GREEDY, n=2, seed=0)
    texted = GenerationWorker(model, RolloutConfig(detokenize=True)).generate(PROMPTS, GREEDY, n=2, seed=0)
    assert plain.texts == [] and len(texted.texts) == 6
    reward = MathRewardWorker(RewardConfig(), tokenizer_path=model)
    try:
        assert reward.texts_of(plain) == texted.texts
        assert reward.score_batch(plain)[0].rewards.tolist() == reward.score_batch(texted)[0].rewards.tolist()
    finally:
        reward.close()


def test_print_outputs_prints_the_first_sample(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    worker = GenerationWorker(tiny_model_with_tokenizer(tmp_path), RolloutConfig(print_outputs=True))
    batch = worker.generate(PROMPTS, GREEDY, n=1, seed=0)
    out = capsys.readouterr().out
    assert "3 responses; first: prompt 'w5 w6 w7'" in out
    assert f"response ids {batch.response_ids[0][batch.response_mask[0] == 1].tolist()}" in out
    assert batch.texts == []  # printing does not turn detokenize on


def test_chunked_generation_keeps_order_and_greedy_results(tmp_path):
    worker = GenerationWorker(tiny_model_with_tokenizer(tmp_path), RolloutConfig())
    whole = worker.generate(PROMPTS, GREEDY, n=2, seed=0)
    chunked = worker.generate(PROMPTS, GREEDY, n=2, seed=0, chunk_prompts=1)
    assert chunked.group_ids.tolist() == whole.group_ids.tolist() == [7, 7, 9, 9, 11, 11]
    for i in range(6):
        a = whole.response_ids[i][whole.response_mask[i] == 1].tolist()
        b = chunked.response_ids[i][chunked.response_mask[i] == 1].tolist()
        assert a == b


def test_validate_weight_checks_every_tensor_and_saves_them(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    from safetensors.torch import load_file

    worker = GenerationWorker(tiny_model_with_tokenizer(tmp_path / "m"), RolloutConfig(
        validate_weight=True, validate_save_dir=str(tmp_path / "w")))
    sent = {k: v.clone() for k, v in worker.engine.named_weights().items()}
    worker._validate_weights(sent)
    saved = load_file(str(tmp_path / "w" / "rollout_weights.safetensors"))
    assert saved.keys() == sent.keys() and all(torch.equal(saved[k], sent[k]) for k in sent)
    name = next(iter(sent))
    sent[name] = sent[name] + 1.0
    with pytest.raises(RuntimeError, match=f"rollout.validate_weight: {name!r} differs"):
        worker._validate_weights(sent)


def test_stop_strings_stop_ids_frequency_penalty_and_min_p(tmp_path):
    """Greedy on the tiny model: a stop string cuts the response at the token completing it, a
    stop token id ends it there, a large frequency penalty forbids repeating a token."""
    worker = GenerationWorker(tiny_model_with_tokenizer(tmp_path), RolloutConfig(detokenize=True))
    long = SamplingParams(do_sample=False, max_new_tokens=12, min_new_tokens=12)
    base = worker.generate(PROMPTS, long, n=1, seed=0)
    first = base.response_ids[0][base.response_mask[0] == 1].tolist()
    stop_word = worker.tokenizer.decode([first[3]])
    cut = worker.generate(PROMPTS, replace(long, stop=(stop_word,), min_new_tokens=0), n=1, seed=0)
    got = cut.response_ids[0][cut.response_mask[0] == 1].tolist()
    assert got == first[:first.index(first[3]) + 1] and cut.finish_reasons[0] == "stop"
    by_id = worker.generate(PROMPTS, replace(long, stop_token_ids=(first[2],), min_new_tokens=0), n=1, seed=0)
    ids = by_id.response_ids[0][by_id.response_mask[0] == 1].tolist()
    assert ids == first[:first.index(first[2]) + 1] and by_id.finish_reasons[0] == "stop"
    short = replace(long, min_new_tokens=0, max_new_tokens=8)
    plain = worker.generate(PROMPTS, short, n=1, seed=0)
    penalised = worker.generate(PROMPTS, replace(short, frequency_penalty=2.0), n=1, seed=0)
    for i in range(3):
        rows = [b.response_ids[i][b.response_mask[i] == 1].tolist() for b in (plain, penalised)]
        assert len(set(rows[0])) < len(rows[0])  # this tiny model repeats its token greedily
        assert len(set(rows[1])) == len(rows[1])  # a penalty of 2 per occurrence stops that
    sampled = worker.generate(PROMPTS, SamplingParams(max_new_tokens=6, min_p=0.999, min_new_tokens=6), n=1, seed=3)
    greedy = worker.generate(PROMPTS, SamplingParams(do_sample=False, max_new_tokens=6, min_new_tokens=6), n=1, seed=3)
    assert torch.equal(sampled.response_ids, greedy.response_ids)  # min_p ~1 keeps only the top token
