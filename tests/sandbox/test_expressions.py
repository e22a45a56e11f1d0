import time
from fractions import Fraction

import pytest

from grpokit.sandbox.expressions import evaluate_expression


@pytest.mark.parametrize(
    ("text", "value", "numbers"),
    [
        ("1 + 2 * 3", 7, (1, 2, 3)),
        ("(75 - 25) / 5 * 2", 20, (75, 25, 5, 2)),
        ("7 / 2", Fraction(7, 2), (7, 2)),  # exact, no float rounding
        ("  ((4)) ", 4, (4,)),
        ("95 - 91 + 11 * 3", 37, (95, 91, 11, 3)),
    ],
)
def test_evaluates_plain_arithmetic(text, value, numbers):
    result = evaluate_expression(text)
    assert result is not None
    assert result.value == value and result.numbers == numbers


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('touch pwned.txt')",
        "9**9**9",
        "75**50**25**3",
        "2 ** 3",
        "open('x')",
        "x + 1",
        "1.5 + 2",
        "1e9",
        "0x10",
        "３ + ４",  # fullwidth digits
        "٣ + ٤",  # Arabic-Indic digits
        "1 / 0",
        "1 / (2 - 2)",
        "-5 + 10",  # unary minus is off unless asked for
        "1 +",
        "(1 + 2",
        "",
        "   ",
        "1" * 201,
        "(" * 100 + "1" + ")" * 100,
        " * ".join(["999999"] * 3),  # past the magnitude cap
        "1 + " * 60 + "1",  # past the node cap
        "lambda: 1",
        "[1, 2]",
        "1; 2",
        "1 if 1 else 2",
    ],
)
def test_rejects_everything_else_quickly(text):
    start = time.perf_counter()
    assert evaluate_expression(text) is None
    assert time.perf_counter() - start < 1.0  # a guard against hangs, not a speed target


def test_unary_minus_when_allowed():
    assert evaluate_expression("-5 + 10", allow_unary_minus=True).value == 5


def test_never_runs_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    evaluate_expression("__import__('os').system('touch pwned.txt')")
    assert not (tmp_path / "pwned.txt").exists()
