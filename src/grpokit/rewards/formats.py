"""Format rewards: strict R1 format, and partial credit for the tags while the model is learning them."""

from __future__ import annotations

from grpokit.parsing import ANSWER_CLOSE, ANSWER_OPEN, TAGS, extract_answer, is_strict_format, tag_counts
from grpokit.rewards import Reward, register_reward
from grpokit.tasks.base import Task


@register_reward("format")
def make_format(task: Task) -> Reward:
    """1.0 for exactly `<think>…</think><answer>…</answer>` (non-empty answer, nothing around), else 0.0.

    >>> make_format(None)("<think>2 * 3 = 6.</think><answer>6</answer>", {})
    1.0
    """

    def format_reward(completion: str, example: dict) -> float:
        return 1.0 if is_strict_format(completion) else 0.0

    return format_reward


@register_reward("format_partial")
def make_format_partial(task: Task) -> Reward:
    """0.25 for each of the four tags that appears exactly once; a repeated tag or an empty answer earns nothing.

    A ladder towards the strict format: `<think>x</think>` alone scores 0.5. Tag spam cannot farm it.

    >>> make_format_partial(None)("<think>x</think> 6", {})
    0.5
    """

    def format_partial_reward(completion: str, example: dict) -> float:
        counts = tag_counts(completion)
        score = sum(0.25 for tag in TAGS if counts[tag] == 1)
        if counts[ANSWER_OPEN] == 1 and not extract_answer(completion):  # `<answer></answer>` says nothing
            score -= 0.25 * (counts[ANSWER_CLOSE] == 1) + 0.25
        return max(score, 0.0)

    return format_partial_reward
