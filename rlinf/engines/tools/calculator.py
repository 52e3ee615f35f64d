"""The ``calculator`` tool: exact arithmetic on one expression, without ``eval``.

The expression is parsed with :mod:`ast` (``mode="eval"``) and only these nodes are walked:

* numbers: integer literals, and decimal literals taken *exactly* from their text (``0.1`` is
  1/10, so ``0.1+0.2`` is 3/10); every value is a :class:`fractions.Fraction`;
* ``+ - * / // % **`` with parentheses, unary ``+`` and ``-``; ``^`` means power (as in most
  calculators and as models often write ``x^2``), there is no bitwise XOR;
* the functions ``abs(x)``, ``min(a, b, ...)``, ``max(a, b, ...)`` and ``round(x)`` /
  ``round(x, n)`` (Python's rounding: halves go to the even neighbour).

Anything else (names, attributes, other calls, strings, comparisons, comprehensions, lambdas)
is refused with an error result naming what is not allowed. Nothing is ever executed.

Bounds keep every call fast, so no time limit is needed: the expression has at most
``max_chars`` characters; a power's exponent is at most ``max_exponent`` in size and is refused
*before* computing when the result would pass ``max_digits`` digits (``9**9**9`` is refused at
once); every intermediate value has at most ``max_digits`` digits in numerator and denominator;
a decimal literal's exponent (``1e999999999``) is bounded the same way. A non-integer exponent
is allowed only when the result is rational (``16**0.5`` is 4, ``2**0.5`` is refused).

Output: an integer prints as its digits; any other value as a decimal rounded (half up) to
``decimals`` digits after the point, counted from the first non-zero digit when the value is
below 1, trailing zeros stripped, so a short terminating decimal prints exactly (``10/4`` is
``2.5``, ``1/3`` is ``0.3333333333``). Errors come back as ``Error: ...`` with status ``error``.

Example:
    >>> calc = CalculatorTool()
    >>> [calc.call({"expression": e}, ToolSession()).text for e in ("123*456", "1/3", "0.1+0.2", "2^10")]
    ['56088', '0.3333333333', '0.3', '1024']
    >>> calc.call({"expression": "__import__('os')"}, ToolSession()).text
    "Error: function '__import__' is not allowed; only numbers, + - * / // % ** ^, parentheses, abs, min, max, round"
"""

from __future__ import annotations

import ast
import decimal
import math
from dataclasses import dataclass
from fractions import Fraction

from rlinf.engines.tools.base import Tool, ToolResult, ToolSession, register_tool
from rlinf.utils.typed_config import ConfigError

__all__ = ["CalculatorTool", "CalcError", "evaluate", "format_number"]

ALLOWED = "only numbers, + - * / // % ** ^, parentheses, abs, min, max, round"
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.Pow: "**"}
_NODE_NAMES = {ast.Attribute: "attribute access", ast.Subscript: "indexing", ast.Compare: "comparison",
               ast.BoolOp: "'and'/'or'", ast.Lambda: "lambda", ast.IfExp: "'if' expression",
               ast.ListComp: "comprehension", ast.SetComp: "comprehension", ast.DictComp: "comprehension",
               ast.GeneratorExp: "comprehension", ast.List: "list", ast.Tuple: "tuple", ast.Set: "set",
               ast.Dict: "dict", ast.JoinedStr: "string", ast.Starred: "'*' unpacking",
               ast.NamedExpr: "assignment", ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield"}
_OTHER_OPS = {ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
              ast.MatMult: "@"}


class CalcError(ValueError):
    """An expression the calculator refuses or cannot compute (the message is for the model)."""


def _log10(value: int) -> float:
    """``log10(|value|)``, 0 for 0 (math.log10 takes ints of any size)."""
    return math.log10(abs(value)) if value else 0.0


def _exact_root(value: int, n: int) -> int | None:
    """The integer ``r >= 0`` with ``r**n == value`` (``value >= 0``), else None."""
    if value < 2:
        return value
    r = 1 << -(-value.bit_length() // n)  # at least the root; Newton's steps then fall to its floor
    while True:
        nxt = ((n - 1) * r + value // r ** (n - 1)) // n
        if nxt >= r:
            break
        r = nxt
    return r if r ** n == value else None


class _Evaluator:
    """Walks an expression tree with the bounds of one :class:`CalculatorTool`."""

    def __init__(self, source: str, max_digits: int, max_exponent: int):
        self.source = source
        self.max_digits = max_digits
        self.max_exponent = max_exponent
        self.limit = 10 ** max_digits  # the smallest number with more than max_digits digits

    def bounded(self, value: Fraction) -> Fraction:
        if abs(value.numerator) >= self.limit or value.denominator >= self.limit:
            raise CalcError(f"a value has more than {self.max_digits} digits")
        return value

    def eval(self, node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return self.eval(node.body)
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            value = self.eval(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _BINARY:
                sign = _OTHER_OPS.get(type(node.op), type(node.op).__name__)
                raise CalcError(f"operator {sign!r} is not allowed; {ALLOWED}")
            return self.binary(node.op, self.eval(node.left), self.eval(node.right))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Name):
            raise CalcError(f"name {node.id!r} is not allowed; {ALLOWED}")
        if isinstance(node, ast.UnaryOp):
            raise CalcError(f"operator {'not' if isinstance(node.op, ast.Not) else '~'!r} is not allowed; {ALLOWED}")
        what = _NODE_NAMES.get(type(node), type(node).__name__)
        raise CalcError(f"{what} is not allowed; {ALLOWED}")

    def constant(self, node: ast.Constant) -> Fraction:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "string" if isinstance(value, (str, bytes)) else repr(value)
            raise CalcError(f"{kind} is not allowed; {ALLOWED}")
        if isinstance(value, int):
            return self.bounded(Fraction(value))
        text = (ast.get_source_segment(self.source, node) or repr(value)).replace("_", "")
        try:
            exact = decimal.Decimal(text)
        except decimal.InvalidOperation:
            raise CalcError(f"cannot read the number {text!r}") from None
        if not exact.is_finite() or abs(exact.adjusted()) > self.max_digits:
            raise CalcError(f"the number {text!r} is out of range (more than {self.max_digits} digits)")
        return self.bounded(Fraction(exact))

    def binary(self, op: ast.operator, a: Fraction, b: Fraction) -> Fraction:
        if isinstance(op, ast.Pow):
            return self.power(a, b)
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0:
            raise CalcError("division by zero")
        if isinstance(op, ast.Add):
            out = a + b
        elif isinstance(op, ast.Sub):
            out = a - b
        elif isinstance(op, ast.Mult):
            out = a * b
        elif isinstance(op, ast.Div):
            out = a / b
        elif isinstance(op, ast.FloorDiv):
            out = Fraction(a // b)
        else:
            out = a % b
        return self.bounded(out)

    def power(self, base: Fraction, exponent: Fraction) -> Fraction:
        if abs(exponent) > self.max_exponent:
            raise CalcError(f"exponent {format_number(exponent, 6)} is too large (limit {self.max_exponent})")
        if base == 0 and exponent < 0:
            raise CalcError("division by zero")
        if exponent.denominator != 1:
            base = self.root(base, exponent.denominator)
        n = abs(exponent.numerator)
        size = n * max(_log10(base.numerator), _log10(base.denominator))
        if size > self.max_digits + 1:  # checked before computing; bounded() below is exact
            raise CalcError(f"the result would have about {size:.0f} digits (limit {self.max_digits})")
        out = base ** n
        return self.bounded(1 / out if exponent.numerator < 0 else out)

    def root(self, base: Fraction, n: int) -> Fraction:
        """The exact ``n``-th root of ``base``, or an error when it is not rational."""
        if n > self.max_exponent:
            raise CalcError(f"root of degree {n} is too large (limit {self.max_exponent})")
        if base < 0 and n % 2 == 0:
            raise CalcError("even root of a negative number is not a real number")
        num = _exact_root(abs(base.numerator), n)
        den = _exact_root(base.denominator, n)
        if num is None or den is None:
            raise CalcError("the result is irrational; this calculator is exact (rational results only)")
        return Fraction(-num if base < 0 else num, den)

    def call(self, node: ast.Call) -> Fraction:
        if not isinstance(node.func, ast.Name) or node.func.id not in ("abs", "min", "max", "round"):
            name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise CalcError(f"function {name!r} is not allowed; {ALLOWED}")
        name = node.func.id
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            raise CalcError(f"{name}() takes plain numbers only")
        args = [self.eval(arg) for arg in node.args]
        if name == "abs" and len(args) == 1:
            return abs(args[0])
        if name in ("min", "max") and args:
            return min(args) if name == "min" else max(args)
        if name == "round" and len(args) in (1, 2):
            places = args[1] if len(args) == 2 else Fraction(0)
            if places.denominator != 1 or abs(places) > self.max_digits:
                raise CalcError(f"round()'s second argument must be a whole number up to {self.max_digits}")
            return self.bounded(Fraction(round(args[0], int(places))))
        want = {"abs": "one number", "round": "one or two numbers"}.get(name, "at least one number")
        raise CalcError(f"{name}() takes {want}, got {len(args)}")


def evaluate(expression: str, max_digits: int = 1000, max_exponent: int = 1000) -> Fraction:
    """The exact value of ``expression`` (``^`` is power); :class:`CalcError` when refused.

    >>> evaluate("0.1 + 0.2") == Fraction(3, 10), evaluate("2^-2"), evaluate("-(3-5)*2")
    (True, Fraction(1, 4), Fraction(4, 1))
    >>> try:
    ...     evaluate("9**9**9")
    ... except CalcError as exc:
    ...     print(exc)
    exponent 387420489 is too large (limit 1000)
    """
    source = expression.replace("^", "**").strip()
    if not source:
        raise CalcError("empty expression")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        raise CalcError(f"invalid expression: {exc.msg}{where}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise CalcError(f"invalid expression: {type(exc).__name__}: {exc}") from None
    try:
        return _Evaluator(source, max_digits, max_exponent).eval(tree)
    except RecursionError:
        raise CalcError("expression is nested too deeply") from None


def format_number(value: Fraction, decimals: int = 10) -> str:
    """``value`` as text: an integer's digits, else a decimal rounded half up to ``decimals``
    places after the point (counted from the first non-zero digit below 1), zeros stripped.

    >>> [format_number(Fraction(*f)) for f in ((7, 1), (-5, 2), (2, 3), (1, 3000), (-1, 7))]
    ['7', '-2.5', '0.6666666667', '0.0003333333333', '-0.1428571429']
    """
    if value.denominator == 1:
        return str(value.numerator)
    size = abs(value)
    zeros = 0  # zeros right after the point (below 1), not counted in ``decimals``
    if size < 1:
        zeros = max(0, int(_log10(size.denominator) - _log10(size.numerator)) - 1)
        while size * 10 ** (zeros + 1) < 1:
            zeros += 1
        while zeros and size * 10 ** zeros >= 1:
            zeros -= 1
    places = decimals + zeros
    scaled = int(size * 10 ** places + Fraction(1, 2))
    text = str(scaled).rjust(places + 1, "0")
    whole, frac = text[:-places], text[-places:].rstrip("0")
    out = f"{whole}.{frac}" if frac else whole
    return f"-{out}" if value < 0 else out


@dataclass(frozen=True)
class CalculatorOptions:
    """YAML keys under ``tools.calculator``.

    Attributes:
        max_chars: longest expression accepted.
        max_digits: most digits of any value (numerator or denominator) and of the result (at most
            4000: Python refuses to print longer integers).
        max_exponent: largest size of a power's exponent.
        decimals: digits after the point of a non-integer result (see the module docstring).
    """

    max_chars: int = 200
    max_digits: int = 1000
    max_exponent: int = 1000
    decimals: int = 10

    def validate(self, path: str) -> None:
        for key in ("max_chars", "max_digits", "max_exponent", "decimals"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{path}.{key}", f"must be at least 1, got {getattr(self, key)}")
        if self.max_digits > 4000:
            raise ConfigError(f"{path}.max_digits", f"at most 4000 (Python prints ints up to 4300 digits), "
                              f"got {self.max_digits}")


@register_tool
class CalculatorTool(Tool):
    """Exact arithmetic (see the module docstring).

    >>> CalculatorTool().call({"expression": "7//2 + 10/4"}, ToolSession()).text
    '5.5'
    >>> CalculatorTool().call({"expression": "1/0"}, ToolSession())
    ToolResult(text='Error: division by zero', status='error', info={})
    """

    name = "calculator"
    description = ("Evaluate an arithmetic expression exactly: numbers, + - * / // % and ** or ^ (power), "
                   "parentheses, abs, min, max, round. Example: (12.5*4 - 3)^2 / 7")
    parameters = {"type": "object",
                  "properties": {"expression": {"type": "string", "description": "the expression, e.g. 2^10/3"}},
                  "required": ["expression"], "additionalProperties": False}
    Options = CalculatorOptions

    def call(self, arguments: dict, session: ToolSession) -> ToolResult:
        expression = arguments["expression"]
        opts = self.options
        if len(expression) > opts.max_chars:
            return ToolResult(f"Error: expression has {len(expression)} characters (limit {opts.max_chars})", "error")
        try:
            value = evaluate(expression, opts.max_digits, opts.max_exponent)
        except CalcError as exc:
            return ToolResult(f"Error: {exc}", "error")
        return ToolResult(format_number(value, opts.decimals))
