"""The web-agent action grammar: model text -> :class:`Action` -> model text.

One action per reply. The last line that starts with an action word (``click``, ``type``,
``scroll``, ``goback``, ``answer``; an ``Action:`` prefix is allowed) is the action:

==========================  ===============================================
``click [3]``               click the element marked 3 (set_of_marks mode)
``click (120, 340)``        click at a viewport point (coordinates mode)
``type [3] "kettle"``       fill the element marked 3
``type [3] "kettle" enter`` fill it and press Enter (``submit=True``)
``type (x, y) "text"``      click at the point, then type (coordinates mode)
``scroll up|down``          scroll the page by most of a viewport
``goback``                  the browser's back button
``answer "$12.50"``         finish with an answer (quotes optional: rest of the line)
==========================  ===============================================

Quoted text may contain ``\\"``, ``\\\\`` and ``\\n`` escapes. Text that cannot be read as an action gives
``Action(type="invalid", raw=<the reply>, error=<one line why>)``; :func:`parse_action` never
raises.

Example::

    >>> parse_action("I should search.\\nAction: type [4] \\"blue kettle\\" enter").to_dict()
    {'type': 'type', 'id': 4, 'text': 'blue kettle', 'submit': True}
    >>> format_action(parse_action("click (120, 340)", "coordinates"))
    'click (120, 340)'
    >>> parse_action("click (120, 340)", "set_of_marks").error
    'click (120, 340): coordinates are not accepted in set_of_marks mode; use a mark like [3]'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: interaction modes of seed 000's ``context_config.interaction_mode``
MODES = ("set_of_marks", "coordinates")
#: words that start an action line
ACTION_WORDS = ("click", "type", "scroll", "goback", "answer")
#: every ``Action.type``; the last two are never produced by the policy's text
ACTION_TYPES = ACTION_WORDS + ("invalid", "invalid_url")

_PREFIX = re.compile(r"^[\s*_`>#-]*action\s*[*_]*\s*[:：]\s*[*_`]*\s*", re.IGNORECASE)
_WORD = re.compile(r"^(click|type|scroll|goback|answer)(?![a-z_])", re.IGNORECASE)
_MARK = re.compile(r"^\[\s*(\d+)\s*\]")
_POINT = re.compile(r"^\(\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\)")


@dataclass
class Action:
    """One web action. Which fields are set depends on ``type`` (see :meth:`to_dict`).

    >>> Action.from_dict({"type": "scroll", "direction": "down"})
    Action(type='scroll', id=None, x=None, y=None, text=None, submit=False, direction='down', url=None, raw=None, error=None)
    """  # noqa: E501 - a doctest's expected output is one line

    type: str
    id: int | None = None
    x: int | None = None
    y: int | None = None
    text: str | None = None
    submit: bool = False
    direction: str | None = None
    url: str | None = None
    raw: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of docs/web_agent.md: only the fields this type uses.

        >>> Action("click", x=5, y=7).to_dict()
        {'type': 'click', 'x': 5, 'y': 7}
        """
        out: dict[str, Any] = {"type": self.type}
        if self.type in ("click", "type"):
            if self.id is not None:
                out["id"] = self.id
            else:
                out["x"], out["y"] = self.x, self.y
        if self.type == "type":
            out["text"] = self.text
            out["submit"] = self.submit
        elif self.type == "scroll":
            out["direction"] = self.direction
        elif self.type == "answer":
            out["text"] = self.text
        elif self.type == "invalid":
            out["raw"], out["error"] = self.raw, self.error
        elif self.type == "invalid_url":
            out["url"], out["error"] = self.url, self.error
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Action:
        """Rebuild (and check) an action from :meth:`to_dict`'s shape; a bad dict raises
        ``ValueError`` naming the field.

        >>> Action.from_dict({"type": "click", "id": "3"})
        Traceback (most recent call last):
        ...
        ValueError: action.id: expected a non-negative integer, got '3'
        """
        if not isinstance(data, dict):
            raise ValueError(f"action: expected an object, got {type(data).__name__}")
        kind = data.get("type")
        if kind not in ACTION_TYPES:
            raise ValueError(f"action.type: expected one of {', '.join(ACTION_TYPES)}, got {kind!r}")
        act = cls(type=kind)
        if kind in ("click", "type"):
            if data.get("id") is not None:
                act.id = _field_int(data, "id", minimum=0)
            else:
                act.x, act.y = _field_int(data, "x", minimum=0), _field_int(data, "y", minimum=0)
        if kind in ("type", "answer"):
            act.text = _field_str(data, "text")
        if kind == "type":
            submit = data.get("submit", False)
            if not isinstance(submit, bool):
                raise ValueError(f"action.submit: expected true or false, got {submit!r}")
            act.submit = submit
        if kind == "scroll":
            if data.get("direction") not in ("up", "down"):
                raise ValueError(f"action.direction: expected 'up' or 'down', got {data.get('direction')!r}")
            act.direction = data["direction"]
        if kind == "invalid":
            act.raw, act.error = data.get("raw"), data.get("error")
        if kind == "invalid_url":
            act.url, act.error = data.get("url"), data.get("error")
        return act


def _field_int(data: dict, key: str, minimum: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"action.{key}: expected a non-negative integer, got {value!r}")
    return value


def _field_str(data: dict, key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ValueError(f"action.{key}: expected a string, got {value!r}")
    return value


def _invalid(raw: str, why: str) -> Action:
    return Action(type="invalid", raw=raw, error=why)


def _quoted(rest: str) -> tuple[str, str] | str:
    """Read a double-quoted string at the start of ``rest``: (text, what follows) or an error."""
    if not rest.startswith('"'):
        return 'expected a quoted text like "blue kettle"'
    out: list[str] = []
    i = 1
    while i < len(rest):
        ch = rest[i]
        if ch == "\\" and i + 1 < len(rest) and rest[i + 1] in '"\\n':
            out.append("\n" if rest[i + 1] == "n" else rest[i + 1])
            i += 2
            continue
        if ch == '"':
            return "".join(out), rest[i + 1:].strip()
        out.append(ch)
        i += 1
    return "unterminated quote: the text has no closing \""


def _target(rest: str, mode: str, line: str) -> tuple[dict[str, int], str] | str:
    """Read ``[n]`` or ``(x, y)`` at the start of ``rest`` according to ``mode``."""
    mark, point = _MARK.match(rest), _POINT.match(rest)
    if mark:
        if mode == "coordinates":
            return f"{line}: marks like [{mark.group(1)}] are not accepted in coordinates mode; use (x, y)"
        return {"id": int(mark.group(1))}, rest[mark.end():].strip()
    if point:
        if mode == "set_of_marks":
            return f"{line}: coordinates are not accepted in set_of_marks mode; use a mark like [3]"
        x, y = round(float(point.group(1))), round(float(point.group(2)))
        if x < 0 or y < 0:
            return f"{line}: coordinates must be non-negative, got ({x}, {y})"
        return {"x": x, "y": y}, rest[point.end():].strip()
    want = "(x, y)" if mode == "coordinates" else "a mark like [3]"
    return f"{line}: expected {want} after the action word"


def _action_line(text: str) -> str | None:
    """The last line that starts with an action word, with any ``Action:`` prefix removed."""
    for raw_line in reversed(text.splitlines()):
        line = _PREFIX.sub("", raw_line.strip(), count=1).strip().strip("`").strip()
        if _WORD.match(line):
            return line
    return None


def parse_action(text: str, mode: str = "set_of_marks") -> Action:
    """Read the policy's reply as one action (see the module docstring); never raises.

    >>> parse_action("scroll sideways").error
    "scroll sideways: expected 'up' or 'down'"
    >>> parse_action("answer The Blue Kettle costs $12.50").text
    'The Blue Kettle costs $12.50'
    """
    if not isinstance(text, str):
        return _invalid(repr(text), f"expected the model's text, got {type(text).__name__}")
    if mode not in MODES:
        return _invalid(text, f"unknown interaction mode {mode!r}; expected one of {', '.join(MODES)}")
    line = _action_line(text)
    if line is None:
        return _invalid(text, f"no action found: no line starts with one of {', '.join(ACTION_WORDS)}")
    word = _WORD.match(line).group(1).lower()
    rest = line[len(word):].strip()
    if word in ("click", "type"):
        target = _target(rest, mode, line)
        if isinstance(target, str):
            return _invalid(text, target)
        where, rest = target
        if word == "click":
            if rest:
                return _invalid(text, f"{line}: unexpected text after the target: {rest!r}")
            return Action(type="click", **where)
        quoted = _quoted(rest)
        if isinstance(quoted, str):
            return _invalid(text, f"{line}: {quoted}")
        value, after = quoted
        if after and after.lower().rstrip(".") != "enter":
            return _invalid(text, f"{line}: after the text only 'enter' may follow, got {after!r}")
        return Action(type="type", text=value, submit=bool(after), **where)
    if word == "scroll":
        direction = rest.lower().rstrip(".")
        if direction not in ("up", "down"):
            return _invalid(text, f"{line}: expected 'up' or 'down'")
        return Action(type="scroll", direction=direction)
    if word == "goback":
        if rest and rest.rstrip(".") != "":
            return _invalid(text, f"{line}: goback takes nothing after it")
        return Action(type="goback")
    if rest.startswith('"'):
        quoted = _quoted(rest)
        if isinstance(quoted, str):
            return _invalid(text, f"{line}: {quoted}")
        value, after = quoted
        if after.rstrip("."):
            return _invalid(text, f"{line}: unexpected text after the closing quote: {after!r}")
        return Action(type="answer", text=value)
    if not rest:
        return _invalid(text, f"{line}: answer needs a text")
    return Action(type="answer", text=rest)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def format_action(action: Action | dict) -> str:
    """The canonical model text of an action; :func:`parse_action` reads it back unchanged.
    ``invalid`` gives its raw text, ``invalid_url`` a note (neither is parseable).

    >>> format_action({"type": "type", "id": 4, "text": 'say "hi"', "submit": False})
    'type [4] "say \\\\"hi\\\\""'
    """
    act = Action.from_dict(action) if isinstance(action, dict) else action
    where = f"[{act.id}]" if act.id is not None else f"({act.x}, {act.y})"
    if act.type == "click":
        return f"click {where}"
    if act.type == "type":
        return f"type {where} {_quote(act.text or '')}" + (" enter" if act.submit else "")
    if act.type == "scroll":
        return f"scroll {act.direction}"
    if act.type == "goback":
        return "goback"
    if act.type == "answer":
        return f"answer {_quote(act.text or '')}"
    if act.type == "invalid":
        return act.raw or ""
    return f"invalid_url {act.url}: {act.error}"
