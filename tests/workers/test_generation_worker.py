"""The generation worker builds a well-formed RolloutBatch from engine output."""

from __future__ import annotations

import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.config.rollout import RolloutConfig
from rlinf.data.prompt_dataset import PromptBatch, Prompt
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
    worker = GenerationWorker(tiny_model_with_tokenizer(tmp_path), RolloutConfig(backend="huggingface"))
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
