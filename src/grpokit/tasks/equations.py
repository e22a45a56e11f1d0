"""Reading worked steps out of text: `x op y = z` equations of whole numbers, longer lines that work an
expression down, and column sums; and what the `steps` reward pays a thought for a problem's steps.

The text is parsed by regular expressions and checked with integer arithmetic on its digits; it is never
evaluated. Tasks use it to tell whether a worked solution reads as steps (`worked`); the `steps` and
`steps_attempted` rewards (grpokit.rewards.steps) score completions with it.
"""

from __future__ import annotations

import re
from itertools import takewhile

from grpokit.tasks.arithmetic import solve

_DIGITS = "[0-9]{1,60}"  # wide enough for any value the arithmetic task's configs reach
_TERM = rf"\([-−]{_DIGITS}\)|{_DIGITS}"  # an operand: a whole number, a negative one in brackets
_FIRST = rf"[-−]?{_DIGITS}|{_TERM}"  # the first term of a side may carry a bare sign: `-10 - (-72)`
_OP = r"[-+*×x−]"
_DIVIDE = r"[/÷]"  # division: read in a single equation `x / y = z`, never inside a longer line
_MORE = rf"\s*{_OP}\s*(?:{_TERM})"  # one more operation of an expression
# A lookahead finds overlapping equations, so a chain `3 * 8 = 24 + 7 = 31` is read as both of its links;
# no digit may touch either end, so `34 * 8 = 272` is not also read as `4 * 8 = 272`.
_EQUATION = re.compile(rf"(?<![0-9)])(?=({_FIRST})\s*({_OP}|{_DIVIDE})\s*({_TERM})\s*=\s*([-−]?{_DIGITS})(?![0-9]))")
# A longer line that keeps the problem whole and works it down, `4 + 1 * 5 = 4 + 5`: an expression of 2 to
# 8 operations equated to another of up to 8.
_LINE = re.compile(rf"(?<![0-9)])(?=((?:{_FIRST})(?:{_MORE}){{2,8}})\s*=\s*((?:{_FIRST})(?:{_MORE}){{0,8}})(?![0-9]))")
# A longer expression holding a division, equated to something (`24 / 2 + 7 = 19`, `13 - 3 / 2 = 5`): not read
# as steps, scored as an equation not of whole numbers.
_DIVIDED_LINE = re.compile(rf"(?<![0-9)])(?:{_FIRST})(?:\s*(?:{_OP}|{_DIVIDE})\s*(?:{_TERM})){{2,8}}\s*=")
_HAS_DIVIDE = re.compile(_DIVIDE)
_PART = re.compile(rf"({_TERM})|({_OP})")
# An `x op y` right after `n op` is the tail of a longer expression (`1 * 5` in `4 + 1 * 5 = 4 + 5`), not
# the left side of an equation; a sign right after a number is a minus (`3 -5`).
_CONTINUES_LEFT = re.compile(rf"[0-9)]\s*{_OP}\s*$")
_TERM_END = re.compile(r"[0-9)]\s*$")
# What makes a written number other than the whole number read: a decimal or a fraction, power or percent
# around it (`0.5 * 8 = 40`, `= 40.5`, `= 40/3`, `= 40^2`, `= 40%`), or an operator after the result that
# does not start the next link of a chain (`= 36 - 1` or `= 40/3`, where `= 36 - 1 = 35` and `= 40 / 2 = 20`
# are chains).
_INEXACT_BEFORE = re.compile(r"(?:\.|[/^÷]\s*)$")
_INEXACT_AFTER = re.compile(rf"\.[0-9]|\s*(?:[\^%!²³¹⁰⁴-⁹]|\*\*|(?:[-+*×−/÷]|x(?![A-Za-z]))(?!\s*(?:{_TERM})\s*=))")
_OPERATOR = {"+": "+", "-": "-", "−": "-", "*": "*", "×": "*", "x": "*", "/": "/", "÷": "/"}
Step = tuple[int, str, int, int]
Sum = tuple[tuple[int, ...], int]  # `4 + 2 + 1 = 7`: three or more terms added, and the result
Expression = tuple[tuple[int, ...], tuple[str, ...]]  # its terms, and the operators between them


def equations(text: str) -> list[Step]:
    """Every `x op y = z` in `text` that is a whole equation of whole numbers, operators normalised to + - * /.

    >>> equations("First 3 × 8 = 24, then 7 + 24 = 31.")
    [(3, '*', 8, 24), (7, '+', 24, 31)]
    >>> equations("3 * 8 = 24 + 7 = 31")  # a chain: both links
    [(3, '*', 8, 24), (24, '+', 7, 31)]
    >>> equations("(-3) - 2 = -5; 34 * 8 = 272; -10 - (-72) = 62")
    [(-3, '-', 2, -5), (34, '*', 8, 272), (-10, '-', -72, 62)]
    >>> equations("4 + 1 * 5 = 4 + 5 = 9")  # `1 * 5 = 4` is not read out of the longer line
    [(4, '+', 5, 9)]
    >>> equations("0.5 * 8 = 40, 5 * 8 = 40.5, 5 * 8 = 40/3, 5 * 8 = 40 - 1")  # not whole numbers: not read
    []
    >>> equations("152 / 8 = 19, 36 ÷ 4 = 9, 1/2 * 8 = 4")  # a division; `2 * 8 = 4` after `1/` is not read
    [(152, '/', 8, 19), (36, '/', 4, 9)]
    """
    return _scan(text)[0]


def _scan(text: str) -> tuple[list[Step], int]:
    """`equations(text)`, and how many equations there are not of whole numbers (`0.5 * 8 = 40`, `= 40/3`,
    `= 36 - 1`): `steps` scores a thought holding one as it scores a false equation."""
    found, inexact_count = [], 0
    for match in _EQUATION.finditer(text):
        if _skipped(text, match.start(), match.group(1)):
            continue
        if _inexact(text, match.start(), match.end(4)):
            inexact_count += 1
            continue
        left, op, right, result = match.groups()
        found.append((_int(left), _OPERATOR[op], _int(right), _int(result)))
    divided = sum(bool(_HAS_DIVIDE.search(m.group())) for m in _DIVIDED_LINE.finditer(text))
    return found, inexact_count + divided


def _skipped(text: str, start: int, first: str) -> bool:
    """Whether a match at `start` is part of a longer expression, or reads a number without its sign
    (the match that starts at the sign reads it)."""
    before = text[max(0, start - 40) : start]
    if first[0] in "-−":
        return bool(_CONTINUES_LEFT.search(before) or _TERM_END.search(before))
    return bool(_CONTINUES_LEFT.search(before)) or before.endswith(("-", "−"))


def _inexact(text: str, start: int, end: int) -> bool:
    return bool(_INEXACT_BEFORE.search(text, max(0, start - 40), start) or _INEXACT_AFTER.match(text, end))


def longer_lines(text: str) -> list[tuple[Expression, Expression]]:
    """Every `expression = expression` in `text` whose left side has 2 to 8 operations, of whole numbers.

    >>> longer_lines("4 + 1 * 5 = 4 + 5 = 9")
    [(((4, 1, 5), ('+', '*')), ((4, 5), ('+',)))]
    >>> longer_lines("-4 + 1 * 5 = -4 + 5; 4 + 1 * 5 = 4.5")
    [(((-4, 1, 5), ('+', '*')), ((-4, 5), ('+',)))]
    """
    return [line for line in _lines(text) if line is not None]


def _lines(text: str) -> list[tuple[Expression, Expression] | None]:
    """`longer_lines`, with None for a line that is not of whole numbers (`4 + 1 * 5 = 4.5`)."""
    found: list[tuple[Expression, Expression] | None] = []
    for match in _LINE.finditer(text):
        if _skipped(text, match.start(), match.group(1)):
            continue
        exact = not _inexact(text, match.start(), match.end(2))
        found.append((_parse(match.group(1)), _parse(match.group(2))) if exact else None)
    return found


def sums(text: str) -> list[Sum]:
    """Every `a + b + c ... = z` in `text`: three or more whole numbers added and equated to one number
    (a column of column addition: two digits and the carry). Read whatever its result; `steps` checks it.

    >>> sums("7 + 4 = 11. 4 + 2 + 1 = 7. 47 + 24 = 71.")
    [((4, 2, 1), 7)]
    >>> sums("4 + 2 * 1 = 6; 4 + 2 + 1 = 6 + 1")  # a product, or a right side still to work: not a sum
    []
    """
    return [found for left, right in longer_lines(text) if (found := _sum(left, right))]


def _sum(left: Expression, right: Expression) -> Sum | None:
    (terms, ops), (result, rest) = left, right
    return (terms, result[0]) if not rest and set(ops) == {"+"} else None


def step_done(left: Expression, right: Expression) -> Step | None:
    """The one operation `right` does to `left` (`4 + 1 * 5` -> `4 + 5`: `1 * 5 = 5`), else None.

    >>> step_done(((4, 1, 5), ("+", "*")), ((4, 5), ("+",)))
    (1, '*', 5, 5)
    >>> step_done(((4, 1, 5), ("+", "*")), ((9,), ()))  # two at once
    """
    terms, ops = left
    for k, op in enumerate(ops):
        neighbours = ops[max(k - 1, 0) : k + 2]
        if op != "*" and ("*" in neighbours or (k > 0 and ops[k - 1] == "-")):
            continue  # a sum done before a product next to it, or `a - b + c` as `a - (b + c)`
        x, y = terms[k], terms[k + 1]
        result = _apply(x, op, y)
        if ((*terms[:k], result, *terms[k + 2 :]), ops[:k] + ops[k + 1 :]) == right:
            return (x, op, y, result)
    return None


def is_true(step: Step) -> bool:
    left, op, right, result = step
    return _apply(left, op, right) == result


def same_step(written: Step | Sum, wanted: Step | Sum) -> bool:
    """Whether `written` is the step `wanted`: its operands in either order for `+` and `*` (not `-` or
    `/`), in any order for a sum of three or more terms."""
    return step_key(written) == step_key(wanted)


def step_key(step: Step | Sum, with_result: bool = True) -> tuple:
    """What identifies a step: its operator, its operands (sorted where they commute), and its result."""
    if len(step) == 2:
        (terms, result), op = step, "+"
    else:
        x, op, y, result = step
        terms = (x, y)
    operands = tuple(sorted(terms)) if op in "+*" else terms
    return (op, operands, result) if with_result else (op, operands)


def score_thought(thought: str, steps: list[str]) -> float:
    """What `steps` pays a thought for the worked steps `steps` (`x op y = z` lines): the share it writes
    right, counted from the first step up to the first it misses (`leading`), 0 if any equation in it is
    false or not of whole numbers, or if it pads.

    >>> score_thought("7 * 11 = 77. 77 + 20 = 97.", ["7 * 11 = 77. 77 + 20 = 97."])
    1.0
    """
    read = read_thought(thought, steps)
    if read is None:
        return 0.0
    wanted, written, lines, odd = read
    if odd or not all(is_true(step) for step in written) or any(_value(a) != _value(b) for a, b in lines):
        return 0.0
    done = {step_key(step) for step in written + done_in(lines)}
    return leading(wanted, done) / len(wanted)


def leading(wanted: list[Step | Sum], done: set, with_result: bool = True) -> int:
    """How many of the problem's steps, counted from its first, the thought does before the first it does
    not (`done`: the keys of what it does, `step_key(step, with_result)`).

    Credit runs from the first step, so a step counts only after the ones it follows: a column of a sum
    (`2 + 1 = 3`) or a units sum (`0 + 6 = 6`) is the same equation in many problems, and a thought that
    writes one fixed equation must not be paid on every problem that happens to hold it. A thought on
    this problem starts where its solution starts.

    >>> wanted = [(3, "*", 8, 24), (7, "+", 24, 31)]
    >>> leading(wanted, {step_key(wanted[0])}), leading(wanted, {step_key(wanted[1])})
    (1, 0)
    """
    return sum(1 for _ in takewhile(lambda step: step_key(step, with_result) in done, wanted))


def worked(solution: str) -> bool:
    """Whether a worked solution is steps the `steps` reward reads: one or more `x op y = z` equations of
    whole numbers, every one true, none with a decimal or fraction (a thought copying it would score 1.0).

    >>> worked("7 * 11 = 77. 77 + 20 = 97."), worked("Half of 9 is 4.5"), worked("9 / 2 = 4.5")
    (True, False, False)
    """
    return score_thought(solution, [solution]) == 1.0


def read_thought(thought: str, steps: list[str]) -> tuple[list, list, list, int] | None:
    """The problem's steps, the thought's equations and longer lines of whole numbers, and how many of
    its equations are not of whole numbers; None when the problem has no steps or the thought holds more
    than `2 * steps + 2` equations (padding: nothing to pay)."""
    wanted = [step for line in steps for step in equations(line) + sums(line)]
    (written, odd), lines = _scan(thought), _lines(thought)
    if not wanted or len(written) + odd + len(lines) > 2 * len(wanted) + 2:
        return None
    return wanted, written, [line for line in lines if line is not None], odd + lines.count(None)


def done_in(lines: list[tuple[Expression, Expression]]) -> list[Step | Sum]:
    """The steps the longer lines do: the one operation a line works, or the sum it adds up."""
    return [step for left, right in lines if (step := step_done(left, right) or _sum(left, right))]


def _apply(x: int, op: str, y: int) -> int | None:
    """`x op y`; None for a division that is not exact (or by zero): no whole number equals it."""
    if op == "/":
        return x // y if y and x % y == 0 else None
    return x + y if op == "+" else x - y if op == "-" else x * y


def _value(expression: Expression) -> int:
    terms, ops = expression
    return solve(list(terms), list(ops))[1]  # the task's own evaluation, products first


def _continues_left(text: str, start: int) -> bool:
    return _CONTINUES_LEFT.search(text, max(0, start - 40), start) is not None


def _parse(expression: str) -> Expression:
    expression = expression.strip()
    sign = -1 if expression[0] in "-−" else 1
    terms, ops = [], []
    for term, op in _PART.findall(expression.lstrip("-−")):
        terms.append(_int(term)) if term else ops.append(_OPERATOR[op])
    terms[0] *= sign
    return tuple(terms), tuple(ops)


def _int(term: str) -> int:
    return int(term.strip("()").replace("−", "-"))
