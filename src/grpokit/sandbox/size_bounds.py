"""Upper bounds on what a math expression costs to compute, read from its text without evaluating it.

The screens run this before math-verify or sympy see an answer, so a bomb (`2^{999!}`, `(9^{99})!`,
`\\binom{10^{99}}{10^{98}}`, `3**(999*999*999)`, `(x+y+z+w)^{100}`) is refused at once
instead of costing a verifier's whole timeout. The bound is deliberately loose in one direction: it
may refuse an answer that would have been cheap, never pass one whose value is huge. To keep that
promise whatever the real parser makes of the text, the reader here takes the largest reading:

- a run of digits broken only by spaces, commas, dots, thin spaces or `{,}` is one number, all its
  digits together (`1{,}000{,}000` and `1, 000` are a million);
- the size of a value is the log10 of its height (the larger of |numerator| and denominator), so
  `0.001` counts like 1000; a symbol counts like 10; sums and products add heights;
- a power, factorial, Gamma, binomial or `\\exp` is bounded from its operands' bounds; an expanded
  symbolic power is bounded by its count of terms (`(a + b)^n` has n + 1); a power whose exponent
  holds a symbol or an irrational (`e^{x^2}`, `2^{\\pi}`) is never computed exactly, so only its base
  is bounded.

>>> size_refusal("2^{2023} + \\\\frac{1}{2}") is None, size_refusal("2^{999!}")
(True, 'a power too large to compute')
>>> size_refusal("3**(999*999*999)"), size_refusal("\\\\Gamma(10^{99})")
('a power too large to compute', 'a factorial or Gamma of a large number')
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_LOG10 = 10_000  # no value past 10^10000 (an integer of 10,000 digits computes in microseconds)
MAX_FACTORIAL = 1000  # n!, Gamma(n): n at most this
MAX_BINOMIAL = 10_000  # binom(n, k): n and k at most this
MAX_TERMS = 64  # an expanded symbolic power: at most this many terms
MAX_DEPTH = 100  # groups nested deeper than this are refused, not read

_GLUE = r"(?:\s|,|\.|~|'|\\[,;:! ]|\{,\}|\{\})"
_TOKEN = re.compile(
    rf"(?P<number>\d(?:{_GLUE}*\d)*(?:[eE][+-]?\d+)?)"
    r"|(?P<command>\\[A-Za-z]+)"
    r"|(?P<escaped>\\.)"
    r"|(?P<name>[A-Za-z]+)"
    r"|(?P<power>\*\*|\^)"
    r"|(?P<char>\S)",
    re.DOTALL,
)
_OPEN, _CLOSE = "([{", ")]}"
_PRODUCT = {"*", "/", "\\cdot", "\\times", "\\div", "\\ast"}
_SUM = {"+", "-", "\\pm", "\\mp", "&", "\\\\", "−", "±"}
_FRACTIONS = {"\\frac", "\\dfrac", "\\tfrac", "\\cfrac"}
_BINOMIALS = {"\\binom", "\\dbinom", "\\tbinom"}
_SKIPPED = {"\\left", "\\right", "\\big", "\\Big", "\\bigg", "\\Bigg", "\\displaystyle", "\\limits"}


class TooLarge(Exception):
    """The text names a value or expansion past the bounds; the message says which kind."""


@dataclass(frozen=True)
class Size:
    """Upper bounds for one subexpression: log10 of its height, and log10 of its count of terms
    once expanded (0 for one term; numbers alone are never expanded)."""

    log10: float
    terms: float = 0.0
    symbolic: bool = False


_ONE = Size(0.0)
_SYMBOL = Size(1.0, 0.0, True)


def size_refusal(text: str) -> str | None:
    """Why `text` may name a value too costly to compute, or None when every value in it is bounded."""
    try:
        _Reader(text).read_all()
    except TooLarge as err:
        return str(err)
    except RecursionError:
        return "nested too deep"
    return None


def _number(token: str) -> Size:
    digits, _, exponent = re.sub(r"[^\deE+-]", "", token).lower().partition("e")
    digits = digits.lstrip("0") or "0"
    size = math.log10(int(digits[:30])) + max(0, len(digits) - 30) if digits != "0" else 0.0
    return Size(size + (int(exponent.lstrip("+-") or 0) if exponent else 0))


def _power_of_ten(log10: float) -> float:
    return math.inf if log10 > 300 else 10.0**log10


def _check(size: Size) -> Size:
    if size.log10 > MAX_LOG10:
        raise TooLarge("a power too large to compute")
    if size.terms > math.log10(MAX_TERMS):
        raise TooLarge("a symbolic power with too many terms to expand")
    return size


def _add(a: Size, b: Size) -> Size:
    terms = math.log10(10**a.terms + 10**b.terms) if a.symbolic or b.symbolic else 0.0
    return _check(Size(max(a.log10, b.log10) + math.log10(2), terms, a.symbolic or b.symbolic))


def _multiply(a: Size, b: Size) -> Size:
    return _check(Size(a.log10 + b.log10, a.terms + b.terms, a.symbolic or b.symbolic))


def _power(base: Size, exponent: Size) -> Size:
    if exponent.symbolic:  # `e^{x^8}`, `2^{\\pi}`: kept symbolic (or floated), never computed exactly
        return Size(max(base.log10, 1.0), base.terms, True)
    times = _power_of_ten(exponent.log10)  # |exponent| is at most its height
    log10 = times * base.log10 if base.log10 > 0 else 0.0
    terms = 0.0
    if base.symbolic and base.terms > 0:  # (t_1 + ... + t_k)^n expands to C(n + k - 1, k - 1) terms
        k = 10**base.terms
        n = min(times, 1e12)
        terms = (math.lgamma(n + k) - math.lgamma(n + 1) - math.lgamma(k)) / math.log(10)
    return _check(Size(log10, terms, base.symbolic or exponent.symbolic))


def _factorial(n: Size) -> Size:
    bound = _power_of_ten(n.log10)
    if bound > MAX_FACTORIAL:
        raise TooLarge("a factorial or Gamma of a large number")
    return _check(Size(bound * math.log10(max(bound, 2)), 0.0, n.symbolic))


def _binomial(n: Size, k: Size) -> Size:
    if max(_power_of_ten(n.log10), _power_of_ten(k.log10)) > MAX_BINOMIAL:
        raise TooLarge("a binomial coefficient of large numbers")
    return _check(Size(_power_of_ten(n.log10) * math.log10(2), 0.0, n.symbolic or k.symbolic))


class _Reader:
    """A lenient precedence reader over LaTeX and plain (Python, sympy) math that returns sizes.

    It never fails on odd text: an unknown token is a symbol, an unmatched bracket closes or opens a
    group, a separator (`,`, `=`, relations, `;`) takes the larger side. Where two readings are
    possible (`10^{6}!`), it bounds both.
    """

    def __init__(self, text: str) -> None:
        tokens = [(m.lastgroup or "char", m.group()) for m in _TOKEN.finditer(text)]
        self.tokens = [t for t in tokens if t[1] not in _SKIPPED]
        self.i = 0
        self.stops: list[str | None] = []  # what closes each open group: a bracket (None), `|`, `\\end`
        self.factorials = 0  # how many `!` ended the last operand read

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def at_close(self) -> bool:
        token = self.peek()
        return token in (*_CLOSE, "\\}") or (bool(self.stops) and token is not None and token == self.stops[-1])

    def read_all(self) -> Size:
        size = _ONE
        while self.i < len(self.tokens):
            size = _max(size, self.read_list())
            if self.i < len(self.tokens):
                self.i += 1  # an unmatched closer: read on
        return size

    def read_list(self) -> Size:
        """Items separated by anything that is not an operator: the largest of them."""
        size = _ONE
        while self.i < len(self.tokens) and not self.at_close():
            start = self.i
            size = _max(size, self.read_sum())
            if self.i == start:
                self.i += 1  # a separator (`,`, `=`, `<`, `;`, ...)
        return size

    def read_sum(self) -> Size:
        size = self.read_product()
        while self.peek() in _SUM:
            self.i += 1
            size = _add(size, self.read_product())
        return size

    def read_product(self) -> Size:
        size = None
        while self.i < len(self.tokens) and not self.at_close():
            token = self.peek()
            if token in _PRODUCT or token == "\\choose":
                self.i += 1
                right = self.read_unary()
                size = _binomial(size or _ONE, right) if token == "\\choose" else _multiply(size or _ONE, right)
            elif self.starts_operand():
                factor = self.read_unary()  # juxtaposition multiplies
                size = factor if size is None else _multiply(size, factor)
            else:
                break
        return size or _ONE

    def starts_operand(self) -> bool:
        kind, token = self.tokens[self.i]
        return kind in ("number", "command", "name") or token in (*_OPEN, "\\{", "|")

    def read_unary(self) -> Size:
        while self.peek() in ("-", "+", "−", "\\pm", "\\mp"):
            self.i += 1
        base = self.read_postfix(self.read_atom())
        if self.peek() not in ("^", "**"):
            return base
        self.i += 1
        exponent = self.read_unary()
        size = _power(base, exponent)
        for _ in range(self.factorials):  # `10^{6}!`: the factorial may be the power's, not the exponent's
            size = _factorial(size)
        return size

    def read_postfix(self, size: Size) -> Size:
        self.factorials = 0
        while self.peek() in ("!", "'", "\\%", "%", "_", "\\prime"):
            token = self.tokens[self.i][1]
            self.i += 1
            if token == "!":
                size = _factorial(size)
                self.factorials += 1
            elif token == "_":
                self.read_atom()  # a subscript is a label (or a log's base): bounded, not a factor
        return size

    def read_atom(self) -> Size:
        if self.i >= len(self.tokens) or self.at_close():
            return _ONE
        kind, token = self.tokens[self.i]
        self.i += 1
        if kind == "number":
            return _check(_number(token))
        if token in (*_OPEN, "\\{"):
            return self.read_group(None)
        if token == "|":
            return self.read_group("|")
        if token == "\\begin":
            self.read_atom()  # the environment's name
            size = self.read_group("\\end")
            self.read_atom()
            return size
        if token in _FRACTIONS:
            return _multiply(self.read_atom(), self.read_atom())
        if token in _BINOMIALS:
            return _binomial(self.read_atom(), self.read_atom())
        if token == "\\sqrt":
            index = _ONE
            if self.peek() == "[":
                self.i += 1
                index = self.read_group(None)
            root = _multiply(self.read_atom(), index)
            return Size(root.log10, root.terms, True)  # irrational: it stays a term of its own
        name = token.lstrip("\\")
        if name in ("Gamma", "gamma", "factorial", "exp") and self.starts_argument():
            argument = self.read_product()  # with or without parentheses: the widest argument
            return _power(_SYMBOL, argument) if name == "exp" else _factorial(argument)
        if name in ("binom", "binomial") and self.peek() == "(":
            arguments = self.read_atom()  # binomial(n, k): the larger of the two bounds both
            return _binomial(arguments, arguments)
        return _SYMBOL

    def starts_argument(self) -> bool:
        return self.i < len(self.tokens) and not self.at_close() and self.starts_operand()

    def read_group(self, stop: str | None) -> Size:
        if len(self.stops) >= MAX_DEPTH:
            raise TooLarge("nested too deep")
        self.stops.append(stop)
        size = self.read_list()
        self.stops.pop()
        if self.i < len(self.tokens):
            self.i += 1  # the closer
        return size


def _max(a: Size, b: Size) -> Size:
    return Size(max(a.log10, b.log10), max(a.terms, b.terms), a.symbolic or b.symbolic)
