"""Tools an LLM agent can call: the :class:`Tool` interface, its result, and the registry.

A tool is a Python class with a name, a description, a JSON schema of its arguments and a typed
``Options`` dataclass (its YAML keys under ``tools.<name>``). It is registered by name with
:func:`register_tool`; a run picks tools in YAML (``tools: {calculator: {}, search: {corpus_path:
...}}``). A tool of the user's own is named by ``class_path: package.module:Class`` and needs no
change to the runtime.

``call`` gets the parsed arguments and the episode's :class:`ToolSession` (state a tool keeps
across the calls of one episode, e.g. the Python tool's earlier cells) and returns a
:class:`ToolResult`. A tool never needs to catch its own failures: :class:`~.pool.ToolPool`
turns an exception, a hang past the time limit or a non-text return into an error result the
model reads, and counts it.

Example:
    >>> from dataclasses import dataclass
    >>> class Echo(Tool):
    ...     name = "echo"
    ...     description = "Repeat the text."
    ...     parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    ...     def call(self, arguments, session):
    ...         return ToolResult(arguments["text"])
    >>> Echo().call({"text": "hi"}, ToolSession()).text
    'hi'
    >>> Echo().schema()["function"]["name"]
    'echo'
    >>> check_arguments(Echo.parameters, {"txt": 1})
    "missing argument 'text'"
"""

from __future__ import annotations

import dataclasses
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from rlinf.engines.tools.latency import ToolLatency, parse_latency
from rlinf.utils.typed_config import ConfigError, parse_section

__all__ = ["Tool", "ToolResult", "ToolSession", "TOOLS", "register_tool", "tool_class", "make_tool",
           "check_arguments"]


@dataclass
class ToolResult:
    """What a call gave back to the model.

    Attributes:
        text: the text the model reads (already within the tool's own output budget).
        status: ``ok``; ``error`` (the tool failed, refused the arguments or returned no text);
            ``timeout`` (it ran past its time limit and was stopped or abandoned).
        info: numbers for metrics (e.g. ``{"seconds": 0.2}``), never shown to the model.
    """

    text: str
    status: Literal["ok", "error", "timeout"] = "ok"
    info: dict[str, float] = field(default_factory=dict)


@dataclass
class ToolSession:
    """State of one episode, shared by its calls: ``state[tool name]`` is the tool's own
    (e.g. the Python tool's earlier cells); ``episode_id`` names the episode in messages and
    keys its latency draws; ``calls[tool name]`` counts the calls submitted so far (the
    :class:`~.pool.ToolPool` counts them, in submission order)."""

    episode_id: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def next_call_index(self, tool: str) -> int:
        """The index of this session's next call of ``tool`` (0, 1, ...), counted."""
        index = self.calls.get(tool, 0)
        self.calls[tool] = index + 1
        return index


@dataclass(frozen=True)
class NoOptions:
    """A tool without YAML keys."""


class Tool(ABC):
    """One tool; subclasses set ``name``, ``description``, ``parameters`` (JSON schema of the
    arguments, an ``object``) and, when they take YAML keys, ``Options`` (a frozen dataclass
    whose fields are the keys; unknown keys are refused naming ``tools.<name>.<key>``).

    ``latency`` (set by :func:`make_tool` from ``tools.<name>.latency``, every tool takes it;
    None: none) is a wait the pool adds before each call (:mod:`~.latency`)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    parameters: ClassVar[dict] = {"type": "object", "properties": {}}
    Options: ClassVar[type] = NoOptions
    latency: ToolLatency | None = None

    def __init__(self, options: Any = None):
        self.options = options if options is not None else self.Options()

    def schema(self) -> dict:
        """The OpenAI / Hermes function schema (what chat templates render as the tool list)."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def check(self, path: str) -> None:
        """Checks knowable before Ray (files exist, binaries found); raise
        :class:`~rlinf.utils.typed_config.ConfigError` naming the key under ``path``."""

    def start(self) -> None:
        """Called once where the tool runs (the rollout worker), before its first call: build
        indexes, start processes. The driver's check never calls it."""

    @abstractmethod
    def call(self, arguments: dict, session: ToolSession) -> ToolResult:
        """Run one call with arguments already checked against ``parameters``."""

    def close(self) -> None:
        """Release what the tool holds (processes, indexes)."""


#: tool classes by name
TOOLS: dict[str, type[Tool]] = {}


def register_tool(cls: type[Tool]) -> type[Tool]:
    """Class decorator: register ``cls`` under ``cls.name`` (a second class with that name is
    refused)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in TOOLS and TOOLS[cls.name] is not cls:
        raise ValueError(f"a tool named {cls.name!r} is already registered ({TOOLS[cls.name].__name__})")
    TOOLS[cls.name] = cls
    return cls


def _builtin() -> None:
    """Import the shipped tools (they register themselves)."""
    for module in ("calculator", "python_sandbox", "search"):
        importlib.import_module(f"rlinf.engines.tools.{module}")


def tool_class(name: str, class_path: str | None = None, path: str = "tools") -> type[Tool]:
    """The class of tool ``name``: ``class_path`` (``package.module:Class``) when given, else the
    registered one; an unknown name or a bad path is a :class:`ConfigError` naming the key."""
    if class_path:
        module_name, _, attr = class_path.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(f"{path}.{name}.class_path",
                              f"cannot import {class_path!r} ({type(exc).__name__}: {exc}); expected "
                              "'package.module:ToolClass'") from None
        if not (isinstance(cls, type) and issubclass(cls, Tool)):
            raise ConfigError(f"{path}.{name}.class_path", f"{class_path!r} is not a subclass of rlinf's Tool")
        return cls
    _builtin()
    if name not in TOOLS:
        raise ConfigError(f"{path}.{name}", f"unknown tool; registered tools are {', '.join(sorted(TOOLS))} "
                          "(or give class_path: package.module:ToolClass)")
    return TOOLS[name]


def make_tool(name: str, raw: dict | None, path: str = "tools") -> Tool:
    """Build tool ``name`` from its YAML mapping (``class_path`` and ``latency``, which every
    tool takes, plus the tool's ``Options`` keys), then run its :meth:`Tool.check`.

    >>> make_tool("calculator", {"latency": {"distribution": "fixed", "median_s": 0.05}}).latency.median_s
    0.05
    >>> make_tool("calculator", {"latency": {"median_s": 0}})
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: tools.calculator.latency.median_s: must be a finite number > 0, got 0
    """
    raw = dict(raw or {})
    class_path = raw.pop("class_path", None)
    cls = tool_class(name, class_path, path)
    latency = parse_latency(raw.pop("latency", None), f"{path}.{name}.latency")
    if not dataclasses.is_dataclass(cls.Options):
        raise ConfigError(f"{path}.{name}", f"{cls.__name__}.Options must be a dataclass")
    if any(f.name == "latency" for f in dataclasses.fields(cls.Options)):
        raise ConfigError(f"{path}.{name}", f"{cls.__name__}.Options has a field 'latency', a key every tool "
                          "takes (tools.<name>.latency, the pool's simulated wait); rename the field")
    options = parse_section(cls.Options, raw, f"{path}.{name}")
    tool = cls(options)
    tool.latency = latency
    if class_path:  # a user's class keeps the name the YAML gives it
        tool.name = name
    tool.check(f"{path}.{name}")
    return tool


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def check_arguments(schema: dict, arguments: Any) -> str | None:
    """None when ``arguments`` fit ``schema`` (an ``object`` with ``properties`` / ``required``;
    types of the top-level properties are checked), else the problem in one line for the model."""
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    props = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in arguments:
            return f"missing argument {key!r}"
    for key, value in arguments.items():
        if key not in props:
            if schema.get("additionalProperties", True) is False:
                return f"unknown argument {key!r}; expected {', '.join(props) or 'none'}"
            continue
        want = props[key].get("type")
        kinds = want if isinstance(want, list) else [want] if want else []
        if kinds and not any(_JSON_TYPES.get(k, lambda v: True)(value) for k in kinds):
            return f"argument {key!r} must be {' or '.join(kinds)}, got {type(value).__name__}"
    return None
