"""The calculator tool: exact values, refusals with one clear line, bounds, options."""

from __future__ import annotations

import random
import time
from fractions import Fraction

import pytest

from rlinf.engines.tools.base import ToolSession, check_arguments
from rlinf.engines.tools.calculator import CalcError, CalculatorTool, evaluate, format_number
from rlinf.engines.tools.pool import ToolPool
from rlinf.utils.typed_config import ConfigError, parse_section


def calc(expression: str, **options):
    tool = CalculatorTool(CalculatorTool.Options(**options))
    return tool.call({"expression": expression}, ToolSession())


@pytest.mark.parametrize("expression, text", [
    ("123*456", "56088"),
    ("1/3", "0.3333333333"),
    ("2/3", "0.6666666667"),            # rounded half up at the 10th place
    ("-1/3", "-0.3333333333"),
    ("0.1+0.2", "0.3"),                 # decimal literals are exact
    ("2^10", "1024"),                   # ^ is power
    ("2^3^2", "512"),                   # right-associative like **
    ("-2^2", "-4"),                     # unary minus binds looser than power
    ("-(3-5)*2", "4"),
    ("7//2", "3"),
    ("-7//2", "-4"),                    # floor division
    ("7 % 3", "1"),
    ("7.5 % 2", "1.5"),
    ("10/4", "2.5"),
    ("(1/3)*3", "1"),                   # exact, not 0.9999999999
    ("1/3000", "0.0003333333333"),      # 10 digits after the leading zeros
    ("1/1024", "0.0009765625"),         # a terminating decimal prints exactly
    ("2**-2", "0.25"),
    ("16**0.5", "4"),                   # rational roots are exact
    ("(-8)**(1/3)", "-2"),
    ("(4/9)^1.5", "0.2962962963"),
    ("1e3 + 1.5e-1", "1000.15"),
    ("1_000 * 3", "3000"),
    ("abs(-7) + max(1, 9, 4) - min(2, 3)", "14"),
    ("round(2.5) + round(3.5)", "6"),  # Python's rounding: halves to even
    ("round(3.14159, 2)", "3.14"),
    ("0.99999999999", "1"),             # rounds up into the integer
    ("  ( 1 + 2 ) * 3 ", "9"),
    ("9**999 // 9**998", "9"),
])
def test_values(expression, text):
    result = calc(expression)
    assert (result.text, result.status) == (text, "ok")


@pytest.mark.parametrize("expression, message", [
    ("__import__('os')", "function '__import__' is not allowed"),
    ("print(1)", "function 'print' is not allowed"),
    ("x + 1", "name 'x' is not allowed"),
    ("(1).real", "attribute access is not allowed"),
    ("'a' * 3", "string is not allowed"),
    ("[i for i in (1, 2)]", "comprehension is not allowed"),
    ("(lambda: 1)()", "function 'lambda: 1' is not allowed"),
    ("1 < 2", "comparison is not allowed"),
    ("6 & 3", "operator '&' is not allowed"),
    ("1 << 5", "operator '<<' is not allowed"),
    ("~1", "operator '~' is not allowed"),
    ("True + 1", "True is not allowed"),
    ("2j", "2j is not allowed"),
    ("1/0", "division by zero"),
    ("5 // 0", "division by zero"),
    ("5 % (2 - 2)", "division by zero"),
    ("0 ** -1", "division by zero"),
    ("(1", "invalid expression: '(' was never closed"),
    ("1 +", "invalid expression: invalid syntax"),
    ("", "empty expression"),
    ("2 ** 0.5", "irrational"),
    ("(-4) ** 0.5", "even root of a negative number"),
    ("9**9**9", "exponent 387420489 is too large (limit 1000)"),
    ("2 ** 1001", "exponent 1001 is too large"),
    ("10 ** 1000", "more than 1000 digits"),
    ("3 ** 999 * 3 ** 999 * 3 ** 999 * 3 ** 999", "more than 1000 digits"),
    ("1e999999999999", "out of range"),
    ("min()", "min() takes at least one number, got 0"),
    ("abs(1, 2)", "abs() takes one number, got 2"),
    ("round(1, 0.5)", "second argument must be a whole number"),
    ("max(*[1])", "plain numbers only"),
])
def test_refused(expression, message):
    result = calc(expression)
    assert result.status == "error"
    assert result.text.startswith("Error: ") and message in result.text, result.text
    assert "\n" not in result.text


def test_bounds_are_checked_before_computing():
    start = time.perf_counter()
    for expression in ("9**9**9", "(10**999)**999", "99**(99**99)", "2**1000 ** 2**1000", "7**(1/10**100)"):
        assert calc(expression).status == "error"
    assert time.perf_counter() - start < 1.0


def test_options_bound_length_digits_and_decimals():
    assert calc("1+" * 50 + "1").text == "51"
    too_long = calc("1+" * 100 + "1")
    assert too_long.status == "error" and "201 characters (limit 200)" in too_long.text
    assert calc("1+1+1", max_chars=4).status == "error"
    assert calc("10**20", max_digits=20).status == "error"
    assert calc("10**19", max_digits=20).text == "1" + "0" * 19
    assert calc("2**11", max_exponent=10).status == "error"
    assert calc("1/3", decimals=3).text == "0.333"
    assert calc("1/8", decimals=2).text == "0.13"  # 0.125 rounded half up


def test_options_from_yaml_are_checked():
    opts = parse_section(CalculatorTool.Options, {"max_chars": 50, "decimals": 4}, "tools.calculator")
    assert (opts.max_chars, opts.decimals, opts.max_digits) == (50, 4, 1000)
    with pytest.raises(ConfigError, match=r"^tools\.calculator\.decimals: must be at least 1, got 0$"):
        parse_section(CalculatorTool.Options, {"decimals": 0}, "tools.calculator")
    with pytest.raises(ConfigError, match=r"^tools\.calculator\.max_digits: at most 4000"):
        parse_section(CalculatorTool.Options, {"max_digits": 5000}, "tools.calculator")
    with pytest.raises(ConfigError, match=r"^tools\.calculator\.precision: unknown key"):
        parse_section(CalculatorTool.Options, {"precision": 3}, "tools.calculator")


def _random_expression(rng: random.Random, depth: int) -> tuple[str, Fraction]:
    """A random expression of small integers and its value computed directly with Fractions."""
    if depth == 0 or rng.random() < 0.3:
        n = rng.randint(0, 30)
        return str(n), Fraction(n)
    (left, a), (right, b) = _random_expression(rng, depth - 1), _random_expression(rng, depth - 1)
    op = rng.choice("+-*/")
    if op == "/" and b == 0:
        op = "+"
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[op]
    return f"({left} {op} {right})", value


def test_random_expressions_match_exact_fractions():
    rng = random.Random(7)
    for _ in range(300):
        text, value = _random_expression(rng, 4)
        assert evaluate(text) == value, text
        assert calc(text).text == format_number(value)


def test_format_number():
    assert format_number(Fraction(-5, 2)) == "-2.5"
    assert format_number(Fraction(10**12 + 1, 3)) == "333333333333.6666666667"
    assert format_number(Fraction(1, 2**40)) == "0.0000000000009094947018"
    assert format_number(Fraction(-1, 10**30), 3) == "-0." + "0" * 29 + "1"
    with pytest.raises(CalcError, match="division by zero"):
        evaluate("1/(3-3)")


def test_schema_and_pool():
    tool = CalculatorTool()
    assert tool.schema()["function"]["name"] == "calculator"
    assert check_arguments(tool.parameters, {"expression": "1"}) is None
    assert check_arguments(tool.parameters, {"expression": 1}) == "argument 'expression' must be string, got int"
    assert check_arguments(tool.parameters, {"expr": "1"}) == "missing argument 'expression'"
    pool = ToolPool({"calculator": tool}, max_concurrency=2, timeout_s=5)
    try:
        results = [pool.submit("calculator", {"expression": f"{i}*{i}"}, ToolSession()) for i in range(20)]
        assert [f.result().text for f in results] == [str(i * i) for i in range(20)]
        assert pool.submit("calculator", {"expression": "1/0"}, ToolSession()).result().status == "error"
        assert pool.counts["errors"] == 1
    finally:
        pool.close()
