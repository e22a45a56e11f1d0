"""Format rewards: strict R1 format, and partial credit for the tags while the model is learning them.

Every format reward treats an answer of invisible characters only (a zero-width space, other format or
blank-rendering characters) as empty: it shows nothing, so it earns what `<answer></answer>` earns.
"""

from __future__ import annotations

import re
import unicodedata

from grpokit.rewards.registry import Reward, register_reward
from grpokit.tasks.base import Task
from grpokit.tasks.parsing import (
    MAX_COMPLETION_CHARS,
    THINK_TAGS,
    answer_after_thought,
    extract_answer,
    is_strict_format,
    tag_counts,
)


@register_reward("format")
def make_format(task: Task, answer_regex: str | None = None) -> Reward:
    """1.0 for exactly `<think>…</think><answer>…</answer>` (non-empty answer, nothing around), else 0.0.

    `answer_regex` also asks the answer to match it whole (`-?[0-9]+`: a bare integer). Without it the
    tags around any text are paid, and a policy can keep the reward while writing no answer the verifier
    reads (an R1-zero policy can answer `24 = 40`).

    >>> make_format(None)("<think>2 * 3 = 6.</think><answer>6</answer>", {})
    1.0
    >>> make_format(None, answer_regex="-?[0-9]+")("<think>2 * 3 = 6.</think><answer>6 = 6</answer>", {})
    0.0
    """

    tags = getattr(task, "tags", THINK_TAGS)
    pattern = _compile(answer_regex)

    def format_reward(completion: str, example: dict) -> float:
        if not is_strict_format(completion, tags) or not visible_answer(completion, tags):
            return 0.0
        if pattern is None:
            return 1.0
        answer = extract_answer(completion, tags=tags) or ""
        return 1.0 if len(answer) <= _MAX_ANSWER_CHARS and pattern.fullmatch(answer) else 0.0

    return format_reward


_MAX_ANSWER_CHARS = 1000  # a recipe's pattern never runs over a long answer
# Characters that render as nothing though Unicode files them as letters or symbols (fillers, a blank pattern).
_BLANK = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f\u17b4\u17b5")


def visible(text: str) -> bool:
    """True when `text` holds a character that shows: not a control, format (zero-width), separator,
    unassigned or private-use character, nor a blank filler.

    >>> [visible(t) for t in ("42", " \u200b\u2060\ufeff", "\u3000\u00a0", "\u3164")]
    [True, False, False, False]
    """
    return any(c not in _BLANK and unicodedata.category(c)[0] not in "CZ" for c in text)


def visible_answer(completion: str, tags=THINK_TAGS) -> bool:
    """True when the completion's answer (the last answer block after the thought) shows something."""
    return visible(extract_answer(completion, tags=tags) or "")


def _compile(answer_regex: str | None) -> re.Pattern | None:
    if answer_regex is None:
        return None
    try:
        return re.compile(answer_regex)
    except re.error as err:
        raise ValueError(
            f"answer_regex {answer_regex!r} is not a regular expression ({err}); e.g. '-?[0-9]+' for a bare integer"
        ) from err


@register_reward("format_lenient")
def make_format_lenient(task: Task) -> Reward:
    """1.0 when a closed thought is followed by a non-empty answer outside it, whatever text surrounds them.

    >>> make_format_lenient(None)("Sure! <think>x</think> <answer>6</answer> Done.", {})
    1.0
    >>> make_format_lenient(None)("<answer>6</answer><think>", {})  # tags out of order
    0.0
    """

    tags = getattr(task, "tags", THINK_TAGS)

    def format_lenient_reward(completion: str, example: dict) -> float:
        text = completion[:MAX_COMPLETION_CHARS]
        think_open = text.find(tags.think_open)
        closed = think_open != -1 and think_open < text.find(tags.think_close)
        return 1.0 if closed and answer_after_thought(text, tags) and visible_answer(text, tags) else 0.0

    return format_lenient_reward


@register_reward("tag_count")
def make_tag_count(task: Task, trailing_penalty: float = 0.001) -> Reward:
    """0.25 per tag that appears exactly once, less `trailing_penalty` per character after `</answer>`.

    A repeated tag earns nothing, so tag spam cannot farm it. The answer tags earn only around a
    non-empty (visible) answer that comes after every thought tag (not inside, before or around the
    thought), and `</think>` only after a `<think>`: a completion without `<think>` earns 0.5 at most.
    The result stays in [0, 1].

    >>> make_tag_count(None)("<think>x</think><answer>6</answer>" + "!" * 100, {})
    0.9
    >>> make_tag_count(None)("</think><answer>42</answer>", {})
    0.5
    """
    if trailing_penalty < 0:
        raise ValueError(f"trailing_penalty={trailing_penalty}; it must be >= 0")
    tags = getattr(task, "tags", THINK_TAGS)

    def tag_count_reward(completion: str, example: dict) -> float:
        text = completion[:MAX_COMPLETION_CHARS]
        counts = tag_counts(text, tags)
        score = 0.25 * (counts[tags.think_open] == 1)
        think_open = text.find(tags.think_open)
        score += 0.25 * (counts[tags.think_close] == 1 and -1 < think_open < text.find(tags.think_close))
        # `<answer></answer>`, an invisible answer or an answer out of place says nothing
        if answer_after_thought(text, tags) and visible_answer(text, tags):
            score += 0.25 * (counts[tags.answer_open] == 1) + 0.25 * (counts[tags.answer_close] == 1)
        if counts[tags.answer_close] >= 1:
            trailing = text.rsplit(tags.answer_close, 1)[1].strip()
            score -= trailing_penalty * len(trailing)
        return float(min(max(score, 0.0), 1.0))

    return tag_count_reward


@register_reward("format_partial")
def make_format_partial(task: Task) -> Reward:
    """Partial credit while the format is being learned: `tag_count` without the trailing-text penalty.

    >>> make_format_partial(None)("<think>x</think> 6", {})
    0.5
    """
    return make_tag_count(task, trailing_penalty=0.0)
