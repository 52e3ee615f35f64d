"""Reward sources beyond the rule: a tiny local sequence-classification reward model, and an LLM
judge reached over real HTTP (a local OpenAI-compatible server started here), combined with the
rule reward by the configured weights; the judge's pool bound, retries, timeouts and failure
policy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from rlinf.config.reward import JudgeConfig, OpenAIConfig, OpenAIEndpointConfig, RewardConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.utils.typed_config import ConfigError, parse_section
from rlinf.workers.reward.math_reward_worker import JudgeError, MathRewardWorker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "utils"))
from openai_server import OpenAIServer

TEXTS = ["so \\boxed{4}", "\\boxed{5}", "I think 4", "no idea"]
ANSWERS = ["4", "4", "4", "4"]


def _batch() -> RolloutBatch:
    batch = RolloutBatch.from_token_lists([[1]] * 4, [[2, 3]] * 4, pad_token_id=0, answers=ANSWERS, texts=TEXTS,
                                          prompt_texts=["2+2?"] * 4)
    return batch


def tiny_reward_model(path) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForSequenceClassification

    vocab = {"<pad>": 0, "<unk>": 1, **{c: i + 2 for i, c in enumerate("0123456789+?\\{}abcdefghijklmnopqrstuvwxyz")}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>").save_pretrained(path)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, num_labels=1, pad_token_id=0)
    Qwen2ForSequenceClassification(cfg).save_pretrained(path)
    return str(path)


def test_reward_model_scores_are_the_models_logits_and_add_with_weights(tmp_path):
    from transformers import AutoModelForSequenceClassification

    from rlinf.data.tokenizer import load_tokenizer

    rm_dir = tiny_reward_model(tmp_path / "rm")
    rule_only = MathRewardWorker(RewardConfig())
    both = MathRewardWorker(RewardConfig(use_reward_model=True,
                                         model=__import__("rlinf.config.rollout",
                                                          fromlist=["ModelRef"]).ModelRef(rm_dir),
                                         rule_weight=0.5, model_weight=2.0, model_micro_batch_size=3))
    try:
        rule, _ = rule_only.score_batch(_batch())
        combined, metrics = both.score_batch(_batch())
        model = AutoModelForSequenceClassification.from_pretrained(rm_dir).eval()
        tok = load_tokenizer(rm_dir)
        expected = []
        for text in TEXTS:  # one at a time, unpadded: the logit of the whole sequence
            ids = torch.tensor([tok("2+2?" + text, add_special_tokens=False)["input_ids"]])
            expected.append(float(model(input_ids=ids).logits[0, 0]))
        rm = torch.tensor(expected)
        assert torch.allclose(combined.rewards, 0.5 * rule.rewards + 2.0 * rm, atol=1e-5)
        assert metrics["reward/model_mean"] == pytest.approx(float(rm.mean()), abs=1e-5)
        assert combined.correct.tolist() == [True, False, False, False]
    finally:
        rule_only.close()
        both.close()


def judge_cfg(server: OpenAIServer, **judge) -> RewardConfig:
    return parse_section(RewardConfig, {
        "rule_weight": 0.0, "judge_weight": 1.0,
        "judge": {"enabled": True, "backoff_s": 0.01, **judge},
        "openai_config": {"model": "default-model", "base_url": "http://127.0.0.1:9/v1",
                          "openai_api_key_env_var": "RLINF_TEST_KEY",
                          "evaluation": {"model": "judge-model", "base_url": server.base_url}}}, "reward")


def test_judge_scores_over_http_with_the_per_task_model_and_key(monkeypatch):
    monkeypatch.setenv("RLINF_TEST_KEY", "sekret")
    server = OpenAIServer(delay_s=0.05)
    worker = MathRewardWorker(judge_cfg(server, max_connections=2))
    try:
        batch, metrics = worker.score_batch(_batch())
        # the test server says 1 when the response contains the reference answer
        assert batch.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]
        assert metrics["reward/judge_failures"] == 0 and metrics["reward/judge_mean"] == 0.5
        assert {r["model"] for r in server.requests} == {"judge-model"}
        assert {r["auth"] for r in server.requests} == {"Bearer sekret"}
        assert server.peak_in_flight <= 2  # the pool bound
    finally:
        worker.close()
        server.close()


def test_judge_retries_then_counts_failures_or_stops():
    server = OpenAIServer(fail_first=2)
    worker = MathRewardWorker(judge_cfg(server, max_connections=1, max_retries=3))
    try:
        batch, metrics = worker.score_batch(_batch())  # the first two attempts fail and are retried
        assert batch.rewards.tolist() == [1.0, 0.0, 1.0, 0.0] and metrics["reward/judge_failures"] == 0
        assert len(server.requests) == 6
    finally:
        worker.close()
        server.close()
    server = OpenAIServer(fail_first=100)
    zero = MathRewardWorker(judge_cfg(server, max_retries=1))
    stop = MathRewardWorker(judge_cfg(server, max_retries=0, on_failure="stop"))
    try:
        batch, metrics = zero.score_batch(_batch())
        assert batch.rewards.tolist() == [0.0] * 4 and metrics["reward/judge_failures"] == 4
        assert metrics["reward/judge_attempts"] == 2
        with pytest.raises(JudgeError, match="HTTP 500"):
            stop.score_batch(_batch())
    finally:
        zero.close()
        stop.close()
        server.close()


def test_judge_timeout_is_a_failure_not_a_hang():
    import time

    server = OpenAIServer(delay_s=2.0)
    worker = MathRewardWorker(judge_cfg(server, timeout_s=0.2, max_retries=1))
    try:
        t = time.perf_counter()
        batch, metrics = worker.score_batch(_batch())
        assert time.perf_counter() - t < 5.0
        assert metrics["reward/judge_failures"] == 4 and batch.rewards.tolist() == [0.0] * 4
    finally:
        worker.close()
        server.close()


def test_judge_and_reward_model_config_errors_name_their_key():
    with pytest.raises(ConfigError, match="reward.openai_config.base_url"):
        parse_section(RewardConfig, {"judge": {"enabled": True}}, "reward")
    with pytest.raises(ConfigError, match="reward.judge.prompt_template"):
        parse_section(RewardConfig, {"judge": {"prompt_template": "{question}"}}, "reward")
    with pytest.raises(ConfigError, match="reward.model.model_path"):
        parse_section(RewardConfig, {"use_reward_model": True}, "reward")
    cfg = OpenAIConfig(model="m", base_url="u", keypoint_detection=OpenAIEndpointConfig(model="small"))
    assert cfg.endpoint("keypoint_detection").model == "small" and cfg.endpoint("evaluation").model == "m"
    assert JudgeConfig().template.count("{response}") == 1
