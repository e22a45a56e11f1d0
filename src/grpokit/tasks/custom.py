"""Your own questions: a CSV, JSONL or Parquet file with a question and an answer column, and a checker.

    task: {name: custom, params: {path: data/qa.jsonl, question_column: q, answer_column: a, checker: numeric}}

Checkers: `exact` (whitespace-normalised string equality), `numeric` (exact rational comparison of
integers, decimals (`.5`, `5.`) or fractions (`3/4`, `1 / 2`, `-1/-2`, `\\frac{1}{2}`); blanks ignored, a
unicode minus read as a minus, commas as thousands separators allowed) and `math`
(math-verify: `\\frac{1}{2}`, `0.5` and `1/2` agree; the gold is read as LaTeX, run in the sandbox). A bad file fails
when the recipe loads, naming the file, the row and the column.

>>> CustomTask.check_numeric("1,000.0", "1000")
True
>>> CustomTask.check_numeric("0.333", "1/3")
False
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from grpokit.tasks.base import Example, Task, check_fractions, check_split, partition
from grpokit.tasks.data import FILE_SUFFIXES, read_file, require_columns
from grpokit.tasks.math_problems import math_score
from grpokit.tasks.parsing import extract_answer
from grpokit.tasks.registry import register_task

CHECKERS = ("exact", "numeric", "math")
_DECIMAL = r"[-+]?(?:(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+)"  # ASCII digits: `5.`, `.5`, `1,000`
_NUMBER = re.compile(rf"(?P<top>{_DECIMAL})(?:/(?P<bottom>{_DECIMAL}))?")
_LATEX_FRACTION = re.compile(r"(?P<sign>[-+]?)\\[dt]?frac\{(?P<top>[^{}]*)\}\{(?P<bottom>[^{}]*)\}")


@dataclass
class CustomConfig:
    path: str = ""
    question_column: str = "question"
    answer_column: str = "answer"
    checker: str = "exact"
    # Shares of the questions (by normalised text) held out for validation and test.
    validation_fraction: float = 0.1
    test_fraction: float = 0.1

    def validate(self) -> None:
        if not self.path:
            raise ValueError("task.params.path is required: a .csv or .jsonl file with your questions")
        if Path(self.path).suffix.lower() not in FILE_SUFFIXES:
            raise ValueError(f"{self.path}: use a {', '.join(FILE_SUFFIXES)} file")
        if self.checker not in CHECKERS:
            raise ValueError(f"checker={self.checker!r}; choose from {', '.join(CHECKERS)}")
        check_fractions(self.validation_fraction, self.test_fraction)


@register_task
class CustomTask(Task):
    name = "custom"
    config_class = CustomConfig

    def __init__(self, config: CustomConfig) -> None:
        super().__init__(config)
        rows = read_rows(Path(config.path), config.question_column, config.answer_column)
        self.splits = partition(rows, self.key, config.validation_fraction, config.test_fraction)
        for split, items in self.splits.items():
            if not items and split != "validation":  # validation is needed only by in-training evaluations
                raise ValueError(
                    f"{config.path}: {len(rows)} rows leave the {split} split empty; add rows or change "
                    "validation_fraction / test_fraction"
                )

    @property
    def uses_sandbox(self) -> bool:
        return self.config.checker == "math"

    def example(self, split: str, index: int) -> Example:
        check_split(split)
        rows = self.splits[split]
        if not rows:
            raise ValueError(f"{self.config.path}: the {split} split is empty; add rows or raise {split}_fraction")
        return rows[index % len(rows)]

    def score(self, completion: str, example: Example) -> float:
        answer = extract_answer(completion, tags=self.tags)
        if answer is None or not answer.strip():
            return 0.0
        if self.config.checker == "numeric":
            return 1.0 if self.check_numeric(answer, example["answer"]) else 0.0
        if self.config.checker == "math":
            return math_score(answer, str(example["answer"]))
        return 1.0 if " ".join(answer.split()) == " ".join(str(example["answer"]).split()) else 0.0

    @staticmethod
    def check_numeric(answer: str, gold: str) -> bool:
        got, want = _number(answer), _number(str(gold))
        return got is not None and got == want


def _number(text: str) -> Fraction | None:
    """An integer, decimal or fraction (`3/4`, `-1/-2`, `\\frac{1}{2}`), read exactly; None otherwise.
    Blanks around `/` and inside `\\frac`'s braces are ignored (not between digits: `4 2` is no number),
    and a unicode minus is a minus."""
    text = re.sub(r"\s*([/{}])\s*", r"\1", text.strip().replace("\u2212", "-"))
    if len(text) > 64:
        return None
    latex = _LATEX_FRACTION.fullmatch(text)
    if latex:  # its braces hold no braces: this reads plain numbers only
        value = _number(f"{latex['top']}/{latex['bottom']}")
        return -value if value is not None and latex["sign"] == "-" else value
    match = _NUMBER.fullmatch(text)
    if not match:
        return None
    try:
        value = Fraction(match["top"].replace(",", ""))
        return value / Fraction(match["bottom"].replace(",", "")) if match["bottom"] else value
    except (ValueError, ZeroDivisionError):
        return None


def read_rows(path: Path, question_column: str, answer_column: str) -> list[Example]:
    """Rows as examples; every error names the file, and the row and column where it has one."""
    rows = []
    for where, record in read_file(path):
        for column in (question_column, answer_column):
            hint = f"set task.params.{'question_column' if column == question_column else 'answer_column'}"
            require_columns(f"{path} {where}", record, (column,), hint)
        rows.append({"question": str(record[question_column]).strip(), "answer": str(record[answer_column]).strip()})
    return rows
