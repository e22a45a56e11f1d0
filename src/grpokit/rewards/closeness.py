"""Partial credit for a Countdown equation that misses the target by a little.

Correctness is all or nothing, and on Countdown a small model's groups are mostly all wrong: nothing to
learn from. `closeness` pays a valid equation (each given
number used exactly once, checked by the task's own parser, never `eval`) by how near it lands:
`1 - |value - target| / target`, floored at 0. An invalid equation, a wrong `= target` claim, an unlisted
or repeated number earn 0, as they do for correctness.
"""

from __future__ import annotations

from fractions import Fraction

from grpokit.rewards.registry import Reward, register_reward
from grpokit.tasks.base import Task


@register_reward("closeness")
def make_closeness(task: Task) -> Reward:
    """`1 - |value - target| / target` (at least 0) for an answer that uses each number once, else 0.

    >>> from grpokit.tasks import build_task
    >>> reward = make_closeness(build_task("countdown"))
    >>> row = {"nums": [3, 5, 2], "target": 20}
    >>> reward("<think>x</think><answer>(5 + 3) * 2</answer>", row)  # 16
    0.8
    >>> reward("<think>x</think><answer>(5 * 2) * 2</answer>", row)  # 2 used twice, 3 left out
    0.0
    """
    if not callable(getattr(task, "value", None)):
        raise ValueError(
            f"reward 'closeness' needs a task whose answers have a value to compare with a target (countdown); "
            f"task {getattr(task, 'name', task)!r} has none: use correctness"
        )

    def closeness_reward(completion: str, example: dict) -> float:
        value = task.value(completion, example)
        if value is None:
            return 0.0
        target = Fraction(int(example["target"]))
        return float(max(Fraction(0), 1 - abs(value - target) / max(abs(target), Fraction(1))))

    return closeness_reward
