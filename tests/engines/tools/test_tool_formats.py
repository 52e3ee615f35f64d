"""Tool-call formats: each parser on good, broken and mixed turns; continuations; answers."""

from __future__ import annotations

import pytest

from rlinf.engines.tools.formats import FORMATS, get_format, render_tool_messages
from toolkits.tiny_math.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_hermes_reads_calls_in_order_with_string_or_object_arguments():
    turn = get_format("hermes").parse(
        'think <tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}</tool_call>')
    assert [(c.name, c.arguments) for c in turn.calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    assert turn.invalid == [] and turn.answer is None


@pytest.mark.parametrize("text, problem", [
    ("<tool_call>{not json}</tool_call>", "not JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', 'expected {"name"'),
    ('<tool_call>["calculator"]</tool_call>', 'expected {"name"'),
    ('<tool_call>{"name": "c", "arguments": "{oops"}</tool_call>', "string that is not JSON"),
    ('<tool_call>{"name": "c", "arguments": {}}', "no closing </tool_call>"),
])
def test_hermes_malformed_calls_become_messages_not_exceptions(text, problem):
    turn = get_format("hermes").parse(text)
    assert turn.calls == [] and len(turn.invalid) == 1 and problem in turn.invalid[0]
    assert turn.wants_tools and turn.answer is None


def test_hermes_turn_without_a_call_is_the_answer():
    turn = get_format("hermes").parse("The answer is \\boxed{5}.")
    assert not turn.wants_tools and turn.answer == "The answer is \\boxed{5}."


def test_hermes_results_are_rendered_by_the_chat_template(tok):
    assert render_tool_messages(tok, ["408"], ended_with_eos=True) == \
        "\n<|im_start|>tool\n408<|im_end|>\n<|im_start|>assistant\n"
    # a turn cut without its end-of-turn token gets it from the template
    assert render_tool_messages(tok, ["1", "2"], ended_with_eos=False) == \
        "<|im_end|>\n<|im_start|>tool\n1<|im_end|>\n<|im_start|>tool\n2<|im_end|>\n<|im_start|>assistant\n"


def test_searchr1_search_answer_and_broken_tags():
    f = get_format("searchr1")
    assert f.stop_strings == ("</search>",)
    turn = f.parse("<search> who </search>")
    assert [(c.name, c.arguments) for c in turn.calls] == [("search", {"query": "who"})]
    assert "empty" in f.parse("<search>  </search>").invalid[0]
    assert "no closing" in f.parse("<search>who").invalid[0]
    assert f.parse("<search>a</search> then <answer> Quell </answer>").answer == "Quell"
    nothing = f.parse("I do not know.")
    assert not nothing.wants_tools and nothing.answer is None
    assert f.answer_text("x <answer>A</answer> y <answer>B</answer>", "") == "B"
    assert f.answer_text("no tags", "no tags") == ""


def test_code_format_runs_the_last_python_block_before_output():
    f = get_format("code")
    text = "Let me compute.\n```python\nprint(1)\n```\nand\n```python\nprint(6*7)\n```\n```output"
    turn = f.parse(text)
    assert [(c.name, c.arguments) for c in turn.calls] == [("python", {"code": "print(6*7)\n"})]
    assert f.continuation(["42\n"], None, False) == "\n42\n```\n"
    assert "no ```python block" in f.parse("```output").invalid[0]
    done = f.parse("So the answer is \\boxed{42}.")
    assert done.answer is not None and not done.wants_tools


def test_unknown_format_names_the_choices():
    with pytest.raises(ValueError, match="hermes, searchr1, code"):
        get_format("xml")
    assert sorted(FORMATS) == ["code", "hermes", "searchr1"]
