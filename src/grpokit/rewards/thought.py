"""Credit for a Countdown thought whose arithmetic is true: `true_steps`.

Countdown's correctness reward reads only the answer. A small policy trained on `tries` thoughts can learn
their shape and write false steps (`36 + 1 = 4, 36 - 1 = 4.` before `(16 + 20) - 1` for 4): the thought
then no longer tells it which last step lands. `true_steps` pays 1 when every `x op y = z` in the thought is
true, each operand is one of the problem's numbers or a result written earlier in the thought, and there
are at most as many as the `backtrack` demonstration may write (20); anything else scores 0. So a group
whose answers are all wrong still separates the completions that computed from those that did not. It
pays wrong answers: give it less weight than correctness. No shipped recipe uses it.

Equations are read with a regular expression and checked with exact fractions; the text is never
evaluated. Gaming it: `1 + 1 = 2` uses no number of the problem, listing candidates (`21 + 7 = 27,
21 + 7 = 28`) writes a false one, a step with a decimal (`20 / 16 = 1.5`) scores 0 rather than go
unread, and padding past the bound scores 0. Only `x op y = z` is read: prose (`16 and 20 make 4`) is
not. Every demonstration the task writes (`worked`, `tries`, `backtrack`) earns 1 (tested).
"""

from __future__ import annotations

import re
from fractions import Fraction

from grpokit.rewards.registry import Reward, register_reward
from grpokit.tasks.base import Task
from grpokit.tasks.countdown import APPLY, BACKTRACK_MOST
from grpokit.tasks.parsing import MAX_COMPLETION_CHARS, THINK_TAGS

# Terms may carry decimals so that a step written with one is read, and refused (countdown's steps are whole).
_NUMBER = r"[0-9]{1,18}(?:\.[0-9]+)?"
_OPS = "-+*/×x−"
# A lookahead finds overlapping steps, so each link of a chain `16 + 20 = 36 - 1 = 35` is read.
_STEP = re.compile(
    rf"(?<![0-9.])(?=([-−]?{_NUMBER})\s*([{_OPS}])\s*({_NUMBER})\s*=\s*([-−]?{_NUMBER})(?![0-9]|\.[0-9]))"
)
# A step inside a longer expression (`1 - 16 + 20 = 36`) or after a fraction or power is not the step it shows.
_INSIDE = re.compile(rf"(?:[0-9)]\s*[{_OPS}]|[/^÷])\s*$|[0-9)]\s*[-−]$")
# After the result: a power, percent or factorial (`= 36^2`, `= 36%`), or an operator that does not start the
# next link of a chain (`= 36/2`, `= 36 - 1`).
_TAIL = re.compile(rf"\s*(?:[\^%!÷²³¹⁰⁴-⁹]|\*\*|(?:[-+*/×−]|x(?![A-Za-z]))(?!\s*{_NUMBER}\s*=))")
_OPERATOR = {"+": "+", "-": "-", "−": "-", "*": "*", "×": "*", "x": "*", "/": "/"}


def thought_steps(thought: str) -> list[tuple[Fraction, str, Fraction, Fraction]] | None:
    """Every `x op y = z` in `thought`, in order, operators normalised to + - * /; None when one is not
    of whole numbers as written: a decimal term (`20 / 16 = 1.5`), a result that goes on (`= 36/2`,
    `= 36 - 1`, `= 36^2`, `= 36%`) or a step inside a longer expression (`1 - 16 + 20 = 36`). Such a step
    is not the step it shows, and must not hide beside true ones. A bare sign is read (`-16 + 20 = 4`).

    >>> thought_steps("17 + 4 = 21, 21 − 7 = 14. 21 × 7 = 147, 21 / 7 = 3.")[1]
    (Fraction(21, 1), '-', Fraction(7, 1), Fraction(14, 1))
    >>> [thought_steps(t) for t in ("16 + 20 = 36, 20 / 16 = 1.5", "16 + 20 = 36/2", "16 + 20 = 36 - 1")]
    [None, None, None]
    >>> thought_steps("-16 + 20 = 4")
    [(Fraction(-16, 1), '+', Fraction(20, 1), Fraction(4, 1))]
    """
    found = []
    for match in _STEP.finditer(thought):
        x, op, y, z = match.groups()
        before = thought[max(0, match.start() - 40) : match.start()]
        if x[0] not in "-−" and before.endswith(("-", "−")):
            continue  # the match that starts at the sign reads this step
        if "." in x + y + z or _INSIDE.search(before) or _TAIL.match(thought, match.end(4)):
            return None
        found.append((_fraction(x), _OPERATOR[op], _fraction(y), _fraction(z)))
    return found


def _fraction(number: str) -> Fraction:
    return Fraction(number.replace("−", "-"))


@register_reward("true_steps")
def make_true_steps(task: Task) -> Reward:
    """1 when the thought's equations are all true and build on the problem's numbers, else 0.

    >>> from grpokit.tasks import build_task
    >>> reward = make_true_steps(build_task("countdown"))
    >>> row = {"nums": [16, 20, 1], "target": 15, "answer": 15}
    >>> reward("<think>16 + 20 = 36, 36 + 1 = 37, 36 - 1 = 35.</think><answer>(16 + 20) - 1</answer>", row)
    1.0
    >>> reward("<think>16 + 20 = 36, 36 + 1 = 4.</think><answer>(16 + 20) - 1</answer>", row)  # a false step
    0.0
    >>> reward("<think>2 + 2 = 4.</think><answer>16 + 20 - 1</answer>", row)  # not the problem's numbers
    0.0
    """
    if task is not None and getattr(task, "name", None) != "countdown":
        raise ValueError(
            f"reward 'true_steps' needs a task whose thoughts combine the problem's numbers (countdown); task "
            f"{getattr(task, 'name', task)!r} is not one: for arithmetic use steps"
        )
    tags = getattr(task, "tags", THINK_TAGS)

    def true_steps_reward(completion: str, example: dict) -> float:
        text = completion[:MAX_COMPLETION_CHARS]
        if tags.think_close not in text:
            return 0.0
        steps = thought_steps(text.split(tags.think_close, 1)[0])
        nums = [int(n) for n in example["nums"]]
        if not steps or len(steps) > BACKTRACK_MOST:
            return 0.0
        known = set(nums)
        for x, op, y, z in steps:
            if x not in known or y not in known or (op == "/" and y == 0) or APPLY[op](x, y) != z:
                return 0.0
            known.add(z)
        return 1.0

    return true_steps_reward
