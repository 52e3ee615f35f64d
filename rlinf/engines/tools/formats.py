"""Tool-call formats: how a model writes a call, how the result comes back, where the answer is.

Each :class:`ToolFormat` (chosen by ``agentloop.toolcall_parser``) says

* ``stop_strings``: where generation pauses so a call can run (the text up to and including the
  stop string is kept: token in, token out);
* :meth:`ToolFormat.parse`: the calls in one model turn (malformed ones become errors the model
  reads; they are counted as invalid calls, never raised), and whether the turn gave an answer;
* :meth:`ToolFormat.continuation`: the text appended after the turn, holding the results (these
  tokens get loss mask 0), ending where the model writes next;
* :meth:`ToolFormat.answer_text`: what the reward reads from the model's own text.

Formats shipped:

* ``hermes`` (Qwen2.5 / Hermes): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
  the turn ends with the model's end-of-turn token; results are ``tool`` messages rendered by the
  model's own chat template (Qwen's wraps each in ``<tool_response>`` inside a user turn), followed
  by the template's generation prompt. The answer is the last turn's text.
* ``searchr1`` (Search-R1): ``<search>query</search>`` pauses; the result comes back as
  ``<information>...</information>`` in the same assistant turn; ``<answer>...</answer>`` ends it.
* ``code`` (ToRL): a ```` ```python ```` block followed by ```` ```output ```` pauses; the run's
  output and a closing fence are appended; the answer is the model's text (``\\boxed{}``).

Example:
    >>> fmt = get_format("searchr1")
    >>> turn = fmt.parse("I should look. <search>capital of Zorvex</search>")
    >>> [(c.name, c.arguments) for c in turn.calls], turn.answer
    ([('search', {'query': 'capital of Zorvex'})], None)
    >>> fmt.continuation(["Doc 1 (Title: Zorvex) Its capital is Quell."], None, ended_with_eos=False)
    '\\n\\n<information>Doc 1 (Title: Zorvex) Its capital is Quell.</information>\\n\\n'
    >>> fmt.parse("<answer>Quell</answer>").answer
    'Quell'
    >>> h = get_format("hermes").parse(
    ...     '<tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>')
    >>> h.calls[0].arguments
    {'expression': '2*3'}
    >>> get_format("hermes").parse("<tool_call>{not json}</tool_call>").invalid[0][:27]
    'invalid tool call: not JSON'
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolCall", "ParsedTurn", "ToolFormat", "FORMATS", "get_format"]


@dataclass
class ToolCall:
    """One call the model wrote: the tool's name and its arguments (a dict)."""

    name: str
    arguments: Any


@dataclass
class ParsedTurn:
    """One model turn, parsed.

    Attributes:
        calls: well-formed calls, in order.
        invalid: one message per malformed call (shown to the model, counted).
        answer: the final answer when the turn gave one (``searchr1``: the ``<answer>`` text;
            ``hermes`` / ``code``: the turn's text when it made no call), else None.
    """

    calls: list[ToolCall] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    answer: str | None = None

    @property
    def wants_tools(self) -> bool:
        """The turn asked for tools (or wrote a broken call, which is answered too)."""
        return bool(self.calls or self.invalid)


class ToolFormat(ABC):
    """One tool-call convention (see the module docstring)."""

    name: str = ""
    #: where generation pauses for a call (kept in the text)
    stop_strings: tuple[str, ...] = ()

    @abstractmethod
    def parse(self, text: str) -> ParsedTurn:
        """The calls and the answer of one model turn's text."""

    @abstractmethod
    def continuation(self, results: list[str], tokenizer, ended_with_eos: bool) -> str:
        """The text that follows a turn: ``results`` (one text per call, errors included) and
        whatever the model needs before it writes again. ``ended_with_eos``: the turn's tokens
        end with the end-of-turn token (so it is not repeated)."""

    def answer_text(self, model_text: str, last_turn: str) -> str:
        """What the reward reads: the last turn's text by default."""
        return last_turn

    def tool_names(self) -> tuple[str, ...] | None:
        """Tools this format can call (None: any, by name)."""
        return None


_TOOL_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)


class HermesFormat(ToolFormat):
    """``<tool_call>{json}</tool_call>``; results as ``tool`` messages of the chat template."""

    name = "hermes"
    stop_strings = ()  # the model ends its turn with its end-of-turn token after the calls

    def parse(self, text: str) -> ParsedTurn:
        turn = ParsedTurn()
        for match in _TOOL_CALL.finditer(text):
            body, closed = match.group(1).strip(), match.group(2)
            if not closed:
                turn.invalid.append("invalid tool call: no closing </tool_call>")
                continue
            try:
                data = json.loads(body)
            except json.JSONDecodeError as exc:
                turn.invalid.append(f"invalid tool call: not JSON ({exc.msg} at character {exc.pos})")
                continue
            if not isinstance(data, dict) or not isinstance(data.get("name"), str):
                turn.invalid.append('invalid tool call: expected {"name": "<tool>", "arguments": {...}}')
                continue
            args = data.get("arguments", {})
            if isinstance(args, str):  # some models write the arguments as a JSON string
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    turn.invalid.append("invalid tool call: arguments are a string that is not JSON")
                    continue
            turn.calls.append(ToolCall(data["name"], args))
        if not turn.wants_tools:
            turn.answer = text
        return turn

    def continuation(self, results: list[str], tokenizer, ended_with_eos: bool) -> str:
        return render_tool_messages(tokenizer, results, ended_with_eos)


def render_tool_messages(tokenizer, results: list[str], ended_with_eos: bool) -> str:
    """The chat template's rendering of ``tool`` messages after an assistant turn, plus the
    generation prompt: the difference between a conversation rendered with and without them.
    The end of the assistant turn (the template's text after its content) comes first, less the
    end-of-turn token when the model already wrote it."""
    probe = "\x00ASSISTANT\x00"
    base = [{"role": "user", "content": "u"}, {"role": "assistant", "content": probe}]
    before = tokenizer.apply_chat_template(base, tokenize=False)
    after = tokenizer.apply_chat_template(base + [{"role": "tool", "content": r} for r in results],
                                          tokenize=False, add_generation_prompt=True)
    if not after.startswith(before):
        raise ValueError("the chat template renders the assistant turn differently once tool messages follow "
                         "it; the hermes format needs a template that appends tool messages")
    closing = before[before.index(probe) + len(probe):]
    eos = tokenizer.eos_token or ""
    if ended_with_eos and eos and closing.startswith(eos):
        closing = closing[len(eos):]
    return closing + after[len(before):]


class SearchR1Format(ToolFormat):
    """Search-R1 tags: ``<search>q</search>`` -> ``<information>...</information>``;
    ``<answer>a</answer>`` ends the episode."""

    name = "searchr1"
    stop_strings = ("</search>",)
    _search = re.compile(r"<search>(.*?)</search>", re.DOTALL)
    _answer = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

    def parse(self, text: str) -> ParsedTurn:
        turn = ParsedTurn()
        answers = self._answer.findall(text)
        searches = self._search.findall(text)
        if answers and (not searches or text.rfind("<answer>") > text.rfind("<search>")):
            turn.answer = answers[-1].strip()
            return turn
        if searches:
            query = searches[-1].strip()
            if query:
                turn.calls.append(ToolCall("search", {"query": query}))
            else:
                turn.invalid.append("invalid search: the query between <search> and </search> is empty")
        elif "<search>" in text:
            turn.invalid.append("invalid search: no closing </search>")
        return turn

    def continuation(self, results: list[str], tokenizer, ended_with_eos: bool) -> str:
        return "\n\n<information>" + "\n".join(results) + "</information>\n\n"

    def answer_text(self, model_text: str, last_turn: str) -> str:
        answers = self._answer.findall(model_text)
        return answers[-1].strip() if answers else ""

    def tool_names(self) -> tuple[str, ...]:
        return ("search",)


class CodeFormat(ToolFormat):
    """ToRL: a python block, then ```` ```output ```` pauses; the output and a closing fence follow."""

    name = "code"
    stop_strings = ("```output",)
    _block = re.compile(r"```python\s*\n(.*?)```", re.DOTALL)

    def parse(self, text: str) -> ParsedTurn:
        turn = ParsedTurn()
        if not text.rstrip().endswith("```output"):
            turn.answer = text
            return turn
        blocks = self._block.findall(text)
        if blocks and blocks[-1].strip():
            turn.calls.append(ToolCall("python", {"code": blocks[-1]}))
        else:
            turn.invalid.append("invalid code call: no ```python block before ```output")
        return turn

    def continuation(self, results: list[str], tokenizer, ended_with_eos: bool) -> str:
        return "\n" + "\n".join(r.rstrip("\n") for r in results) + "\n```\n"

    def answer_text(self, model_text: str, last_turn: str) -> str:
        return model_text

    def tool_names(self) -> tuple[str, ...]:
        return ("python",)


#: formats by ``agentloop.toolcall_parser`` name
FORMATS: dict[str, type[ToolFormat]] = {f.name: f for f in (HermesFormat, SearchR1Format, CodeFormat)}


def get_format(name: str) -> ToolFormat:
    """The format named ``name`` (``hermes``, ``searchr1``, ``code``)."""
    if name not in FORMATS:
        raise ValueError(f"unknown tool-call format {name!r}; expected one of {', '.join(FORMATS)}")
    return FORMATS[name]()
