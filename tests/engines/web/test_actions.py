"""The action grammar (rlinf/engines/web/actions.py): valid and malformed replies, round trips."""

from __future__ import annotations

import pytest

from rlinf.engines.web.actions import Action, format_action, parse_action

VALID = [
    ("click [3]", "set_of_marks", {"type": "click", "id": 3}),
    ("click [ 12 ]", "set_of_marks", {"type": "click", "id": 12}),
    ("click (120, 340)", "coordinates", {"type": "click", "x": 120, "y": 340}),
    ("click (120.6,340.2)", "coordinates", {"type": "click", "x": 121, "y": 340}),
    ('type [3] "blue kettle"', "set_of_marks", {"type": "type", "id": 3, "text": "blue kettle", "submit": False}),
    ('type [3] "blue kettle" enter', "set_of_marks", {"type": "type", "id": 3, "text": "blue kettle", "submit": True}),
    ('type [3] "" ENTER', "set_of_marks", {"type": "type", "id": 3, "text": "", "submit": True}),
    ('type (10, 20) "x"', "coordinates", {"type": "type", "x": 10, "y": 20, "text": "x", "submit": False}),
    ('type [1] "say \\"hi\\" \\\\ ok"', "set_of_marks",
     {"type": "type", "id": 1, "text": 'say "hi" \\ ok', "submit": False}),
    ("scroll down", "set_of_marks", {"type": "scroll", "direction": "down"}),
    ("Scroll UP.", "coordinates", {"type": "scroll", "direction": "up"}),
    ("goback", "set_of_marks", {"type": "goback"}),
    ('answer "$12.50"', "set_of_marks", {"type": "answer", "text": "$12.50"}),
    ("answer The kettle costs $12.50", "set_of_marks", {"type": "answer", "text": "The kettle costs $12.50"}),
    ("Action: click [7]", "set_of_marks", {"type": "click", "id": 7}),
    ("**Action:** `goback`", "set_of_marks", {"type": "goback"}),
    # the last action line wins; reasoning before it is ignored
    ("I will click [2] first.\nThen:\nclick [5]", "set_of_marks", {"type": "click", "id": 5}),
    ("Thought: the price is shown.\nAction: answer \"$3\"\n", "set_of_marks", {"type": "answer", "text": "$3"}),
    ("click [2]\nscroll down", "set_of_marks", {"type": "scroll", "direction": "down"}),
]

MALFORMED = [
    ("", "no action found"),
    ("I think the answer is on the next page.", "no action found"),
    ("clicking [3]", "no action found"),
    ("click [3]", "not accepted in coordinates mode"),
    ("click (1, 2)", "not accepted in set_of_marks mode"),
    ("click", "expected a mark like [3]"),
    ("click [3] please", "unexpected text after the target"),
    ('type [3] "unterminated', "unterminated quote"),
    ("type [3] kettle", "expected a quoted text"),
    ('type [3] "kettle" now', "only 'enter' may follow"),
    ("scroll left", "expected 'up' or 'down'"),
    ("goback twice", "goback takes nothing"),
    ("answer", "answer needs a text"),
    ('answer "x" and more', "unexpected text after the closing quote"),
    ("click (-5, 3)", "must be non-negative"),
]


@pytest.mark.parametrize("text,mode,expected", VALID)
def test_valid_replies_parse(text, mode, expected):
    assert parse_action(text, mode).to_dict() == expected


@pytest.mark.parametrize("text,why", MALFORMED)
def test_malformed_replies_are_invalid_actions_with_a_reason(text, why):
    mode = "coordinates" if text == "click [3]" or text.startswith("click (-") else "set_of_marks"
    action = parse_action(text, mode)
    assert action.type == "invalid"
    assert action.raw == text  # nothing of the reply is lost
    assert why in action.error
    assert "\n" not in action.error


def test_parse_never_raises_on_odd_input():
    assert parse_action(None).type == "invalid"  # type: ignore[arg-type]
    assert "unknown interaction mode" in parse_action("click [1]", "pixels").error
    assert parse_action("\x00\n\t[[[(((").type == "invalid"


@pytest.mark.parametrize("text,mode,expected", VALID)
def test_format_then_parse_is_the_identity(text, mode, expected):
    action = Action.from_dict(expected)
    again = parse_action(format_action(action), mode)
    assert again.to_dict() == expected


def test_round_trip_of_awkward_text():
    for text in ['quote " inside', "back\\slash", "two\nlines", "tail \\", ""]:
        action = Action(type="type", id=4, text=text, submit=True)
        assert parse_action(format_action(action)).to_dict() == action.to_dict()
        answer = Action(type="answer", text=text)
        assert parse_action(format_action(answer)).text == text


def test_from_dict_names_the_bad_field():
    with pytest.raises(ValueError, match=r"action.type: expected one of"):
        Action.from_dict({"type": "hover"})
    with pytest.raises(ValueError, match=r"action.direction"):
        Action.from_dict({"type": "scroll", "direction": "left"})
    with pytest.raises(ValueError, match=r"action.x"):
        Action.from_dict({"type": "click", "x": -1, "y": 3})
    with pytest.raises(ValueError, match=r"action.submit"):
        Action.from_dict({"type": "type", "id": 1, "text": "a", "submit": "yes"})
    with pytest.raises(ValueError, match=r"action.text"):
        Action.from_dict({"type": "answer"})
    with pytest.raises(ValueError, match=r"expected an object"):
        Action.from_dict(["click", 1])


def test_invalid_actions_keep_their_fields():
    bad = parse_action("hmm")
    assert Action.from_dict(bad.to_dict()) == bad
    assert format_action(bad) == "hmm"
    lost = Action.from_dict({"type": "invalid_url", "url": "http://x/", "error": "refused"})
    assert lost.to_dict() == {"type": "invalid_url", "url": "http://x/", "error": "refused"}
