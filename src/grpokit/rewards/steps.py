"""Partial credit for the worked steps of a problem: each intermediate result the thought gets right.

For tasks whose problems carry their worked solution as `x op y = z.` lines (`example["steps"]`: the
arithmetic task's, or a custom task's worked solutions): a completion earns the share of those steps it
writes, as an equation with the same operands (either order for `+` and `*`) and the right result, before
`</think>`. Any false equation in the thought scores 0, so listing candidate results
(`3 * 8 = 23, 3 * 8 = 24, ...`) earns nothing, and true equations that are not steps of this problem earn
nothing either. Nor does listing true equations until one is a step (`7 + 20 = 27. 7 + 21 = 28. ...` for
`7 + 24`, or every units sum `0 + 7 = 7 ...` when the task splits its sums): a thought with more than
`2 * steps + 2` equations scores 0. A line that keeps the problem whole and works it down
(`7 + 3 * 8 = 7 + 24 = 31`) is read as the steps it does, and its sides must be equal; `3 * 8 = 7` is not read
out of it. A sum of three or more terms equated to one number (`4 + 2 + 1 = 7`: a column of column addition,
two digits and the carry, as `split_sums: columns` writes it) is one step, its terms in any order. A step is
read only as the whole numbers it writes: a bare sign belongs to its number (`-10 - (-72) = 62`), and an
equation with a decimal, fraction, power or percent around its numbers, or a result that goes on
(`0.5 * 8 = 40`, `5 * 8 = 40/3`, `5 * 8 = 40 - 1`), is not the step `5 * 8 = 40` and scores as a false one. A
division `x / y = z` (or `÷`) is a step of its own, true only when it is exact (`152 / 8 = 19`; `7 / 2 = 3` is
false); a longer line holding one (`24 / 2 + 7 = 19`) is not read as steps and scores as a false equation.
Equations are checked with integer arithmetic on the parsed digits; the text is never evaluated.

`steps_attempted` pays the share of steps set out in the thought whatever their results: shaping for a first
R1-zero stage, where right steps are too rare to learn from.

Why: a correctness reward is all or nothing, so a policy that writes no working (the R1-zero failure of
`4</think><answer>10</answer>`) and one that gets the product right but the sum wrong look the same.
"""

from __future__ import annotations

import re

from grpokit.rewards.registry import Reward, register_reward
from grpokit.tasks.arithmetic import solve
from grpokit.tasks.base import Task
from grpokit.tasks.parsing import MAX_COMPLETION_CHARS, THINK_TAGS

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
    return _key(written) == _key(wanted)


def _key(step: Step | Sum, with_result: bool = True) -> tuple:
    """What identifies a step: its operator, its operands (sorted where they commute), and its result."""
    if len(step) == 2:
        (terms, result), op = step, "+"
    else:
        x, op, y, result = step
        terms = (x, y)
    operands = tuple(sorted(terms)) if op in "+*" else terms
    return (op, operands, result) if with_result else (op, operands)


@register_reward("steps")
def make_steps(task: Task) -> Reward:
    """The share of the problem's worked steps written right in the thought; 0 if any equation there is false.

    >>> from grpokit.tasks import build_task
    >>> reward = make_steps(build_task("arithmetic"))
    >>> row = {"steps": ["3 * 8 = 24.", "7 + 24 = 31."], "answer": 31}
    >>> reward("<think>3 * 8 = 24. 7 + 24 = 30.</think><answer>30</answer>", row)  # a false sum
    0.0
    >>> reward("<think>8 * 3 = 24, so the sum is 31.</think><answer>31</answer>", row)
    0.5
    >>> reward("<think>3 * 8 = 24. 24 + 7 = 31.</think><answer>31</answer>", row)
    1.0
    """
    _needs_worked_steps(task, "steps")
    tags = getattr(task, "tags", THINK_TAGS)

    def steps_reward(completion: str, example: dict) -> float:
        return score_thought(_thought(completion, tags), example.get("steps") or [])

    return steps_reward


def score_thought(thought: str, steps: list[str]) -> float:
    """What `steps` pays a thought for the worked steps `steps` (`x op y = z` lines): the share it writes
    right, 0 if any equation in it is false or not of whole numbers, or if it pads.

    >>> score_thought("7 * 11 = 77. 77 + 20 = 97.", ["7 * 11 = 77. 77 + 20 = 97."])
    1.0
    """
    read = _read(thought, steps)
    if read is None:
        return 0.0
    wanted, written, lines, odd = read
    if odd or not all(is_true(step) for step in written) or any(_value(a) != _value(b) for a, b in lines):
        return 0.0
    done = {_key(step) for step in written + _done_in(lines)}
    return sum(_key(step) in done for step in wanted) / len(wanted)


def worked(solution: str) -> bool:
    """Whether a worked solution is steps the `steps` reward reads: one or more `x op y = z` equations of
    whole numbers, every one true, none with a decimal or fraction (a thought copying it would score 1.0).

    >>> worked("7 * 11 = 77. 77 + 20 = 97."), worked("Half of 9 is 4.5"), worked("9 / 2 = 4.5")
    (True, False, False)
    """
    return score_thought(solution, [solution]) == 1.0


@register_reward("steps_attempted")
def make_steps_attempted(task: Task) -> Reward:
    """The share of the problem's steps the thought sets out to do, right or wrong: shaping for R1-zero.

    A step counts when an equation in the thought has its operands and operator (`3 * 8 = 25` attempts
    `3 * 8 = 24`), or a longer line does it. Meant for a first stage from the untouched model, which
    seldom writes a right step but often writes an equation (14% of completions on the problem's
    numbers, against 3% right): it pays for working the problem out in the thought, so the thought does
    not shrink to a guess while the tags are learned. Padding (more than `2 * steps + 2` equations)
    scores 0. Pair it with `steps` and `correctness`; alone it pays wrong results.

    >>> from grpokit.tasks import build_task
    >>> reward = make_steps_attempted(build_task("arithmetic"))
    >>> row = {"steps": ["3 * 8 = 24.", "7 + 24 = 31."], "answer": 31}
    >>> reward("<think>8 * 3 = 25, so 32.</think><answer>32</answer>", row)  # the product, wrong
    0.5
    >>> reward("<think>7 + 3 * 8 = 7 + 24 = 31</think><answer>31</answer>", row)
    1.0
    """
    _needs_worked_steps(task, "steps_attempted")
    tags = getattr(task, "tags", THINK_TAGS)

    def steps_attempted_reward(completion: str, example: dict) -> float:
        read = _read(_thought(completion, tags), example.get("steps") or [])
        if read is None:
            return 0.0
        wanted, written, lines, _ = read
        tried = {_key(step, with_result=False) for step in written + _done_in(lines)}
        return sum(_key(step, with_result=False) in tried for step in wanted) / len(wanted)

    return steps_attempted_reward


def _read(thought: str, steps: list[str]) -> tuple[list, list, list, int] | None:
    """The problem's steps, the thought's equations and longer lines of whole numbers, and how many of
    its equations are not of whole numbers; None when the problem has no steps or the thought holds more
    than `2 * steps + 2` equations (padding: nothing to pay)."""
    wanted = [step for line in steps for step in equations(line) + sums(line)]
    (written, odd), lines = _scan(thought), _lines(thought)
    if not wanted or len(written) + odd + len(lines) > 2 * len(wanted) + 2:
        return None
    return wanted, written, [line for line in lines if line is not None], odd + lines.count(None)


def _done_in(lines: list[tuple[Expression, Expression]]) -> list[Step | Sum]:
    """The steps the longer lines do: the one operation a line works, or the sum it adds up."""
    return [step for left, right in lines if (step := step_done(left, right) or _sum(left, right))]


def _needs_worked_steps(task: Task, name: str) -> None:
    if task is not None and not getattr(task, "worked_steps", False):
        hint = getattr(task, "worked_steps_hint", lambda: "")()
        raise ValueError(
            f"reward {name!r} needs a task whose problems carry worked steps (arithmetic, or custom with worked "
            f"solutions written as `x op y = z` equations); task {task.name!r} has none: "
            + (hint or "use correctness, or a format reward for partial credit")
        )


def _thought(completion: str, tags) -> str:
    text = completion[:MAX_COMPLETION_CHARS]
    return text.split(tags.think_close, 1)[0] if tags.think_close in text else text.split(tags.answer_open)[0]


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
