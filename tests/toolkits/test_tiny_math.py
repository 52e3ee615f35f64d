"""Tests of the tiny math assets: dataset, tokenizer, model folder, warm start and probe helpers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from toolkits.tiny_math import make_dataset as md
from toolkits.tiny_math.evaluate import extract_boxed, generate, is_correct
from toolkits.tiny_math.grpo_probe import group_advantages, response_mask
from toolkits.tiny_math.tokenizer import (
    EOS_TOKEN,
    PAD_TOKEN,
    build_tokenizer,
    load_tokenizer,
    save_tokenizer,
)

DATA = Path(__file__).resolve().parents[2] / "examples" / "math" / "data"
SMALL = md.DatasetSpec(max_operand=99, n_train=300, n_val=50, n_sft=100, seed=3)


@pytest.fixture(scope="module")
def tokenizer():
    """A freshly trained tokenizer."""
    return build_tokenizer()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random model folder written by make_model."""
    from toolkits.tiny_math.make_model import make_model

    return make_model(tmp_path_factory.mktemp("tiny_math") / "base", size="tiny")


# ----------------------------------------------------------------------------- dataset


def test_dataset_is_deterministic_and_seed_dependent():
    assert md.build(SMALL) == md.build(SMALL)
    other = md.build(md.DatasetSpec(**{**SMALL.__dict__, "seed": 4}))
    assert other["val"] != md.build(SMALL)["val"]


@pytest.mark.parametrize("ops", ["+", "+-"])
def test_splits_are_disjoint_and_golds_are_right(ops):
    spec = md.DatasetSpec(**{**SMALL.__dict__, "ops": ops})
    d = md.build(spec)
    train, val = {r["prompt"] for r in d["train"]}, {r["prompt"] for r in d["val"]}
    assert len(train) == spec.n_train and len(val) == spec.n_val
    assert not train & val
    assert {r["prompt"] for r in d["sft"]} <= train
    for r in d["train"] + d["val"] + d["sft"]:
        a, op, b = re.match(r"What is (\d+) ([+-]) (\d+)\?", r["prompt"]).groups()
        assert int(r["answer"]) == md.solve(int(a), op, int(b)) >= 0


def test_too_small_problem_space_is_rejected():
    with pytest.raises(ValueError):
        md.build(md.DatasetSpec(max_operand=3, n_train=20, n_val=5, n_sft=5))


def test_worked_response_is_column_addition():
    assert md.make_response(358, "+", 288, worked=True) == (
        "Units 8+8=16, tens 5+8+1=14, hundreds 3+2+1=6, so the answer is \\boxed{646}"
    )
    assert md.make_response(58, "+", 88) == "58 + 88 = 146, so the answer is \\boxed{146}"
    for a, b in [(0, 0), (5, 7), (999, 999), (7, 120), (40, 960)]:
        assert extract_boxed(md.make_response(a, "+", b, worked=True)) == str(a + b)


def test_shipped_files_match_the_generator():
    spec = md.DatasetSpec()
    built = md.build(spec)
    for name, rows in built.items():
        assert md.read_jsonl(DATA / f"{name}.jsonl") == rows, name
    assert sum((DATA / f"{n}.jsonl").stat().st_size for n in built) < 1_000_000


def test_shipped_golds_parse_and_sft_answers_match():
    train, val = md.read_jsonl(DATA / "train.jsonl"), md.read_jsonl(DATA / "val.jsonl")
    sft = md.read_jsonl(DATA / "sft.jsonl")
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in val}
    for r in train + val + sft:
        int(r["answer"])
        assert set(r) >= {"prompt", "answer"}
    for r in sft:
        assert r["response"].endswith("\\boxed{" + r["answer"] + "}")
        assert extract_boxed(r["response"]) == r["answer"]
        assert is_correct(r["response"], r["answer"])
    worked = sum(r["response"].startswith("Units") for r in sft) / len(sft)
    assert worked == pytest.approx(md.DatasetSpec().worked_frac, abs=0.01)


# ----------------------------------------------------------------------------- reward helpers


def test_boxed_extraction_and_compare():
    assert extract_boxed("x \\boxed{1} then \\boxed{{2}3}") == "{2}3"
    assert extract_boxed("no box") is None and extract_boxed("\\boxed{12") is None
    assert is_correct("so \\boxed{ 42 }", "42") and is_correct("\\boxed{042}", "42")
    assert not is_correct("\\boxed{41}", "42") and not is_correct("\\boxed{x}", "42")


# ----------------------------------------------------------------------------- tokenizer


@pytest.mark.parametrize(
    "text",
    ["What is 358 + 288? Put the final answer in \\boxed{}.", "Units 8+8=16,\n\ttens  é ∑ 😀", ""],
)
def test_tokenizer_round_trip(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == text


def test_tokenizer_training_is_deterministic(tokenizer):
    assert build_tokenizer().backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()


def test_digits_are_single_tokens(tokenizer):
    assert len(tokenizer("1234567890", add_special_tokens=False).input_ids) == 10
    for d in "0123456789":
        assert tokenizer.convert_tokens_to_ids(d) != tokenizer.unk_token_id
    for tok in (PAD_TOKEN, "<|im_start|>", EOS_TOKEN):
        assert len(tokenizer(tok, add_special_tokens=False).input_ids) == 1
    assert tokenizer.eos_token == EOS_TOKEN and tokenizer.pad_token == PAD_TOKEN
    assert tokenizer.bos_token is not None and tokenizer.pad_token_id != tokenizer.eos_token_id


def test_chat_template(tokenizer):
    msgs = [{"role": "user", "content": "What is 1 + 2?"}]
    text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nWhat is 1 + 2?<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert list(ids) == tokenizer(text, add_special_tokens=False).input_ids
    no_gen = tokenizer.apply_chat_template(msgs, tokenize=False)
    assert no_gen == "<|im_start|>user\nWhat is 1 + 2?<|im_end|>\n"


def test_save_load_and_auto_tokenizer_give_identical_ids(tokenizer, tmp_path):
    from transformers import AutoTokenizer

    save_tokenizer(tokenizer, tmp_path)
    # A folder that also holds a qwen2 config must still load this exact tokenizer.
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    text = "<|im_start|>user\nWhat is 358 + 288?<|im_end|>\n<|im_start|>assistant\n"
    want = tokenizer(text, add_special_tokens=False).input_ids
    for loaded in (load_tokenizer(tmp_path), AutoTokenizer.from_pretrained(tmp_path)):
        assert loaded(text, add_special_tokens=False).input_ids == want
        assert loaded(text).input_ids == want  # no bos / eos added implicitly
        assert loaded.get_vocab() == tokenizer.get_vocab()
        assert (loaded.pad_token_id, loaded.eos_token_id) == (
            tokenizer.pad_token_id,
            tokenizer.eos_token_id,
        )
        assert loaded.apply_chat_template(
            [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
        ).endswith("<|im_start|>assistant\n")


# ----------------------------------------------------------------------------- model


@pytest.mark.slow
def test_model_folder_loads_with_auto_classes_and_generates(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for f in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
        assert (model_dir / f).is_file(), f
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert model.config.model_type == "qwen2" and model.config.vocab_size == len(tok)
    assert model.generation_config.eos_token_id == tok.eos_token_id
    prompt_ids, response_ids, texts = generate(
        model, tok, ["What is 1 + 2?", "What is 10 + 20?"], num_samples=2, temperature=1.0,
        max_new_tokens=4,
    )
    assert prompt_ids.shape[0] == response_ids.shape[0] == len(texts) == 4
    assert 1 <= response_ids.shape[1] <= 4


def test_model_sizes():
    from transformers import Qwen2ForCausalLM

    from toolkits.tiny_math.make_model import make_config, num_params

    tok = build_tokenizer()
    counts = {}
    for size in ("tiny", "small"):
        with torch.device("meta"):
            counts[size] = num_params(Qwen2ForCausalLM(make_config(tok, size)))
    assert 0.3e6 < counts["tiny"] < 2e6
    assert 15e6 < counts["small"] < 25e6


@pytest.mark.slow
def test_warm_start_writes_a_loadable_folder(model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from toolkits.tiny_math.warm_start import IGNORE, collate, encode_sft, warm_start

    rows = md.read_jsonl(DATA / "sft.jsonl")[:16]
    tok = load_tokenizer(model_dir)
    batch = collate(encode_sft(tok, rows[:2]), tok.pad_token_id)
    first = batch["labels"][0]
    assert (first[: (first != IGNORE).nonzero()[0]] == IGNORE).all()
    assert tok.eos_token_id in first.tolist()
    md.write_jsonl(rows, tmp_path / "sft.jsonl")
    res = warm_start(model_dir, tmp_path / "sft.jsonl", tmp_path / "warm", steps=2, batch_size=4)
    assert res["loss"] == res["loss"]  # not NaN
    AutoModelForCausalLM.from_pretrained(tmp_path / "warm")


# ----------------------------------------------------------------------------- probe helpers


def test_grpo_helpers():
    adv = group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]), 4)
    assert torch.allclose(adv[4:], torch.zeros(4))
    assert adv[0] > 0 > adv[1] and abs(adv[:4].sum()) < 1e-5
    mask = response_mask(torch.tensor([[5, 2, 0, 0], [5, 6, 7, 8]]), eos_id=2)
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]


# ----------------------------------------------------------------------------- shipped warm start


def test_shipped_warm_start_matches_the_default_settings_and_loads():
    from transformers import AutoModelForCausalLM

    from toolkits.tiny_math.prepare import SHIPPED_DIR, shipped_matches

    settings = {"size": "tiny", "steps": 800, "seed": 0, "sft": "examples/math/data/sft.jsonl"}
    assert shipped_matches(SHIPPED_DIR, settings, DATA / "sft.jsonl") is None
    assert "asked for" in shipped_matches(SHIPPED_DIR, {**settings, "steps": 10}, DATA / "sft.jsonl")
    model = AutoModelForCausalLM.from_pretrained(SHIPPED_DIR)
    assert sum(p.numel() for p in model.parameters()) == 635_136
    assert load_tokenizer(SHIPPED_DIR).decode(load_tokenizer(SHIPPED_DIR)("12+7").input_ids) == "12+7"


def test_prepare_copies_a_matching_shipped_copy_and_rebuilds_a_tampered_one(tmp_path, monkeypatch):
    from toolkits.tiny_math import prepare as prep

    built = []

    def fake_make_model(out, size, seed):
        built.append(("model", size, seed))

    def fake_warm_start(base, sft, warm, steps, seed):
        built.append(("warm", steps))
        Path(warm).mkdir(parents=True)
        (Path(warm) / "model.safetensors").write_bytes(b"trained here")

    monkeypatch.setattr(prep, "_builders", lambda: (fake_make_model, fake_warm_start))
    sft = tmp_path / "sft.jsonl"
    sft.write_text('{"prompt": "1+1", "response": "2"}\n')
    settings = {"size": "tiny", "steps": 5, "seed": 0, "sft": str(sft)}
    made = tmp_path / "made"
    made.mkdir()
    (made / "model.safetensors").write_bytes(b"weights")
    (made / "config.json").write_text("{}")
    prep.ship(made, tmp_path / "shipped", settings, sft)

    warm = prep.prepare(tmp_path / "a", steps=5, sft_path=str(sft), shipped=tmp_path / "shipped")
    assert built == [] and (warm / "model.safetensors").read_bytes() == b"weights"
    assert not (warm / prep.SHIPPED_MANIFEST).exists()
    assert prep.prepare(tmp_path / "a", steps=5, sft_path=str(sft), shipped=tmp_path / "shipped") == warm

    (tmp_path / "shipped" / "model.safetensors").write_bytes(b"weightz")  # tampered
    warm = prep.prepare(tmp_path / "b", steps=5, sft_path=str(sft), shipped=tmp_path / "shipped")
    assert built == [("model", "tiny", 0), ("warm", 5)]
    assert (warm / "model.safetensors").read_bytes() == b"trained here"

    built.clear()  # --rebuild trains even where the copy would match
    prep.ship(made, tmp_path / "shipped", settings, sft)
    prep.prepare(tmp_path / "c", steps=5, sft_path=str(sft), shipped=tmp_path / "shipped", rebuild=True)
    assert built == [("model", "tiny", 0), ("warm", 5)]
