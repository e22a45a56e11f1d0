"""The one answer-extraction contract: every reward, verifier and metric reads completions through here.

R1-zero format: ``<think>reasoning</think><answer>final answer</answer>``. The tag names are a recipe
setting (`task.tags`): every function takes `tags`, e.g. ``Tags(think="reasoning")`` for
``<reasoning>…</reasoning><answer>…</answer>``; the default is `THINK_TAGS`.

- An answer written inside ``<think>`` does not count; neither does one after an unclosed ``<think>``,
  one before a thought tag (``<answer>9</answer><think>``), nor one with a tag inside it
  (``<answer><think></think>9</answer>``).
- Several answer blocks: ``which="last"`` (default) or ``"first"`` picks one, so hedging with several
  guesses earns nothing; strict format rejects them outright.
- Chat templates that prefill ``<think>`` in the generation prompt: the completion then starts inside
  the thought; `normalize_completion` puts the tag back before anything is parsed.
- Completions are cut to `MAX_COMPLETION_CHARS` first, so parsing costs little whatever their length.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from grpokit.recipe.tags import THINK_TAGS, Tags

MAX_COMPLETION_CHARS = 20_000

THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE = THINK_TAGS.all
TAGS = THINK_TAGS.all


@functools.lru_cache(maxsize=16)
def _patterns(tags: Tags) -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """(thought block, answer block, strict format) for `tags`; built once per tag pair."""
    think_open, think_close, answer_open, answer_close = map(re.escape, tags.all)
    return (
        re.compile(rf"{think_open}.*?(?:{think_close}|\Z)", re.S),
        re.compile(rf"{answer_open}(.*?){answer_close}", re.S),
        re.compile(rf"\A\s*{think_open}(.*?){think_close}\s*{answer_open}(.*?){answer_close}\s*\Z", re.S),
    )


@dataclass(frozen=True)
class Parsed:
    think: str | None
    answer: str | None  # stripped text of the chosen <answer> block outside <think>; None if there is none
    strict: bool  # exactly one think block then one non-empty answer block, nothing around them


def normalize_completion(text: str, think_prefilled: bool = False, tags: Tags = THINK_TAGS) -> str:
    """Bound the text and restore a `<think>` that the chat template put in the prompt."""
    text = text[:MAX_COMPLETION_CHARS]
    if think_prefilled and not text.lstrip().startswith(tags.think_open):
        text = tags.think_open + text
    return text


def retag(text: str, tags: Tags) -> str:
    """Text written with the default `<think>`/`<answer>` tags, with `tags` in their place.

    >>> retag("<think>x</think><answer>6</answer>", Tags(think="reasoning"))
    '<reasoning>x</reasoning><answer>6</answer>'
    """
    if tags == THINK_TAGS:
        return text
    names = {THINK_TAGS.think: tags.think, THINK_TAGS.answer: tags.answer}
    return re.sub(r"<(/?)(think|answer)>", lambda m: f"<{m.group(1)}{names[m.group(2)]}>", text)


def parse_completion(text: str, which: Literal["last", "first"] = "last", tags: Tags = THINK_TAGS) -> Parsed:
    """Split a completion into its thought and answer.

    >>> parse_completion("<think>2 * 3 = 6</think><answer>6</answer>")
    Parsed(think='2 * 3 = 6', answer='6', strict=True)
    """
    text = text[:MAX_COMPLETION_CHARS]
    return Parsed(
        think=extract_think(text, tags), answer=extract_answer(text, which, tags), strict=is_strict_format(text, tags)
    )


def extract_answer(text: str, which: Literal["last", "first"] = "last", tags: Tags = THINK_TAGS) -> str | None:
    blocks = answer_blocks(text, tags)
    if not blocks:
        return None
    return (blocks[-1] if which == "last" else blocks[0])[1]


def answer_blocks(text: str, tags: Tags = THINK_TAGS) -> list[tuple[int, str]]:
    """(offset, stripped text) of each answer block after every (closed) thought, with no tag inside."""
    text = text[:MAX_COMPLETION_CHARS]
    think_block, answer_block, _ = _patterns(tags)
    thoughts = [m.span() for m in think_block.finditer(text)]
    last_thought_tag = max(text.rfind(tags.think_open), text.rfind(tags.think_close))
    return [
        (match.start(), match.group(1).strip())
        for match in answer_block.finditer(text)
        if match.start() > last_thought_tag
        and not any(start < match.end() and match.start() < end for start, end in thoughts)
        and not any(tag in match.group(1) for tag in tags.all)
    ]


def answer_after_thought(text: str, tags: Tags = THINK_TAGS) -> bool:
    """True when there is a non-empty answer and every thought tag comes before it.

    >>> [answer_after_thought(t) for t in ("<think>x</think><answer>9</answer>", "<answer>9</answer><think>")]
    [True, False]
    """
    return bool(extract_answer(text, tags=tags))


def extract_think(text: str, tags: Tags = THINK_TAGS) -> str | None:
    match = _patterns(tags)[0].search(text[:MAX_COMPLETION_CHARS])
    if match is None:
        return None
    return match.group(0)[len(tags.think_open) :].removesuffix(tags.think_close).strip()


def is_strict_format(text: str, tags: Tags = THINK_TAGS) -> bool:
    """`<think>…</think><answer>…</answer>` and nothing else: each tag once, answer non-empty."""
    text = text[:MAX_COMPLETION_CHARS]
    if any(text.count(tag) != 1 for tag in tags.all):
        return False
    match = _patterns(tags)[2].match(text)
    return bool(match and match.group(2).strip())


def tag_counts(text: str, tags: Tags = THINK_TAGS) -> dict[str, int]:
    text = text[:MAX_COMPLETION_CHARS]
    return {tag: text.count(tag) for tag in tags.all}
