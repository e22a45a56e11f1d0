"""Shaping rewards on length and repetition. Lengths are in characters: rewards see text, not tokens.

They shape how an answer is written and never decide correctness; the correctness reward and
evaluation both call `task.score`.
"""

from __future__ import annotations

import math

from grpokit.rewards.registry import Reward, register_reward
from grpokit.tasks.base import Task
from grpokit.tasks.parsing import MAX_COMPLETION_CHARS


@register_reward("length_cosine", bounds=(-1.0, 1.0))
def make_length_cosine(
    task: Task,
    max_chars: int = 2000,
    correct_short: float = 1.0,
    correct_long: float = 0.5,
    wrong_short: float = -1.0,
    wrong_long: float = -0.5,
) -> Reward:
    """Cosine-scaled length reward (Yeo et al. 2025): short right answers beat long ones, long wrong
    answers beat short ones (keep thinking when unsure). Uses `task.score` for right/wrong.

    >>> from grpokit.tasks import build_task
    >>> reward = make_length_cosine(build_task("arithmetic"), max_chars=100)
    >>> short, long = "<think></think><answer>7</answer>", "<think>" + "x" * 60 + "</think><answer>7</answer>"
    >>> reward(short, {"answer": 7}) > reward(long, {"answer": 7})
    True
    """
    if max_chars < 1:
        raise ValueError(f"max_chars={max_chars}; it must be >= 1")

    def length_cosine_reward(completion: str, example: dict) -> float:
        progress = min(len(completion), max_chars) / max_chars
        cosine = math.cos(progress * math.pi)  # 1 at length 0, -1 at max_chars
        if task.score(completion, example) == 1.0:
            low, high = correct_long, correct_short
        else:
            low, high = wrong_long, wrong_short
        return low + 0.5 * (high - low) * (1.0 + cosine)

    return length_cosine_reward


@register_reward("overlong_penalty", bounds=(-1.0, 0.0))
def make_overlong_penalty(task: Task, max_chars: int = 2000, buffer_chars: int = 500) -> Reward:
    """DAPO's soft overlong punishment: 0 up to `max_chars - buffer_chars`, then linear down to -1 at `max_chars`.

    >>> make_overlong_penalty(None, max_chars=100, buffer_chars=50)("x" * 75, {})
    -0.5
    """
    if not 0 < buffer_chars <= max_chars:
        raise ValueError(f"buffer_chars={buffer_chars}, max_chars={max_chars}; need 0 < buffer_chars <= max_chars")

    def overlong_penalty_reward(completion: str, example: dict) -> float:
        excess = len(completion) - (max_chars - buffer_chars)
        return 0.0 if excess <= 0 else -min(excess / buffer_chars, 1.0)

    return overlong_penalty_reward


@register_reward("repetition_penalty", bounds=(-1.0, 0.0))
def make_repetition_penalty(task: Task, ngram: int = 3, max_penalty: float = -1.0) -> Reward:
    """`max_penalty` times the share of repeated word n-grams (open-r1's form); 0 for text with none.

    >>> make_repetition_penalty(None)("one two three one two three one two three", {})
    -0.5714285714285714
    """
    if ngram < 1 or max_penalty > 0:
        raise ValueError(f"ngram={ngram}, max_penalty={max_penalty}; need ngram >= 1 and max_penalty <= 0")

    def repetition_penalty_reward(completion: str, example: dict) -> float:
        words = completion[:MAX_COMPLETION_CHARS].lower().split()
        if len(words) < ngram:
            return 0.0
        grams = [tuple(words[i : i + ngram]) for i in range(len(words) - ngram + 1)]
        return max_penalty * (1.0 - len(set(grams)) / len(grams))

    return repetition_penalty_reward
