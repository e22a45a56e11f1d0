"""Verifiers that run inside the sandbox worker (`grpokit.sandbox`): math-verify and reasoning-gym.

Call them through `grpokit.sandbox.Sandbox.call("grpokit.scorers:NAME", ...)`, never directly on
model output in the training process: both libraries reach sympy, whose parser calls `eval`.
Inside the worker each call runs in the main thread, so math-verify's own `signal.alarm` timeouts
are active as well as the parent's hard timeout.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

MAX_ANSWER_CHARS = 1000  # a final answer longer than this is not an answer
MATH_TIMEOUT_S = 3  # math-verify's own budget per parse/verify, inside the worker


# Answers refused before math-verify sees them: hedges ("43 or 42": math-verify would read the last
# number and pay for it), chained powers (9**9**9 costs math-verify its whole timeout), dunder names.
_HEDGE = re.compile(r"\bor\b|;", re.IGNORECASE)
_CHAINED_POWER = re.compile(r"(\*\*|\^)[\s({]*[\w.]+[\s)}]*(\*\*|\^)")
_HUGE_POWER = re.compile(r"(\*\*|\^)[\s({]*\d{4,}")


def unsafe(answer: str) -> bool:
    """True for answers no verifier should evaluate: too long, dunder names, chained or huge powers.

    >>> [unsafe(a) for a in ("x^2 + y^2", "2^{3^{4}}", "9**99999", "__import__('os')", "2**10")]
    [False, True, True, True, False]
    """
    return (
        len(answer) > MAX_ANSWER_CHARS
        or "__" in answer
        or bool(_CHAINED_POWER.search(answer) or _HUGE_POWER.search(answer))
    )


def refused(answer: str) -> bool:
    """True for math answers that are not one plain final answer: unsafe ones, and hedges.

    >>> [refused(a) for a in ("43 or 42", "1/2", "x = 2")]
    [True, False, False]
    """
    return unsafe(answer) or bool(_HEDGE.search(answer))


@lru_cache(maxsize=65536)
def _parse_gold(gold: str) -> tuple:
    from math_verify import parse

    return tuple(parse("\\boxed{" + gold + "}", parsing_timeout=MATH_TIMEOUT_S))


def math_gold_parses(gold: str) -> bool:
    """True when math-verify reads something from the gold answer (the text inside \\boxed{})."""
    return bool(_parse_gold(gold))


def math_equal(answer: str, gold: str) -> bool:
    """math-verify's equivalence of the model's final answer and the gold answer."""
    from math_verify import parse, verify

    gold_parsed = list(_parse_gold(gold))
    if not gold_parsed or not answer.strip() or refused(answer):
        return False
    predicted = parse(answer, parsing_timeout=MATH_TIMEOUT_S) or parse(f"${answer}$", parsing_timeout=MATH_TIMEOUT_S)
    if not predicted:
        return False
    return bool(verify(gold_parsed, predicted, timeout_seconds=MATH_TIMEOUT_S))


@lru_cache(maxsize=64)
def _gym_dataset(name: str, params_key: tuple) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(name, **dict(params_key))


def gym_score(name: str, params_key: tuple, answer: str, entry: dict) -> float:
    """reasoning-gym's own `score_answer` for one entry, as the float it returns."""
    if len(answer) > MAX_ANSWER_CHARS:
        return 0.0
    return float(_gym_dataset(name, params_key).score_answer(answer, entry))


def warm_up(modules: list[str]) -> None:
    """Exercise each preloaded verifier once (lazy imports and native libraries load here)."""
    if "math_verify" in modules:
        math_equal("0.5", "\\frac{1}{2}")
        math_equal("x = 2", "2")
    if "reasoning_gym" in modules:
        dataset = _gym_dataset("countdown", (("seed", 0), ("size", 1)))
        dataset.score_answer("1 + 2", dataset[0])
        _gym_dataset.cache_clear()
