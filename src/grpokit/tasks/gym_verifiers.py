"""grpokit's own verdicts for the reasoning-gym datasets whose scorer pays universal answers.

Probing every dataset's `score_answer` with answers that solve nothing (`grpokit.tasks.probes`) found five
that pay them on most problems:

- puzzle24 counts four in-range numbers and never checks they are the puzzle's (`1*2*3*4`), and takes
  `int()` of the value (24.5 is 24): here the expression must use exactly the puzzle's numbers and equal
  24 exactly (grpokit's AST evaluator, as for countdown);
- complex_arithmetic pays `min(1, exp(-distance))`, and `nan` makes that 1.0: here both parts must be
  finite and equal the result;
- number_sorting allows each value off by 1 and reads `NaN`: here the list must hold the gold's values
  exactly, in order, each finite;
- game_of_life_halting compares `bool(answer)` with `bool("False")`, true for any text: here the answer
  must be `True` or `False` (any case) and match;
- coin_flip pays a matching prefix (`0` against 0.0625) and an absolute 1e-4 (`0` against 0.00009):
  here the value must equal the exact probability to 4 significant figures.

Countdown's verdict is grpokit's too: its scorer hands the answer to sympy's `parse_expr` (Python `eval`).
Each verifier is a pure function of (answer, entry) that reads the answer as data (regular expressions,
`json`, exact decimals; never `eval` or sympy) within `MAX_ANSWER_CHARS`, so it runs in the trainer.

>>> entry = {"answer": "False", "metadata": {}}
>>> [verify("game_of_life_halting", a, entry) for a in ("banana", "false", "True")]
[0.0, 1.0, 0.0]
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

from grpokit.sandbox.expressions import evaluate_expression

MAX_ANSWER_CHARS = 1000
# A bounded, finite number: up to 30 digits each side of the point, an exponent of up to 3 digits.
_UNSIGNED = r"(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:e[-+]?[0-9]{1,3})?"
_DECIMAL = rf"[-+]?{_UNSIGNED}"
_REAL = re.compile(_DECIMAL)
# `a`, `bi`, `a + bi` (spaces removed; `i` or `j`; `i` alone is 1i)
_COMPLEX = re.compile(
    rf"(?P<real>{_DECIMAL})|(?P<imag>[-+]?{_UNSIGNED}?)\*?[ij]|(?P<a>{_DECIMAL})(?P<b>[-+]{_UNSIGNED}?)\*?[ij]"
)
_FRACTION = re.compile(rf"({_DECIMAL})(?:/([0-9]{{1,30}}))?")
_TOLERANCE = Decimal("1e-9")  # float noise in a generated result; NaN and infinities never come near


def countdown(answer: str, entry: dict[str, Any]) -> float:
    """reasoning-gym's countdown verdict, decided by grpokit's AST evaluator instead of `parse_expr`:
    1.0 when the expression uses exactly the given numbers and equals the target."""
    evaluated = evaluate_expression(answer, allow_unary_minus=True)
    if evaluated is None:
        return 0.0
    metadata = entry["metadata"]
    if sorted(evaluated.numbers) != sorted(int(n) for n in metadata["numbers"]):
        return 0.0
    return 1.0 if evaluated.value == Fraction(metadata["target"]) else 0.0


def puzzle24(answer: str, entry: dict[str, Any]) -> float:
    """1.0 when the expression uses exactly the puzzle's four numbers and equals 24.

    >>> entry = {"metadata": {"numbers": [1, 3, 5, 9]}}
    >>> [puzzle24(a, entry) for a in ("1*3*5 + 9", "1*2*3*4", "(1+1+1)*8", "9 + 5*3 + 1 - 1")]
    [1.0, 0.0, 0.0, 0.0]
    """
    evaluated = evaluate_expression(answer, allow_unary_minus=True)
    if evaluated is None:
        return 0.0
    if sorted(evaluated.numbers) != sorted(int(n) for n in entry["metadata"]["numbers"]):
        return 0.0
    return 1.0 if evaluated.value == 24 else 0.0


def complex_arithmetic(answer: str, entry: dict[str, Any]) -> float:
    """1.0 when the answer is the complex result, each part finite and equal to it.

    >>> entry = {"metadata": {"result": (48, -3.5)}}
    >>> [complex_arithmetic(a, entry) for a in ("48.0 - 3.5i", "(48 - 3.50i)", "nan", "48 - 3.4i", "inf")]
    [1.0, 1.0, 0.0, 0.0, 0.0]
    """
    value = _complex(answer)
    if value is None:
        return 0.0
    gold = [Decimal(str(float(part))) for part in entry["metadata"]["result"]]
    return 1.0 if all(abs(given - part) <= _TOLERANCE for given, part in zip(value, gold, strict=True)) else 0.0


def number_sorting(answer: str, entry: dict[str, Any]) -> float:
    """1.0 when the answer lists the gold's numbers exactly, in its order; NaN, infinities and
    near values are wrong.

    >>> entry = {"answer": "['-2.8', '0.9', '17.0']"}
    >>> [number_sorting(a, entry) for a in ("[-2.8, 0.9, 17]", "['-2.8', '0.9', '17.0']", "[-2.8, 0.9, 18]",
    ...  "[NaN, NaN, NaN]", "[-2.8, 17, 0.9]")]
    [1.0, 1.0, 0.0, 0.0, 0.0]
    """
    gold, given = _numbers(entry["answer"]), _numbers(answer)
    return 1.0 if gold is not None and given == gold else 0.0


def game_of_life_halting(answer: str, entry: dict[str, Any]) -> float:
    """1.0 when the answer is `True` or `False` (any case) and is the gold."""
    word = answer.strip().casefold()
    return 1.0 if word in ("true", "false") and word == str(entry["answer"]).strip().casefold() else 0.0


def coin_flip(answer: str, entry: dict[str, Any]) -> float:
    """1.0 when the answer (a decimal or a fraction) equals the exact probability to 4 significant figures.

    >>> entry = {"answer": "0.0625", "metadata": {"rational": {"numerator": 1, "denominator": 16}}}
    >>> [coin_flip(a, entry) for a in ("0.0625", "1/16", "6.25e-2", "0", "0.06", "0.0626", "nan", "1e999/1")]
    [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """
    match = _FRACTION.fullmatch(answer.strip().replace(",", "").lower())
    if match is None or int(match.group(2) or 1) == 0:
        return 0.0
    value = Fraction(match.group(1)) / int(match.group(2) or 1)
    rational = entry["metadata"].get("rational")
    exact = Fraction(rational["numerator"], rational["denominator"]) if rational else Fraction(entry["answer"])
    return 1.0 if abs(value - exact) <= abs(exact) * Fraction(1, 10**4) else 0.0


VERIFIERS: dict[str, Callable[[str, dict[str, Any]], float]] = {
    "countdown": countdown,
    "puzzle24": puzzle24,
    "complex_arithmetic": complex_arithmetic,
    "number_sorting": number_sorting,
    "game_of_life_halting": game_of_life_halting,
    "coin_flip": coin_flip,
}


def verify(dataset: str, answer: str, entry: dict[str, Any]) -> float:
    """grpokit's verdict (1.0 or 0.0) for a dataset in `VERIFIERS`; 0.0 for an empty or overlong answer."""
    if not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
        return 0.0
    return VERIFIERS[dataset](answer, entry)


def _complex(answer: str) -> tuple[Decimal, Decimal] | None:
    """(real, imaginary) of `a + bi`, `bi` or `a`, or None; every value is finite."""
    text = answer.replace(" ", "").lower()
    while len(text) > 1 and text[0] == "(" and text[-1] == ")":
        text = text[1:-1]
    match = _COMPLEX.fullmatch(text)
    if match is None:
        return None
    if match.group("real") is not None:
        return Decimal(match.group("real")), Decimal(0)
    real, imag = (match.group("a"), match.group("b")) if match.group("b") is not None else ("0", match.group("imag"))
    return Decimal(real), Decimal(imag + "1" if imag in ("", "+", "-") else imag)


def _numbers(text: str) -> list[Decimal] | None:
    """The list of finite numbers `text` holds as JSON (numbers or numeric strings), else None."""

    def refuse(constant: str) -> None:
        raise ValueError(constant)  # NaN, Infinity: not numbers

    try:
        parsed = json.loads(text.replace("'", '"'), parse_constant=refuse)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, list):
        return None
    values = []
    for item in parsed:
        if isinstance(item, bool) or not isinstance(item, int | float | str):
            return None
        if isinstance(item, str) and not _REAL.fullmatch(item.strip()):
            return None
        if isinstance(item, float) and not math.isfinite(item):
            return None
        values.append(Decimal(str(item).strip()))
    return values
