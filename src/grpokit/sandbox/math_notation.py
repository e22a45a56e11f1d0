"""How grpokit reads math answers before math-verify: notations it misreads, rewritten as LaTeX it reads.

Both the gold and the answer go through `read_math`, so an answer that equals the gold still equals
it. The rewrites, each one documented reading:

- unicode math becomes its LaTeX command: `√2` is `\\sqrt{2}`, `∞` is `\\infty`, `½` is `\\frac{1}{2}`,
  `x²` is `x^{2}`, `−` is `-`, `≥` is `\\geq`, `∠A` is `\\angle A`, `π` is `\\pi` (other unicode stays,
  and the math screen refuses it);
- thousands written with thin spaces are one number: `1\\,024` and `1~024` are 1024 (math-verify reads
  25);
- a repeating decimal is its fraction: `0.\\overline{3}` is `\\frac{1}{3}`;
- a percent sign after a number is a label, not a division: `3\\%` is 3, so it equals the gold 3 (how
  GSM8K writes the answer to "what percent") and not 0.03.

Escaped dollars (`\\$18`) need no rewrite here: math-verify reads them inside the `$...$` grpokit adds.

>>> read_math("√2 + x² − ½"), read_math("1\\\\,024"), read_math("0.\\\\overline{3}"), read_math("3\\\\%")
('\\\\sqrt{2} + x^{2} - \\\\frac{1}{2}', '1024', '\\\\frac{1}{3}', '3')
"""

from __future__ import annotations

import re

_SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-", strict=True))
_FRACTIONS = {"½": (1, 2), "⅓": (1, 3), "⅔": (2, 3), "¼": (1, 4), "¾": (3, 4), "⅕": (1, 5), "⅖": (2, 5),
              "⅗": (3, 5), "⅘": (4, 5), "⅙": (1, 6), "⅚": (5, 6), "⅛": (1, 8), "⅜": (3, 8), "⅝": (5, 8),
              "⅞": (7, 8)}  # fmt: skip
_SYMBOLS = {
    "−": "-", "–": "-", "×": "\\times ", "÷": "\\div ", "·": "\\cdot ", "⋅": "\\cdot ", "∞": "\\infty ",
    "π": "\\pi ", "≤": "\\leq ", "≥": "\\geq ", "≠": "\\neq ", "±": "\\pm ", "∓": "\\mp ", "≈": "\\approx ",
    "∠": "\\angle ", "∈": "\\in ", "∉": "\\notin ", "∪": "\\cup ", "∩": "\\cap ", "⊂": "\\subset ",
    "⊆": "\\subseteq ", "∅": "\\emptyset ", "°": "^{\\circ}", "′": "'", "″": "''", "→": "\\to ",
    "ℝ": "\\mathbb{R}", "ℤ": "\\mathbb{Z}", "ℕ": "\\mathbb{N}", "ℚ": "\\mathbb{Q}", "ℂ": "\\mathbb{C}",
    "α": "\\alpha ", "β": "\\beta ", "γ": "\\gamma ", "δ": "\\delta ", "θ": "\\theta ", "λ": "\\lambda ",
    "μ": "\\mu ", "σ": "\\sigma ", "φ": "\\phi ", "ω": "\\omega ", "Δ": "\\Delta ",
}  # fmt: skip
MATH_UNICODE = frozenset(_SYMBOLS) | frozenset(_FRACTIONS) | frozenset(_SUPERSCRIPTS) | {"√"}
_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:(?:\\,|\\ |~|\\thinspace ?)\d{3})+(?![\d])")
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\(?:overline|bar)\s*\{(\d{1,20})\}")
_PERCENT = re.compile(r"(\d)\s*\\?%")
_ROOT_OPERAND = re.compile(r"\s*(\d+(?:\.\d+)?|[A-Za-z]|\\[A-Za-z]+)")


def read_math(text: str) -> str:
    """`text` with the notations above rewritten; everything else unchanged."""
    text = _unicode(text)
    text = _THOUSANDS.sub(lambda m: re.sub(r"\D", "", m.group()), text)
    text = _REPEATING.sub(_repeating, text)
    return _PERCENT.sub(r"\1", text)


def _repeating(match: re.Match) -> str:
    whole, fixed, period = match.groups()
    numerator = int(whole + fixed + period) - int(whole + fixed or "0")
    denominator = 10 ** len(fixed) * (10 ** len(period) - 1)
    from fractions import Fraction  # a repeating decimal is rare: keep the import off the common path

    value = Fraction(numerator, denominator)
    return str(value.numerator) if value.denominator == 1 else f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _unicode(text: str) -> str:
    if text.isascii():
        return text
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char in _SUPERSCRIPTS:
            j = i
            while j < len(text) and text[j] in _SUPERSCRIPTS:
                j += 1
            out.append("^{" + "".join(_SUPERSCRIPTS[c] for c in text[i:j]) + "}")
            i = j
            continue
        if char == "√":
            operand, i = _root_operand(text, i + 1)
            out.append(f"\\sqrt{{{operand}}}")
            continue
        if char in _FRACTIONS:
            top, bottom = _FRACTIONS[char]
            out.append(f"\\frac{{{top}}}{{{bottom}}}")
        else:
            out.append(_SYMBOLS.get(char, char))
        i += 1
    return "".join(out)


def _root_operand(text: str, i: int) -> tuple[str, int]:
    """What `√` at text[i - 1] takes: a bracketed group, a number, a letter or a command."""
    rest = text[i:].lstrip()
    start = i + len(text[i:]) - len(rest)
    if rest[:1] in ("(", "{"):
        closer, depth = {"(": ")", "{": "}"}[rest[0]], 0
        for j, char in enumerate(rest):
            depth += (char == rest[0]) - (char == closer)
            if depth == 0:
                return _unicode(rest[1:j]), start + j + 1
    match = _ROOT_OPERAND.match(text, i)
    if match:
        return _unicode(match.group(1)), match.end()
    return "", i
