"""ROLL's ``device_mapping`` -> a list of accelerator ranks, read without evaluating anything.

ROLL writes a worker's accelerators as a Python expression string (``list(range(0,8))``) or a YAML
list (``[0, 1, 2, 3]``). Accepted, and combined with ``+``: ``list(range(b))``,
``list(range(a, b))``, ``list(range(a, b, step))`` (step > 0) and literal lists of ints. The string
is parsed with :func:`ast.parse` and only those nodes are accepted; nothing is executed. Anything
else, negative ranks and a rank listed twice are refused with one line.

Example:
    >>> parse_device_mapping("list(range(0,4)) + [6, 7]")
    [0, 1, 2, 3, 6, 7]
    >>> parse_device_mapping("list(range(0, 8, 2))")
    [0, 2, 4, 6]
    >>> parse_device_mapping("__import__('os').getcwd()")
    Traceback (most recent call last):
    ...
    rlinf.config.translate.device_mapping.DeviceMappingError: cannot read "__import__('os').getcwd()": accepted are list(range(a, b[, step])), literal lists of ints and sums of these
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import ast
from typing import Any

ACCEPTED = "accepted are list(range(a, b[, step])), literal lists of ints and sums of these"


class DeviceMappingError(ValueError):
    """A ``device_mapping`` we do not read (the message is one line)."""


def parse_device_mapping(value: Any) -> list[int]:
    """Accelerator ranks of a ``device_mapping`` value (string or YAML list), in order."""
    if isinstance(value, list):
        ranks = _literal_list(value, value)
    elif isinstance(value, int) and not isinstance(value, bool):
        ranks = [value]
    elif isinstance(value, str):
        try:
            tree = ast.parse(value.strip(), mode="eval")
        except SyntaxError:
            raise DeviceMappingError(f"cannot read {value!r}: not an expression; {ACCEPTED}") from None
        ranks = _ranks(tree.body, value)
    else:
        raise DeviceMappingError(f"expected a string or a list of ints, got {value!r}")
    if any(r < 0 for r in ranks):
        raise DeviceMappingError(f"{value!r} has a negative rank")
    seen = set()
    for r in ranks:
        if r in seen:
            raise DeviceMappingError(f"{value!r} lists accelerator {r} twice")
        seen.add(r)
    if not ranks:
        raise DeviceMappingError(f"{value!r} names no accelerator")
    return ranks


def _ranks(node: ast.AST, text: str) -> list[int]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _ranks(node.left, text) + _ranks(node.right, text)
    if isinstance(node, ast.List):
        return _literal_list([_int(e, text) for e in node.elts], text)
    if (_is_call(node, "list") and len(node.args) == 1 and not node.keywords
            and _is_call(node.args[0], "range") and 1 <= len(node.args[0].args) <= 3
            and not node.args[0].keywords):
        args = [_int(a, text) for a in node.args[0].args]
        if len(args) == 3 and args[2] <= 0:
            raise DeviceMappingError(f"cannot read {text!r}: the range step must be > 0")
        return list(range(*args))
    raise DeviceMappingError(f"cannot read {text!r}: {ACCEPTED}")


def _is_call(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _int(node: ast.AST, text: str) -> int:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_int(node.operand, text)
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    raise DeviceMappingError(f"cannot read {text!r}: {ACCEPTED}")


def _literal_list(values: list[Any], text: Any) -> list[int]:
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool):
            raise DeviceMappingError(f"cannot read {text!r}: {ACCEPTED}")
    return list(values)
