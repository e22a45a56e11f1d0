"""Screens for each verifier's input language, and the verifiers that run in the sandbox worker.

A screen is cheap and runs twice: in the trainer before a request is sent, and in the worker before
the verifier is called, so model text reaches sympy's `parse_expr` (Python `eval`) or a
reasoning-gym `eval` only after passing the screen written for that verifier's language:

- `math_refusal`: LaTeX or plain math for math-verify, as `grpokit.sandbox.math_notation` reads it. No
  quotes (primes are not quotes), dunders, attribute access or Python keywords outside `\\text{}`; a
  name may be called only if it is a math function; no value too costly to compute
  (`grpokit.sandbox.size_bounds`). Constructs that hedge or cost (relations, `\\pm`, `\\approx`, "or", sums,
  integrals) pass only when the gold uses them too; text equal to the gold always passes.
- `sympy_refusal`: sympy expressions (reasoning-gym's polynomial and integration scorers):
  digits, operators, one-letter symbols and a list of math functions, nothing else, and no value too
  costly to compute.
- `literal_refusal`: Python literals (reasoning-gym scorers that `eval` a list): the answer must be a
  literal, or not parse as Python at all (then `eval` raises before running anything).

Call the verifiers through `grpokit.sandbox.client`, never directly on model output in the training process.

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

from grpokit.sandbox.expressions import evaluate_expression
from grpokit.sandbox.math_notation import MATH_UNICODE, read_math
from grpokit.sandbox.size_bounds import size_refusal

MAX_ANSWER_CHARS = 1000  # a final answer longer than this is not an answer
MATH_TIMEOUT_S = 3  # math-verify's own budget per parse/verify, inside the worker
MAX_LITERAL_NODES = 5000

_MATH_FUNCTIONS = frozenset(
    ("sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "arccot", "arcsec", "arccsc", "asin",
     "acos", "atan", "acot", "asec", "acsc", "sinh", "cosh", "tanh", "coth", "sech", "csch", "arsinh", "arcosh",
     "artanh", "arcsinh", "arccosh", "arctanh", "asinh", "acosh", "atanh", "log", "ln", "lg", "exp", "sqrt", "abs",
     "sgn", "sign", "gcd", "lcm", "min", "max", "floor", "ceil", "det", "binom", "mod", "arg", "re", "im")
)  # fmt: skip
_NAME = re.compile(r"(?<![\\A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*")
_TEXT = re.compile(r"\\(?:text|textrm|textbf|textit|mathrm|mbox)\s*\{[^{}]*\}")
_HEDGE_WORDS = ("or", "and", "not", "if", "else")
# Gold-aware: present in an answer, each family passes only when the gold has one of its members too.
_GUARDED = {
    "an inequality": re.compile(r"\\(?:leq?|geq?|leqslant|geqslant|lt|gt|nleq|ngeq)(?![A-Za-z])|[<>≤≥]"),
    "a hedge or relation the gold does not use": re.compile(
        r"\\(?:neq?|approx|sim|simeq|cong|equiv|pm|mp)(?![A-Za-z])|!=|[±∓≈≠]"
    ),
    "a sum, product, integral, limit, derivative or determinant the gold does not use": re.compile(
        r"\\(?:sum|prod|int|iint|iiint|oint|lim|det|partial)(?![A-Za-z])|\\d?frac\s*\{\s*d"
    ),
}


def unsafe(answer: str) -> bool:
    """True for text no verifier should see: too long, dunder names, quotes.

    >>> [unsafe(a) for a in ("x^2 + y^2", "__import__('os')", "exec(bytes.fromhex('6f73'))", "2**10")]
    [False, True, True, False]
    """
    return len(answer) > MAX_ANSWER_CHARS or "__" in answer or any(q in answer for q in "'\"`")


def _squeezed(text: str) -> str:
    return " ".join(text.split())


def math_refusal(answer: str, gold: str) -> str | None:
    """Why math-verify must not see `answer` for this gold, or None when it may.

    The answer is screened as `read_math` rewrites it (what math-verify is given). Text equal to the
    gold (blanks aside) always passes: math-verify has already read the gold itself. Otherwise: no
    quotes (a prime `f'` is not one), dunders, comments, attributes, statements or Python keywords
    (`\\text{...}` holds words), a call only to a math function, and no value too costly to compute
    (`grpokit.sandbox.size_bounds`); relations, hedges and sums or integrals pass only when the gold has them.
    """
    if not answer.strip():
        return "empty"
    if _squeezed(answer) == _squeezed(gold):
        return None
    if len(answer) > MAX_ANSWER_CHARS or "__" in answer or re.search(r"[\"`]|(?<![A-Za-z0-9)}\]'])'", answer):
        return "too long, a dunder name or a quote"
    odd = {c for c in answer if not (" " <= c <= "~" or c in "\t\n") and c not in MATH_UNICODE}
    if odd:
        return f"characters outside ASCII math: {''.join(sorted(odd))[:10]!r}"
    text, gold_text = read_math(answer), read_math(gold)
    code = _TEXT.sub(" ", text)  # what \\text{...} holds is words: only its hedge words are read
    if re.search(r"(?<!\\)[#@]|:=|\.\s*[A-Za-z_]", code) or _top_level_semicolon(code):
        return "a statement, comment or attribute"
    for word in re.findall(r"[A-Za-z]+", " ".join(_TEXT.findall(text))):
        if word.lower() in _HEDGE_WORDS and not re.search(rf"(?<![A-Za-z]){word}(?![A-Za-z])", gold_text):
            return f"the word {word!r}"
    for match in _NAME.finditer(code):
        name = match.group()
        if keyword.iskeyword(name) and not re.search(rf"(?<![A-Za-z]){name}(?![A-Za-z])", gold_text):
            return f"the word {name!r}"
        followed_by_call = code[match.end() :].lstrip().startswith("(")
        function = name.split("_")[0].lower()
        if followed_by_call and len(name) > 1 and function not in _MATH_FUNCTIONS:
            return f"a call to {name!r}"
    for operator in re.findall(r"\\operatorname\*?\s*\{\s*([^{}]*?)\s*\}", text):
        if operator.lower() not in _MATH_FUNCTIONS:
            return f"the operator {operator!r} (matrix constructors and unknown operators are refused)"
    for reason, pattern in _GUARDED.items():
        found = pattern.search(text)
        if found and not pattern.search(gold_text):
            return f"{reason}: {found.group().strip()}"
    return size_refusal(text)


def _top_level_semicolon(text: str) -> bool:
    """A `;` outside brackets separates statements or alternatives; inside, `(1;2)`, it is a pair."""
    depth = 0
    for char in text:
        depth += (char in "([{") - (char in ")]}")
        if char == ";" and depth <= 0:
            return True
    return False


_TOWER = re.compile(r"(\*\*|\^)[\s({]*[\w.]+[\s)}]*(\*\*|\^)")  # a power tower
_BIG_EXPONENT = re.compile(r"(\*\*|\^)[\s({]*\d{4,}")  # a power with a 4-digit exponent


def sympy_refusal(answer: str) -> str | None:
    """Why sympy's `parse_expr` must not see `answer`, or None when it may."""
    if not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
        return "empty or too long"
    if not re.fullmatch(r"[0-9A-Za-z+\-*/^().,\s]*", answer) or re.search(r"\.\s*[A-Za-z_]", answer):
        return "characters outside plain arithmetic"
    for name in _NAME.findall(answer):
        if len(name) > 1 and name not in _MATH_FUNCTIONS | {"pi", "oo", "Abs"}:
            return f"the name {name!r}"
    if _TOWER.search(answer) or _BIG_EXPONENT.search(answer):
        return "a power tower or a huge exponent"
    return size_refusal(answer)


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
    """Math-verify reads LaTeX between delimiters: bare answers and golds get `$...$` (an escaped
    dollar, `\\$18`, is an amount, not a delimiter)."""
    return text if re.search(r"(?<!\\)\$|\\\(|\\\[|\\boxed", text) else f"${text}$"


def _parse(text: str) -> list:
    # slow import: math-verify loads sympy; the worker preloads it (`warm_up`) before it confines itself
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    # One call, LaTeX first then plain expressions: a bare number is never read out of LaTeX.
    config = [LatexExtractionConfig(), ExprExtractionConfig()]
    return parse(_latex(read_math(text)), extraction_config=config, parsing_timeout=MATH_TIMEOUT_S)


@lru_cache(maxsize=65536)
def _parse_gold(gold: str) -> tuple:
    return tuple(_parse(gold))


def math_gold_parses(gold: str) -> bool:
    """True when math-verify reads something from the gold answer."""
    return bool(_parse_gold(gold))


def math_equal(answer: str, gold: str) -> bool:
    """math-verify's `verify(parse(gold), parse(answer))`, for answers that pass `math_refusal`."""
    # slow import: math-verify loads sympy; the worker preloads it (`warm_up`) before it confines itself
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
# from reasoning-gym 0.1.25's score_answer methods and probed (grpokit.tasks.gym_audit): "ast" and "strict" are
# decided in the trainer by grpokit's own verifier (grpokit.tasks.gym_verifiers: its AST evaluator, or a strict
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
    # optional dependency: reasoning-gym
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
