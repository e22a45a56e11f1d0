"""The one answer-extraction contract: every reward, verifier and metric reads completions through here.

R1-zero format: ``<think>reasoning</think><answer>final answer</answer>``.

- An answer written inside ``<think>`` does not count; neither does one after an unclosed ``<think>``,
  one before a thought tag (``<answer>9</answer><think>``), nor one with a tag inside it
  (``<answer><think></think>9</answer>``).
- Several answer blocks: ``which="last"`` (default) or ``"first"`` picks one, so hedging with several
  guesses earns nothing; strict format rejects them outright.
- Chat templates that prefill ``<think>`` in the generation prompt: the completion then starts inside
  the thought; `normalize_completion` puts the tag back before anything is parsed.
- Completions are cut to `MAX_COMPLETION_CHARS` first, so a 1 MB completion costs microseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
MAX_COMPLETION_CHARS = 20_000

_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.S)
_STRICT = re.compile(r"\A\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*\Z", re.S)


@dataclass(frozen=True)
class Parsed:
    think: str | None
    answer: str | None  # stripped text of the chosen <answer> block outside <think>; None if there is none
    strict: bool  # exactly one think block then one non-empty answer block, nothing around them


def normalize_completion(text: str, think_prefilled: bool = False) -> str:
    """Bound the text and restore a `<think>` that the chat template put in the prompt."""
    text = text[:MAX_COMPLETION_CHARS]
    if think_prefilled and not text.lstrip().startswith(THINK_OPEN):
        text = THINK_OPEN + text
    return text


def parse_completion(text: str, which: Literal["last", "first"] = "last") -> Parsed:
    """Split a completion into its thought and answer.

    >>> parse_completion("<think>2 * 3 = 6</think><answer>6</answer>")
    Parsed(think='2 * 3 = 6', answer='6', strict=True)
    """
    text = text[:MAX_COMPLETION_CHARS]
    return Parsed(think=extract_think(text), answer=extract_answer(text, which), strict=is_strict_format(text))


def extract_answer(text: str, which: Literal["last", "first"] = "last") -> str | None:
    blocks = answer_blocks(text)
    if not blocks:
        return None
    return (blocks[-1] if which == "last" else blocks[0])[1]


def answer_blocks(text: str) -> list[tuple[int, str]]:
    """(offset, stripped text) of each `<answer>` block after every (closed) thought, with no tag inside."""
    text = text[:MAX_COMPLETION_CHARS]
    thoughts = [m.span() for m in _THINK_BLOCK.finditer(text)]
    last_thought_tag = max(text.rfind(THINK_OPEN), text.rfind(THINK_CLOSE))
    return [
        (match.start(), match.group(1).strip())
        for match in _ANSWER_BLOCK.finditer(text)
        if match.start() > last_thought_tag
        and not any(start < match.end() and match.start() < end for start, end in thoughts)
        and not any(tag in match.group(1) for tag in TAGS)
    ]


def answer_after_thought(text: str) -> bool:
    """True when there is a non-empty answer and every thought tag comes before it.

    >>> [answer_after_thought(t) for t in ("<think>x</think><answer>9</answer>", "<answer>9</answer><think>")]
    [True, False]
    """
    return bool(extract_answer(text))


def extract_think(text: str) -> str | None:
    match = _THINK_BLOCK.search(text[:MAX_COMPLETION_CHARS])
    if match is None:
        return None
    return match.group(0)[len(THINK_OPEN) :].removesuffix(THINK_CLOSE).strip()


def is_strict_format(text: str) -> bool:
    """`<think>…</think><answer>…</answer>` and nothing else: each tag once, answer non-empty."""
    text = text[:MAX_COMPLETION_CHARS]
    if any(text.count(tag) != 1 for tag in TAGS):
        return False
    match = _STRICT.match(text)
    return bool(match and match.group(2).strip())


def tag_counts(text: str) -> dict[str, int]:
    text = text[:MAX_COMPLETION_CHARS]
    return {tag: text.count(tag) for tag in TAGS}
