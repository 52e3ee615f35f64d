"""Parse a plain mapping (a resolved Hydra/OmegaConf tree) into frozen dataclasses, once, strictly.

Every field's type is checked; unknown keys, missing required keys and bad values raise
:class:`ConfigError` whose message starts with the key path (``actor.optim.lr: ...``). After a
section is built, its ``validate(path)`` method (if any) runs cross-field checks.

Supported field types: ``int``, ``float`` (ints and numeric strings such as YAML 1.1's ``1e-5``
accepted), ``bool``, ``str``, ``Any``,
``X | None``, ``list[X]`` / ``tuple[X, ...]`` (tuples stored), ``dict[str, X]``,
``Literal[...]``, and nested dataclasses.

Example:
    >>> from dataclasses import dataclass, field
    >>> from typing import Literal
    >>> @dataclass(frozen=True)
    ... class Optim:
    ...     lr: float = 1e-5
    ...     betas: tuple[float, ...] = (0.9, 0.999)
    >>> @dataclass(frozen=True)
    ... class Actor:
    ...     backend: Literal["fsdp", "megatron"]
    ...     optim: Optim = field(default_factory=Optim)
    >>> parse_section(Actor, {"backend": "fsdp", "optim": {"lr": 3}}, "actor")
    Actor(backend='fsdp', optim=Optim(lr=3.0, betas=(0.9, 0.999)))
    >>> parse_section(Actor, {"backend": "deepspeed"}, "actor")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: actor.backend: 'deepspeed' is not allowed; expected one of 'fsdp', 'megatron'
    >>> parse_section(Actor, {"backend": "fsdp", "optim": {"lr": 1e-5, "bettas": [0.9]}}, "actor")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: actor.optim.bettas: unknown key; allowed keys are betas, lr
"""


import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")


class ConfigError(ValueError):
    """A config key is unknown, missing or has a bad value; the message starts with the key path."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


def parse_section(cls: type[T], raw: Any, path: str) -> T:
    """Build dataclass ``cls`` from mapping ``raw`` found at key path ``path``."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(path, f"expected a mapping of {_names(cls)}, got {_show(raw)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    flats = {name: hints[name] for name, f in fields.items() if f.metadata.get("flat")}
    owner = {key: name for name, sub_cls in flats.items() for key in _keys(sub_cls)}
    for key in raw:
        if key in flats or (key not in fields and key not in owner):
            raise ConfigError(_join(path, key), "unknown key; allowed keys are " + _names(cls))
    values = {}
    for name, sub_cls in flats.items():  # a flat section's keys sit in this mapping (see flat())
        values[name] = parse_section(sub_cls, {k: v for k, v in raw.items() if owner.get(k) == name}, path)
    for name, f in fields.items():
        sub = _join(path, name)
        if name in flats:
            continue
        if name in raw:
            values[name] = _convert(hints[name], raw[name], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            if dataclasses.is_dataclass(hints[name]):
                values[name] = _convert(hints[name], {}, sub)
            else:
                raise ConfigError(sub, "missing (required)")
    for name, f in fields.items():
        allowed = f.metadata.get("only")
        if allowed is not None and name in values and values[name] not in allowed:
            raise ConfigError(_join(path, name), f"{values[name]!r} is refused: {f.metadata['reason']}")
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate(path)
    return obj


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _keys(cls) -> list[str]:
    """The YAML keys of section ``cls``: its fields, with a flat section's keys in its place."""
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        if f.init:
            keys += _keys(hints[f.name]) if f.metadata.get("flat") else [f.name]
    return keys


def _names(cls) -> str:
    return ", ".join(sorted(_keys(cls)))


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _convert(rest[0], value, path)
        errors = []
        for a in rest:
            try:
                return _convert(a, value, path)
            except ConfigError as exc:
                errors.append(str(exc).split(": ", 1)[1])
        raise ConfigError(path, " / ".join(errors))
    if value is None and dataclasses.is_dataclass(tp):
        return parse_section(tp, {}, path)  # an empty YAML section: all defaults
    if value is None:
        raise ConfigError(path, f"null is not allowed; expected {_type_name(tp)}")
    if origin is Literal:
        if value not in args or isinstance(value, bool) != any(isinstance(a, bool) for a in args if a == value):
            allowed = ", ".join(repr(a) for a in args)
            raise ConfigError(path, f"{value!r} is not allowed; expected one of {allowed}")
        return value
    if dataclasses.is_dataclass(tp):
        return parse_section(tp, value, path)
    if origin in (list, tuple) or tp in (list, tuple):
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
            raise ConfigError(path, f"expected a list, got {_show(value)}")
        item_tp = args[0] if args else Any
        return tuple(_convert(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(path, f"expected a mapping, got {_show(value)}")
        val_tp = args[1] if len(args) == 2 else Any
        return {k: _convert(val_tp, v, _join(path, k)) for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {_show(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected an int, got {_show(value)}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads `1e-5` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, f"expected a number, got {_show(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {_show(value)}")
        return value
    raise TypeError(f"{path}: unsupported field type {tp!r}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def check(condition: bool, key: str, message: str) -> None:
    """Raise ``ConfigError(key, message)`` unless ``condition`` (for ``validate`` methods).

    >>> check(2 > 1, "algorithm.group_size", "must be >= 1")
    >>> check(0 > 1, "algorithm.group_size", "must be >= 1, got 0")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: algorithm.group_size: must be >= 1, got 0
    """
    if not condition:
        raise ConfigError(key, message)


# ---------------------------------------------------------------- key rules


def rule(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING,
         scope: str | None = None, only: tuple | None = None, reason: str = "",
         note: tuple | None = None) -> Any:
    """A dataclass field with a rule on top of its type (the house rule: every accepted key has
    its effect, or is refused with the reason).

    - ``scope``: the kind of run that reads the key (``math``, ``embodied``, ``offpolicy``,
      ``megatron``, ``fsdp``); :func:`check_scopes` refuses a value other than the default in any other run.
    - ``only`` + ``reason``: the values that are accepted; any other is refused at parse time
      with ``reason`` (something this runtime cannot do, and what to use instead).
    - ``note``: ``(values, text)``: the value is accepted, but means nothing more under this
      runtime than what it always does; :func:`collect_notes` returns ``text`` for a start-up line.

    >>> @dataclasses.dataclass(frozen=True)
    ... class Fsdp:
    ...     limit_all_gathers: bool = rule(False, only=(False,), reason="FSDP2 has no such limit")
    >>> parse_section(Fsdp, {"limit_all_gathers": True}, "fsdp")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: fsdp.limit_all_gathers: True is refused: FSDP2 has no such limit
    """
    metadata: dict[str, Any] = {}
    if scope is not None:
        metadata["scope"] = scope
    if only is not None:
        metadata["only"], metadata["reason"] = tuple(only), reason
    if note is not None:
        metadata["note"] = note
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata)


def flat(cls: type, label: str) -> Any:
    """A sub-section whose keys are written in the parent's mapping (YAML keeps the reference's
    flat layout) but parsed into their own dataclass ``cls``: the parser routes each key to the
    section that owns it, and errors, rules and :func:`walk_fields` name it by its YAML path.
    ``label`` titles the section in the config reference.

    >>> @dataclasses.dataclass(frozen=True)
    ... class Policy:
    ...     action_dim: int | None = None
    ...     def validate(self, path):
    ...         check(self.action_dim is None or self.action_dim >= 1, f"{path}.action_dim", "must be >= 1")
    >>> @dataclasses.dataclass(frozen=True)
    ... class Model:
    ...     model_path: str | None = None
    ...     policy: Policy = flat(Policy, "policy keys")
    >>> parse_section(Model, {"model_path": "m", "action_dim": 7}, "actor.model")
    Model(model_path='m', policy=Policy(action_dim=7))
    >>> parse_section(Model, {"action_dim": 0}, "actor.model")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: actor.model.action_dim: must be >= 1
    >>> parse_section(Model, {"policy": {"action_dim": 7}}, "actor.model")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: actor.model.policy: unknown key; allowed keys are action_dim, model_path
    """
    return dataclasses.field(default_factory=cls, metadata={"flat": label})


#: what each scope says in a refusal
SCOPE_TEXT = {"math": "read by math runs only", "embodied": "read by embodied runs only",
              "megatron": "read by the Megatron backend only (actor.training_backend: megatron)",
              "fsdp": "read by the FSDP2 backend only (actor.training_backend: fsdp)",
              "offpolicy": "read by the off-policy embodied recipe only (algorithm.loss_type: embodied_sac)"}


#: scopes whose idle keys are noted rather than refused (see :func:`check_scopes`)
BACKEND_SCOPES = frozenset({"fsdp", "megatron"})


def field_default(f: dataclasses.Field) -> Any:
    """The value a field takes when its key is absent."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def walk_fields(obj: Any, path: str = ""):
    """``(path, field, value)`` of every field under the dataclass ``obj``, depth first."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.metadata.get("flat"):  # its keys are the parent's in YAML, so in key paths too
            yield from walk_fields(value, path)
            continue
        sub = _join(path, f.name)
        yield sub, f, value
        if dataclasses.is_dataclass(value):
            yield from walk_fields(value, sub)


def check_scopes(obj: Any, active: set[str], path: str = "", soft: frozenset[str] = frozenset()) -> list[str]:
    """Refuse a key set (to other than its default) whose ``scope`` is not ``active`` in this run;
    for a scope in ``soft`` return a note line per such key instead (the reference writes both
    training backends' sections in one file, so the idle backend's keys are named, not refused).

    >>> @dataclasses.dataclass(frozen=True)
    ... class Algo:
    ...     rollout_epoch: int = rule(1, scope="embodied")
    ...     tp: int = rule(1, scope="megatron")
    >>> check_scopes(Algo(tp=2), {"math", "fsdp"}, "algorithm", soft=frozenset({"megatron"}))
    ['algorithm.tp: 2: not read: read by the Megatron backend only (actor.training_backend: megatron)']
    >>> check_scopes(Algo(rollout_epoch=2), {"math"}, "algorithm")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: algorithm.rollout_epoch: 2 has no effect here: read by embodied runs only; remove it (or leave the default 1)
    """  # noqa: E501 - a doctest's expected output is one line
    notes = []
    for sub, f, value in walk_fields(obj, path):
        scope = f.metadata.get("scope")
        if scope is None or scope in active:
            continue
        default = field_default(f)
        if value == default:
            continue
        if scope in soft:
            for key, v, _ in _differences(value, default, sub):
                notes.append(f"{key}: {v!r}: not read: {SCOPE_TEXT[scope]}")
            continue
        key, value, default = _differences(value, default, sub)[0]
        raise ConfigError(key, f"{value!r} has no effect here: {SCOPE_TEXT[scope]}; remove it "
                               f"(or leave the default {default!r})")
    return notes


def _differences(value: Any, default: Any, path: str) -> list[tuple[str, Any, Any]]:
    """``(key, value, default)`` of every leaf where ``value`` differs from ``default``."""
    if not (dataclasses.is_dataclass(value) and dataclasses.is_dataclass(default)):
        return [(path, value, default)]
    out = []
    for f in dataclasses.fields(value):
        a, b = getattr(value, f.name), getattr(default, f.name)
        if a != b:
            out += _differences(a, b, _join(path, f.name))
    return out


def collect_notes(obj: Any, path: str = "") -> list[str]:
    """``key: text`` for every field whose value has a ``note`` (see :func:`rule`)."""
    notes = []
    for sub, f, value in walk_fields(obj, path):
        note = f.metadata.get("note")
        if note is not None and value in note[0]:
            notes.append(f"{sub}: {value!r}: {note[1]}")
    return notes
