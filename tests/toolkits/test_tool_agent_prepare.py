"""The tool agent's tiny model kit: tasks, tokenizer, warm-start examples, prepare and probe."""

from __future__ import annotations

import json
import random

import pytest

from rlinf.data.tokenizer import load_tokenizer as load_pinned_tokenizer
from rlinf.engines.tools.formats import get_format, render_tool_messages
from toolkits.tool_agent.make_tasks import (
    answer_text,
    build_tasks,
    guess_product,
    parse_prompt,
    read_jsonl,
    tool_call_text,
)
from toolkits.tool_agent.prepare import STAMP, prepare
from toolkits.tool_agent.probe import main as probe_main
from toolkits.tool_agent.probe import run_probe
from toolkits.tool_agent.tokenizer import build_tokenizer
from toolkits.tool_agent.warm_start import IGNORE, SftMixture, encode_episode


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_tool")
    val, train = build_tasks(n_train=40, n_val=4)
    train_path = root / "train.jsonl"
    train_path.write_text("".join(json.dumps(r) + "\n" for r in train))
    warm = prepare(root / "out", train_path, steps=3, copy_steps=1, batch_size=4)
    return root, train_path, warm, val


def test_tasks_are_deterministic_disjoint_and_right():
    val, train = build_tasks(n_train=300, n_val=50, seed=3)
    assert (val, train) == build_tasks(n_train=300, n_val=50, seed=3)
    assert build_tasks(n_train=300, n_val=50, seed=4) != (val, train)
    assert len(val) == 50 and len(train) == 300
    assert not {r["prompt"] for r in val} & {r["prompt"] for r in train}
    for r in val + train:
        a, b = parse_prompt(r["prompt"])
        assert 100 <= a <= 999 and 10 <= b <= 999 and r["answer"] == str(a * b)
    lengths = [len(r["answer"]) for r in train]
    assert all(70 < lengths.count(n) < 130 for n in (4, 5, 6))  # product lengths about equally often
    assert 60 < sum(parse_prompt(r["prompt"])[1] < 100 for r in train) < 240  # b of two and three digits


def test_shipped_task_files_are_the_default_draw():
    val, train = build_tasks()
    assert read_jsonl("examples/tool_agent/data/mul_val.jsonl") == val
    assert read_jsonl("examples/tool_agent/data/mul_train.jsonl") == train
    assert len(val) == 128 and len(train) == 2000


def test_guess_is_plausible_and_wrong():
    rng = random.Random(0)
    for a, b in [(347, 86), (100, 10), (999, 999), (512, 64)]:
        for _ in range(50):
            g = guess_product(a, b, rng)
            assert len(g) == len(str(a * b)) and g[0] == str(a * b)[0] and g != str(a * b)


def test_tokenizer_round_trip_and_tool_rendering(tok):
    text = 'What is 347 * 86?\n' + tool_call_text(347, 86) + " " + answer_text(29842) + " ünïcode"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    assert [tok.decode([i]) for i in tok.encode("29842", add_special_tokens=False)] == list("29842")
    assert len(tok.encode(tool_call_text(347, 86), add_special_tokens=False)) <= 14
    assert render_tool_messages(tok, ["29842"], ended_with_eos=True) == (
        "\n<|im_start|>tool\n29842<|im_end|>\n<|im_start|>assistant\n")
    chat = [{"role": "user", "content": "hi"}]
    schema = [{"type": "function", "function": {"name": "calculator"}}]
    assert tok.apply_chat_template(chat, tools=schema, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    # the call's syntax survives the agent loop's decode (not special tokens)
    ids = tok.encode(tool_call_text(347, 86), add_special_tokens=False)
    assert get_format("hermes").parse(tok.decode(ids, skip_special_tokens=True)).calls[0].arguments == {
        "expression": "347*86"}


def test_tool_example_is_built_segment_by_segment(tok):
    rows = build_tasks(n_train=3, n_val=0)[1]
    mix = SftMixture(tok, rows, tool_fraction=1.0)
    ids, labels = mix.draw(1)
    a, b = parse_prompt(rows[1]["prompt"])
    prompt = tok(tok.apply_chat_template([{"role": "user", "content": rows[1]["prompt"]}], tokenize=False,
                                         add_generation_prompt=True), add_special_tokens=False).input_ids
    turn1 = tok.encode(tool_call_text(a, b), add_special_tokens=False) + [tok.eos_token_id]
    cont = tok.encode(get_format("hermes").continuation([str(a * b)], tok, True), add_special_tokens=False)
    turn2 = tok.encode(answer_text(a * b), add_special_tokens=False) + [tok.eos_token_id]
    assert ids == prompt + turn1 + cont + turn2
    assert labels == [IGNORE] * len(prompt) + turn1 + [IGNORE] * len(cont) + turn2
    assert tok.decode(cont) == f"\n<|im_start|>tool\n{a * b}<|im_end|>\n<|im_start|>assistant\n"


def test_direct_example_guesses_and_mixture_fraction(tok):
    rows = build_tasks(n_train=200, n_val=0)[1]
    mix = SftMixture(tok, rows, tool_fraction=0.0, seed=1)
    ids, labels = mix.draw(0)
    model_text = tok.decode([i for i, lab in zip(ids, labels) if lab != IGNORE])
    assert model_text.startswith("The answer is \\boxed{") and model_text.endswith("}.<|im_end|>")
    assert f"{{{rows[0]['answer']}}}" not in model_text
    mixed = SftMixture(tok, rows, tool_fraction=0.25, seed=2)
    tool = sum("<tool_call>" in tok.decode(mixed.draw(i)[0]) for i in range(200))
    assert 30 <= tool <= 70
    with pytest.raises(ValueError, match="tool_fraction"):
        SftMixture(tok, rows, tool_fraction=1.5)
    with pytest.raises(ValueError, match="2 tool results"):
        encode_episode(tok, "p", ["a", "b", "c"], ["r"])


def test_prepare_writes_a_loadable_model_and_caches(prepared, capsys):
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    root, train_path, warm, _ = prepared
    model = AutoModelForCausalLM.from_pretrained(warm)
    tok = load_pinned_tokenizer(str(warm))
    assert isinstance(tok, PreTrainedTokenizerFast) and model.config.vocab_size == len(tok) <= 512
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    stamp = json.loads((warm / STAMP).read_text())
    assert stamp["steps"] == 3 and stamp["tool_fraction"] == 0.2
    assert prepare(root / "out", train_path, steps=3, copy_steps=1, batch_size=4) == warm
    assert "ready (same settings)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown size"):
        prepare(root / "other", train_path, size="huge")
    with pytest.raises(ValueError, match="no train tasks"):
        prepare(root / "other", root / "missing.jsonl")


def test_probe_runs_the_agent_loop(prepared, capsys):
    _, _, warm, val = prepared
    report = run_probe(warm, val[:2], n_sampled=1, max_response_length=24)
    assert report["greedy"]["episodes"] == 2 and report["sampled"]["episodes"] == 2
    assert 0.0 <= report["sampled"]["tool_rate"] <= 1.0
    with pytest.raises(SystemExit):
        probe_main(["--model", str(warm.parent / "nope")])
    assert "no HF model folder" in capsys.readouterr().err
