"""The screens refuse bombs before any verifier runs, and pass every right answer's notation.

Bombs: each is refused by the screen (a reason, no sandbox round trip) and scores 0; the screen's own
time is checked with a generous bound. Right answers: the issue's notations, each scored by the
sandboxed math path against a gold it equals.
"""

import time

import pytest

from grpokit.sandbox import scorers
from grpokit.sandbox.client import shared_sandbox
from grpokit.sandbox.size_bounds import size_refusal
from grpokit.tasks.math_problems import math_score, math_scores

MATH_BOMBS = [
    "2^{999 \\cdot 999 \\cdot 999}",
    "2^{999!}",
    "(9^{99})!",
    "\\Gamma(10^{99})",
    "\\Gamma 10^{99}",
    "\\binom{10^{99}}{10^{98}}",
    "{10^{99} \\choose 5}",
    "\\operatorname{eye}(20000)",
    "\\operatorname{zeros}(9999, 9999)",
    "\\operatorname{ones}(9999, 9999)",
    "10^{6}!",
    "|10^{99}|!",
    "2^{1{,}000{,}000{,}000}",
    "2^{1\\,000\\,000\\,000}",
    "e^{10^{9}}",
    "\\exp(10^{9})",
    "1.0000001^{10^{9}}",
    "(x+y+z+w)^{100}",
    "(x+1)^{1000}",
    "(1+\\sqrt{2})^{500}",
    "\\begin{pmatrix}a&b\\\\c&d\\end{pmatrix}^{100}",
    "\\sum_{i=1}^{10^{6}} i^{i}",
    "\\int_0^1 e^{x^3}\\sin(x^5) dx",
    "2^{2^{2^{2^{2}}}}",
    "3**(999*999*999)",
    "9**(9*9*9*9*9*9*9*9*9)",
]
SYMPY_BOMBS = ["3**(999*999*999)", "9**(9*9*9*9*9*9*9*9*9)", "x**(10**9)", "(x+y+z)**(99*99)", "exp(10**9)", "9**9**9"]


@pytest.mark.parametrize("bomb", MATH_BOMBS)
def test_math_bombs_are_refused_before_math_verify_and_score_zero(bomb):
    for gold in ("42", "x^2 + 1"):
        started = time.perf_counter()
        assert scorers.math_refusal(bomb, gold) is not None
        assert time.perf_counter() - started < 0.05  # the screen alone; it takes well under a millisecond
    box = shared_sandbox()
    before = box.requests
    assert math_scores([bomb], ["42"]) == [0.0]
    assert box.requests == before, "a bomb reached the sandbox"


@pytest.mark.parametrize("bomb", SYMPY_BOMBS)
def test_sympy_bombs_are_refused(bomb):
    started = time.perf_counter()
    assert scorers.sympy_refusal(bomb) is not None
    assert scorers.gym_refusal("puzzle24", bomb) is not None
    assert time.perf_counter() - started < 0.05


@pytest.mark.parametrize(
    "text",
    ["2^{2023}", "1000!", "\\binom{100}{50}", "(x+1)^{2}", "e^{x^2}", "10^{10000}", "3**4 + 2*(5 - 1)", "(x+y)^{10}"],
)
def test_values_that_compute_cheaply_pass_the_size_bound(text):
    assert size_refusal(text) is None


def test_a_bomb_equal_to_the_gold_is_the_golds_own_cost():
    """Text equal to the gold passes whatever it is: math-verify has already read the gold itself."""
    assert scorers.math_refusal(" 2^{999!} ", "2^{999!}") is None
    assert scorers.math_refusal("2^{999!}", "2^{999! }") is not None


# Each answer is right for its gold; math-verify reads each the way grpokit scores it.
RIGHT = [
    ("f'(x) = 3x^2", "f'(x) = 3x^2"),
    ("45'", "45'"),
    ("A'B'", "A'B'"),
    ("(1;2)", "(1;2)"),
    ("(1;2)", "(1, 2)"),
    ("\\#3", "\\#3"),
    ("\\text{St. Louis}", "\\text{St. Louis}"),
    ("10:30 \\text{ a.m.}", "10:30 \\text{ a.m.}"),
    ("x²", "x²"),
    ("x²", "x^2"),
    ("∠A", "∠A"),
    ("½", "½"),
    ("½", "\\frac{1}{2}"),
    ("x ∈ [0, 1]", "x ∈ [0, 1]"),
    ("log_2(8)", "log_2(8)"),
    ("sgn(x)", "sgn(x)"),
    ("arccot(2)", "arccot(2)"),
    ("5\\text{ in}", "5"),
    ("x >= 3", "x \\geq 3"),
    ("e^{x^2}", "\\exp(x^2)"),
    ("\\$18", "18"),
    ("\\$1,024", "1024"),
    ("1\\,024", "1024"),
    ("√2", "\\sqrt{2}"),
    ("∞", "\\infty"),
    ("0.\\overline{3}", "\\frac{1}{3}"),
    ("3\\%", "3"),
    ("3\\%", "3\\%"),
]
WRONG = [
    ("1\\,024", "25"),  # thin-space thousands: 1024, not 1 + 024
    ("3\\%", "0.03"),  # the percent sign is a label: 3% answers "3", never both 3 and 0.03
    ("0.03", "3\\%"),
    ("1000 \\text{ or } 42", "42"),  # a hedge word inside \text{} is still a hedge
    ("421; 42", "42"),  # a top-level `;` lists alternatives
    ("x > 3", "3"),  # a relation the gold does not use
]


@pytest.mark.parametrize(("answer", "gold"), RIGHT)
def test_right_answers_in_every_notation_pass_the_screen_and_score_one(answer, gold):
    assert scorers.math_refusal(answer, gold) is None
    assert math_score(answer, gold) == 1.0


@pytest.mark.parametrize(("answer", "gold"), WRONG)
def test_the_documented_readings_refuse_these(answer, gold):
    assert math_score(answer, gold) == 0.0


@pytest.mark.parametrize(
    "payload",
    [
        "__import__('os').system('true')",
        "exec(bytes.fromhex('6f73'))",
        "open(1)",
        "f'{open(1)}'",
        "x = 1; import os",
        "a.real",
        "\\text{x}.__class__",
        "\\operatorname{rref}(x)",
        "lambda: 1",
        "１２",
    ],
)
def test_relaxed_screen_still_refuses_code(payload):
    assert scorers.math_refusal(payload, "42") is not None
