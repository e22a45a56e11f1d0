"""Screens for each verifier's input language, and the verifiers that run in the sandbox worker.

A screen is cheap and runs twice: in the trainer before a request is sent, and in the worker before
the verifier is called, so model text reaches sympy's `parse_expr` (Python `eval`) or a
reasoning-gym `eval` only after passing the screen written for that verifier's language:

- `math_refusal`: LaTeX or plain math for math-verify. No quotes, dunders, attribute access or
  Python keywords; a name may be called only if it is a math function. Constructs that hedge or cost
  (relations, `\\pm`, `\\approx`, "or", chained or huge powers) pass only when the gold uses them too.
- `sympy_refusal`: sympy expressions (reasoning-gym's polynomial and integration scorers):
  digits, operators, one-letter symbols and a list of math functions, nothing else.
- `literal_refusal`: Python literals (reasoning-gym scorers that `eval` a list): the answer must be a
  literal, or not parse as Python at all (then `eval` raises before running anything).

Call the verifiers through `grpokit.sandbox`, never directly on model output in the training process.

>>> math_refusal("43 \\\\approx 42", "42"), math_refusal("\\\\frac{1}{2}", "0.5")
('a hedge or relation the gold does not use: \\\\approx', None)
>>> sympy_refusal("(3 + 5) * 3"), literal_refusal("[1, 2]"), literal_refusal("__import__('os')") is None
(None, None, False)
"""

from __future__ import annotations

import ast
import keyword
import re
from functools import lru_cache
from typing import Any

MAX_ANSWER_CHARS = 1000  # a final answer longer than this is not an answer
MATH_TIMEOUT_S = 3  # math-verify's own budget per parse/verify, inside the worker
MAX_LITERAL_NODES = 5000

_MATH_FUNCTIONS = frozenset(
    ("sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "asin", "acos", "atan", "sinh", "cosh",
     "tanh", "log", "ln", "lg", "exp", "sqrt", "abs", "gcd", "lcm", "min", "max", "floor", "ceil", "det", "binom")
)  # fmt: skip
_MATH_UNICODE = set("π√∞°×÷·−")
_NAME = re.compile(r"(?<![\\A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*")
# Gold-aware: present in an answer, these pass only when the gold has them too.
_GUARDED = (
    re.compile(r"\\(?:leq?|geq?|leqslant|geqslant|lt|gt|neq?|approx|sim|simeq|pm|mp)(?![A-Za-z])"),
    re.compile(r"[<>±≈≤≥≠]"),
    re.compile(r"(\*\*|\^)[\s({]*[\w.]+[\s)}]*(\*\*|\^)"),  # a power tower
    re.compile(r"(\*\*|\^)[\s({]*\d{4,}"),  # a power with a 4-digit exponent
    re.compile(r"\d{4,}\s*!"),  # a huge factorial
)


def unsafe(answer: str) -> bool:
    """True for text no verifier should see: too long, dunder names, quotes.

    >>> [unsafe(a) for a in ("x^2 + y^2", "__import__('os')", "exec(bytes.fromhex('6f73'))", "2**10")]
    [False, True, True, False]
    """
    return len(answer) > MAX_ANSWER_CHARS or "__" in answer or any(q in answer for q in "'\"`")


def math_refusal(answer: str, gold: str) -> str | None:
    """Why math-verify must not see `answer` for this gold, or None when it may."""
    if not answer.strip():
        return "empty"
    if unsafe(answer):
        return "too long, a dunder name or a quote"
    odd = {c for c in answer if not (" " <= c <= "~" or c in "\t\n") and c not in _MATH_UNICODE}
    if odd:
        return f"characters outside ASCII math: {''.join(sorted(odd))[:10]!r}"
    if re.search(r"[;#@]|:=|\.\s*[A-Za-z_]", answer):
        return "a statement, comment or attribute"
    for match in _NAME.finditer(answer):
        name = match.group()
        if keyword.iskeyword(name) and not re.search(rf"(?<![A-Za-z]){name}(?![A-Za-z])", gold):
            return f"the word {name!r}"
        followed_by_call = answer[match.end() :].lstrip().startswith("(")
        if followed_by_call and len(name) > 1 and name.lower() not in _MATH_FUNCTIONS:
            return f"a call to {name!r}"
    for pattern in _GUARDED:
        found = pattern.search(answer)
        if found and not pattern.search(gold):
            return f"a hedge or relation the gold does not use: {found.group().strip()}"
    return None


def sympy_refusal(answer: str) -> str | None:
    """Why sympy's `parse_expr` must not see `answer`, or None when it may."""
    if not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
        return "empty or too long"
    if not re.fullmatch(r"[0-9A-Za-z+\-*/^().,\s]*", answer) or re.search(r"\.\s*[A-Za-z_]", answer):
        return "characters outside plain arithmetic"
    for name in _NAME.findall(answer):
        if len(name) > 1 and name not in _MATH_FUNCTIONS | {"pi", "oo", "Abs"}:
            return f"the name {name!r}"
    if _GUARDED[2].search(answer) or _GUARDED[3].search(answer):
        return "a power tower or a huge exponent"
    return None


def literal_refusal(answer: str) -> str | None:
    """Why Python `eval` must not see `answer`, or None when eval would only read a literal or fail."""
    if len(answer) > MAX_ANSWER_CHARS:
        return "too long"
    try:
        tree = ast.parse(answer.lstrip(" \t"), mode="eval")  # eval strips the same leading blanks
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # eval raises the same error before running anything
    literal = (ast.Expression, ast.Constant, ast.List, ast.Tuple, ast.Load, ast.UnaryOp, ast.USub, ast.UAdd)
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_LITERAL_NODES or not all(isinstance(n, literal) for n in nodes):
        return "not a Python literal"
    return None


# ---------------------------------------------------------------- math-verify


def _latex(text: str) -> str:
    """Math-verify reads LaTeX between delimiters: bare answers and golds get `$...$`."""
    return text if re.search(r"\$|\\\(|\\\[|\\boxed", text) else f"${text}$"


def _parse(text: str) -> list:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    # One call, LaTeX first then plain expressions: a bare number is never read out of LaTeX.
    config = [LatexExtractionConfig(), ExprExtractionConfig()]
    return parse(_latex(text), extraction_config=config, parsing_timeout=MATH_TIMEOUT_S)


@lru_cache(maxsize=65536)
def _parse_gold(gold: str) -> tuple:
    return tuple(_parse(gold))


def math_gold_parses(gold: str) -> bool:
    """True when math-verify reads something from the gold answer."""
    return bool(_parse_gold(gold))


def math_equal(answer: str, gold: str) -> bool:
    """math-verify's `verify(parse(gold), parse(answer))`, for answers that pass `math_refusal`."""
    from math_verify import verify

    if math_refusal(answer, gold) is not None:
        return False
    gold_parsed, predicted = list(_parse_gold(gold)), _parse(answer)
    if not gold_parsed or not predicted:
        return False
    return bool(verify(gold_parsed, predicted, timeout_seconds=MATH_TIMEOUT_S))


# ---------------------------------------------------------------- reasoning-gym

AUDITED_GYM_VERSION = "0.1.25"
# How each reasoning-gym scorer that evaluates the answer, or pays universal answers, is made safe. Read
# from reasoning-gym 0.1.25's score_answer methods and probed (grpokit.gym_audit): "ast" and "strict" are
# decided in the trainer by grpokit's own verifier (grpokit.gym_verifiers: its AST evaluator, or a strict
# parser of the answer as data); "sympy" and "literal" name the screen run before the scorer. Every other
# dataset's scorer reads the answer as data in 0.1.25 ("confined"); all of them run only in the confined worker.
GYM_PATHS = {
    "countdown": "ast",
    "puzzle24": "ast",
    "complex_arithmetic": "strict",
    "number_sorting": "strict",
    "game_of_life_halting": "strict",
    "coin_flip": "strict",
    "polynomial_multiplication": "sympy",
    "simple_integration": "sympy",
    "intermediate_integration": "sympy",
    "binary_matrix": "literal",
    "spiral_matrix": "literal",
    "string_insertion": "literal",
    "n_queens": "literal",
}


def _arithmetic_refusal(answer: str) -> str | None:
    from grpokit.expressions import evaluate_expression

    return None if evaluate_expression(answer, allow_unary_minus=True) else "not plain arithmetic"


_SCREENS = {"sympy": sympy_refusal, "literal": literal_refusal, "ast": _arithmetic_refusal}
IN_TRAINER = ("ast", "strict")  # paths whose verdict is grpokit's, never reasoning-gym's scorer


def gym_path(dataset: str) -> str:
    """'ast', 'strict', 'sympy', 'literal' or 'confined': how grpokit scores answers for this dataset."""
    return GYM_PATHS.get(dataset, "confined")


def gym_refusal(dataset: str, answer: str) -> str | None:
    """Why this dataset's scorer must not see `answer`, or None when it may."""
    if not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
        return "empty or too long"
    screen = _SCREENS.get(gym_path(dataset))
    return screen(answer) if screen else None


@lru_cache(maxsize=64)
def _gym_dataset(name: str, params: tuple) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(name, **dict(params))


def gym_score(name: str, params: dict, index: int, entry: dict | None, answer: str) -> float:
    """reasoning-gym's own `score_answer`, for answers that pass `gym_refusal`. `entry` may be None:
    it is then generated again from `index` (slower). A dataset grpokit verifies itself scores 0 here."""
    if gym_path(name) in IN_TRAINER or gym_refusal(name, answer) is not None:
        return 0.0
    dataset = _gym_dataset(name, tuple(sorted(params.items())))
    return float(dataset.score_answer(answer, entry if entry is not None else dataset[index]))


def warm_up(modules: list[str]) -> None:
    """Exercise each preloaded verifier once (lazy imports and native libraries load here)."""
    if "math_verify" in modules:
        for answer, gold in (("0.5", "\\frac{1}{2}"), ("x = 2", "2"), ("(1, 2]", "(1, 2]"), ("1, 2", "\\{1, 2\\}")):
            math_equal(answer, gold)
        _parse_gold.cache_clear()
    if "reasoning_gym" in modules:
        for name, answer in (("polynomial_multiplication", "2*x"), ("n_queens", "[[1]]"), ("basic_arithmetic", "2")):
            dataset = _gym_dataset(name, (("seed", 0), ("size", 1)))
            dataset.score_answer(answer, dataset[0])
        _gym_dataset.cache_clear()
