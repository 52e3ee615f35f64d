"""The cells of the config reference's tables: a key's type, default and rule as markdown
(used by :mod:`rlinf.config.reference_doc`).

>>> from typing import Literal
>>> print(type_cell(Literal["fsdp", "megatron"] | None))
one of `fsdp`, `megatron`, `null`
>>> print(type_cell(list[int] | None))  # the bar escaped for the markdown table
`list[int] \\| null`
>>> yaml_flow(1e-6), yaml_flow([1, "a"]), yaml_flow(None)
('1.0e-06', '[1, a]', 'null')
"""

import dataclasses
import re
import types
import typing
from typing import Any, Literal, Union

import yaml


def markdown(text: str) -> str:
    """reST inline markup of our docstrings -> markdown."""
    text = re.sub(r":(?:class|func|meth|mod|attr):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def cell(text: str) -> str:
    return text.replace("|", "\\|")


_SCOPE_TAG = {"math": "Math runs only.", "embodied": "Embodied runs only.",
              "megatron": "Megatron backend only.", "fsdp": "FSDP2 backend only.",
              "offpolicy": "Off-policy embodied runs only (algorithm.loss_type: embodied_sac)."}


def rule_text(f: dataclasses.Field) -> str:
    """The key's rule (see ``rlinf.utils.typed_config.rule``) as a sentence for the table."""
    md = f.metadata
    out = ""
    if "only" in md:
        out += " *Accepted: " + ", ".join(f"`{yaml_flow(v)}`" for v in md["only"]) + f"* ({md['reason']})."
    if "note" in md:
        values, why = md["note"]
        out += " *Noted at start when " + " or ".join(f"`{yaml_flow(v)}`" for v in values) + f"*: {why}."
    if "scope" in md:
        out += f" *{_SCOPE_TAG[md['scope']]}*"
    return out


def is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def type_cell(tp: Any) -> str:
    optional = is_union(tp) and type(None) in typing.get_args(tp)
    rest = [a for a in typing.get_args(tp) if a is not type(None)] if is_union(tp) else [tp]
    if len(rest) == 1 and typing.get_origin(rest[0]) is Literal:
        values = [f"`{yaml_flow(v)}`" for v in typing.get_args(rest[0])]
        return "one of " + ", ".join(values + (["`null`"] if optional else []))
    return f"`{cell(type_name(tp))}`"


def type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return "any"
    if tp is type(None):
        return "null"
    if is_union(tp):
        rest = [a for a in args if a is not type(None)]
        names = [type_name(a) for a in rest] + (["null"] if len(rest) < len(args) else [])
        return " | ".join(names)
    if origin is Literal:
        return " | ".join(yaml_flow(a) for a in args)
    if origin in (list, tuple) or tp in (list, tuple):
        return f"list[{type_name(args[0]) if args else 'any'}]"
    if origin is dict or tp is dict:
        return f"dict[{type_name(args[0])}, {type_name(args[1])}]" if len(args) == 2 else "dict"
    if tp in (int, float, bool, str):
        return tp.__name__
    raise TypeError(f"unsupported config field type {tp!r}")


def default_cell(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "*required*"
    return f"`{cell(yaml_flow(value))}`"


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def yaml_flow(value: Any) -> str:
    """``value`` as YAML writes it in flow style (``null``, ``true``, ``1.0e-06``, ``[a, b]``)."""
    text = yaml.safe_dump(_plain(value), default_flow_style=True, width=10_000).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text
