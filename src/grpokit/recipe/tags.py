"""The thought and answer tag names a recipe's completions use (`task.tags`); `THINK_TAGS` is the default."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TAG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class Tags:
    """The names of the thought and answer tags a recipe's completions use.

    >>> Tags(think="reasoning").all
    ('<reasoning>', '</reasoning>', '<answer>', '</answer>')
    """

    think: str = "think"
    answer: str = "answer"

    def __post_init__(self) -> None:
        for role in ("think", "answer"):
            name = getattr(self, role)
            if not isinstance(name, str) or not _TAG_NAME.fullmatch(name):
                raise ValueError(
                    f"{role}={name!r} is not a tag name; use a letter then letters, digits, '_' or '-' (e.g. reasoning)"
                )
        if self.think == self.answer:
            raise ValueError(f"think and answer are both {self.think!r}; the two tags need different names")

    @property
    def think_open(self) -> str:
        return f"<{self.think}>"

    @property
    def think_close(self) -> str:
        return f"</{self.think}>"

    @property
    def answer_open(self) -> str:
        return f"<{self.answer}>"

    @property
    def answer_close(self) -> str:
        return f"</{self.answer}>"

    @property
    def all(self) -> tuple[str, str, str, str]:
        return (self.think_open, self.think_close, self.answer_open, self.answer_close)


THINK_TAGS = Tags()
