"""Partial credit for the worked steps of a problem: each intermediate result the thought gets right.

For tasks whose problems carry their worked solution as `x op y = z.` lines (`example["steps"]`, the
arithmetic task's): a completion earns the share of those steps it writes, as an equation with the same
operands (either order for `+` and `*`) and the right result, before `</think>`. Any false equation in
the thought scores 0, so listing candidate results (`3 * 8 = 23, 3 * 8 = 24, ...`) earns nothing, and
true equations that are not steps of this problem earn nothing either. Nor does listing true equations
until one is a step (`7 + 20 = 27. 7 + 21 = 28. ...` for `7 + 24`, or every units sum `0 + 7 = 7 ...`
when the task splits its sums): a thought with more than `2 * steps + 2` equations scores 0. Equations
are checked with integer arithmetic on the parsed digits; the text is never evaluated.

Why: a correctness reward is all or nothing, so a policy that writes no working (the R1-zero failure of
`4</think><answer>10</answer>`) and one that gets the product right but the sum wrong look the same.
"""

from __future__ import annotations

import re

from grpokit.parsing import MAX_COMPLETION_CHARS, THINK_TAGS
from grpokit.rewards import Reward, register_reward
from grpokit.tasks.base import Task

_TERM = r"\(-[0-9]{1,12}\)|[0-9]{1,12}"
# A lookahead finds overlapping equations, so a chain `3 * 8 = 24 + 7 = 31` is read as both of its links;
# no digit may touch either end, so `34 * 8 = 272` is not also read as `4 * 8 = 272`.
_EQUATION = re.compile(rf"(?<![0-9)])(?=({_TERM})\s*([-+*×x−])\s*({_TERM})\s*=\s*(-?[0-9]{{1,24}})(?![0-9]))")
_OPERATOR = {"+": "+", "-": "-", "−": "-", "*": "*", "×": "*", "x": "*"}
Step = tuple[int, str, int, int]


def equations(text: str) -> list[Step]:
    """Every `x op y = z` in `text`, operators normalised to + - *.

    >>> equations("First 3 × 8 = 24, then 7 + 24 = 31.")
    [(3, '*', 8, 24), (7, '+', 24, 31)]
    >>> equations("3 * 8 = 24 + 7 = 31")  # a chain: both links
    [(3, '*', 8, 24), (24, '+', 7, 31)]
    >>> equations("(-3) - 2 = -5; 34 * 8 = 272")
    [(-3, '-', 2, -5), (34, '*', 8, 272)]
    """
    found = []
    for match in _EQUATION.finditer(text):
        left, op, right, result = match.groups()
        found.append((_int(left), _OPERATOR[op], _int(right), int(result)))
    return found


def is_true(step: Step) -> bool:
    left, op, right, result = step
    value = left + right if op == "+" else left - right if op == "-" else left * right
    return value == result


def same_step(written: Step, wanted: Step) -> bool:
    if written == wanted:
        return True
    left, op, right, result = written
    return op in "+*" and (right, op, left, result) == wanted


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
    if task is not None and not getattr(task, "worked_steps", False):
        raise ValueError(
            f"reward 'steps' needs a task whose problems carry worked steps (arithmetic); task {task.name!r} has "
            "none: use correctness, or a format reward for partial credit"
        )
    tags = getattr(task, "tags", THINK_TAGS)

    def steps_reward(completion: str, example: dict) -> float:
        wanted = [step for line in example.get("steps") or [] for step in equations(line)]
        if not wanted:
            return 0.0
        text = completion[:MAX_COMPLETION_CHARS]
        thought = text.split(tags.think_close, 1)[0] if tags.think_close in text else text.split(tags.answer_open)[0]
        written = equations(thought)
        if len(written) > 2 * len(wanted) + 2 or not all(is_true(step) for step in written):
            return 0.0
        done = sum(any(same_step(w, step) for w in written) for step in wanted)
        return done / len(wanted)

    return steps_reward


def _int(term: str) -> int:
    return int(term.strip("()"))
