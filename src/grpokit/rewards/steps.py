"""Partial credit for the worked steps of a problem: each intermediate result the thought gets right.

For tasks whose problems carry their worked solution as `x op y = z.` lines (`example["steps"]`: the
arithmetic task's, or a custom task's worked solutions): a completion earns the share of those steps it
writes, as an equation with the same operands (either order for `+` and `*`) and the right result, before
`</think>`, counted from the solution's first step up to the first one it leaves out (in any order of
writing). A later step alone earns nothing, so one fixed equation that many problems share (a column
`2 + 1 = 3`, a units sum `0 + 6 = 6`) is not paid on each of them. Any false equation in the thought scores
0, so listing candidate results (`3 * 8 = 23, 3 * 8 = 24, ...`) earns nothing, and true equations that are
not steps of this problem earn nothing either. Nor does listing true equations until one is a step
(`7 + 20 = 27. 7 + 21 = 28. ...` for `7 + 24`, or every units sum `0 + 7 = 7 ...` when the task splits its
sums): a thought with more than `2 * steps + 2` equations scores 0. A line that keeps the problem whole and
works it down (`7 + 3 * 8 = 7 + 24 = 31`) is read as the steps it does, and its sides must be equal;
`3 * 8 = 7` is not read out of it. A sum of three or more terms equated to one number (`4 + 2 + 1 = 7`: a
column of column addition, two digits and the carry, as `split_sums: columns` writes it) is one step, its
terms in any order. A step is read only as the whole numbers it writes: a bare sign belongs to its number
(`-10 - (-72) = 62`), and an equation with a decimal, fraction, power or percent around its numbers, or a
result that goes on (`0.5 * 8 = 40`, `5 * 8 = 40/3`, `5 * 8 = 40 - 1`), is not the step `5 * 8 = 40` and
scores as a false one. A division `x / y = z` (or `÷`) is a step of its own, true only when it is exact
(`152 / 8 = 19`; `7 / 2 = 3` is false); a longer line holding one (`24 / 2 + 7 = 19`) is not read as steps
and scores as a false equation. Equations are checked with integer arithmetic on the parsed digits; the text
is never evaluated.

`steps_attempted` pays the share of steps set out in the thought whatever their results: shaping for a first
R1-zero stage, where right steps are too rare to learn from.

Why: a correctness reward is all or nothing, so a policy that writes no working (the R1-zero failure of
`4</think><answer>10</answer>`) and one that gets the product right but the sum wrong look the same.
"""

from __future__ import annotations

from grpokit.rewards.registry import Reward, register_reward
from grpokit.tasks.base import Task
from grpokit.tasks.equations import done_in, leading, read_thought, score_thought, step_key
from grpokit.tasks.parsing import MAX_COMPLETION_CHARS, THINK_TAGS

__all__ = ["make_steps", "make_steps_attempted", "score_thought"]


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
    >>> reward("<think>24 + 7 = 31.</think><answer>31</answer>", row)  # the second step without the first
    0.0
    """
    _needs_worked_steps(task, "steps")
    tags = getattr(task, "tags", THINK_TAGS)

    def steps_reward(completion: str, example: dict) -> float:
        return score_thought(_thought(completion, tags), example.get("steps") or [])

    return steps_reward


@register_reward("steps_attempted")
def make_steps_attempted(task: Task) -> Reward:
    """The share of the problem's steps the thought sets out to do, right or wrong: shaping for R1-zero.

    A step counts when an equation in the thought has its operands and operator (`3 * 8 = 25` attempts
    `3 * 8 = 24`), or a longer line does it, and the steps before it count (credit runs from the first).
    Meant for a first stage from the untouched model, which seldom writes a right step but more often
    writes an equation on the problem's numbers: it pays for working the problem out in the thought, so
    the thought does not shrink to a guess while the tags are learned. Padding (more than `2 * steps + 2`
    equations) scores 0. Pair it with `steps` and `correctness`; alone it pays wrong results.

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
        read = read_thought(_thought(completion, tags), example.get("steps") or [])
        if read is None:
            return 0.0
        wanted, written, lines, _ = read
        tried = {step_key(step, with_result=False) for step in written + done_in(lines)}
        return leading(wanted, tried, with_result=False) / len(wanted)

    return steps_attempted_reward


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
