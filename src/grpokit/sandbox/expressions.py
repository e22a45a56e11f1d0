"""A safe evaluator for the arithmetic a model writes: an AST walk over a whitelist, never `eval`.

Allowed: integer literals, + - * /, parentheses, and (optionally) unary minus. Division is exact
(`fractions.Fraction`). Anything else — names, calls, attributes, `**`, floats, strings, unicode
digits — is rejected, and so is input past the length, node or magnitude limits. Every rejection
returns None in microseconds; nothing raises on model output.

>>> evaluate_expression("(75 - 25) / 5 * 2")
Evaluated(value=Fraction(20, 1), numbers=(75, 25, 5, 2))
>>> evaluate_expression("__import__('os').system('true')") is None
True
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from fractions import Fraction

MAX_CHARS = 200
MAX_NODES = 64
MAX_MAGNITUDE = 10**12
_ALLOWED_CHARS = re.compile(r"[0-9+\-*/() \t]*")


@dataclass(frozen=True)
class Evaluated:
    value: Fraction
    numbers: tuple[int, ...]  # the integer literals, in the order written


class _Rejected(Exception):
    pass


def evaluate_expression(text: str, allow_unary_minus: bool = False) -> Evaluated | None:
    """The exact value of `text` and the literals it uses, or None if it is not a plain arithmetic expression."""
    text = text.strip()
    if not text or len(text) > MAX_CHARS or not _ALLOWED_CHARS.fullmatch(text) or "**" in text:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        return None
    numbers: list[int] = []
    try:
        value = _walk(tree.body, numbers, allow_unary_minus)
    except (_Rejected, ZeroDivisionError, RecursionError, MemoryError, OverflowError):
        return None
    return Evaluated(value=value, numbers=tuple(numbers))


def _walk(node: ast.AST, numbers: list[int], allow_unary_minus: bool) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        numbers.append(node.value)
        return _bounded(Fraction(node.value))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
        left = _walk(node.left, numbers, allow_unary_minus)
        right = _walk(node.right, numbers, allow_unary_minus)
        if isinstance(node.op, ast.Add):
            return _bounded(left + right)
        if isinstance(node.op, ast.Sub):
            return _bounded(left - right)
        if isinstance(node.op, ast.Mult):
            return _bounded(left * right)
        return _bounded(left / right)
    if allow_unary_minus and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_walk(node.operand, numbers, allow_unary_minus)
    raise _Rejected(type(node).__name__)


def _bounded(value: Fraction) -> Fraction:
    if abs(value.numerator) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise _Rejected("magnitude")
    return value
