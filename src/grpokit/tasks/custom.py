"""Your own questions: a CSV or JSONL file with a question and an answer column, and a checker.

    task: {name: custom, params: {path: data/qa.jsonl, question_column: q, answer_column: a, checker: numeric}}

Checkers: `exact` (whitespace-normalised string equality) and `numeric` (exact rational comparison of
integers, decimals or fractions like `3/4`; commas as thousands separators allowed). A bad file fails
when the recipe loads, naming the file, the row and the column.

>>> CustomTask.check_numeric("1,000.0", "1000")
True
>>> CustomTask.check_numeric("0.333", "1/3")
False
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from grpokit.parsing import extract_answer
from grpokit.tasks import register_task
from grpokit.tasks.base import Example, Task, split_of

CHECKERS = ("exact", "numeric")
_NUMBER = re.compile(r"[-+]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?:/[0-9]+)?")


@dataclass
class CustomConfig:
    path: str = ""
    question_column: str = "question"
    answer_column: str = "answer"
    checker: str = "exact"
    eval_fraction: float = 0.1

    def validate(self) -> None:
        if not self.path:
            raise ValueError("task.params.path is required: a .csv or .jsonl file with your questions")
        if Path(self.path).suffix.lower() not in (".csv", ".jsonl"):
            raise ValueError(f"{self.path}: use a .csv or .jsonl file")
        if self.checker not in CHECKERS:
            raise ValueError(f"checker={self.checker!r}; choose from {', '.join(CHECKERS)}")
        if not 0.0 < self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction={self.eval_fraction}; it must be in (0, 1)")


@register_task
class CustomTask(Task):
    name = "custom"
    config_class = CustomConfig

    def __init__(self, config: CustomConfig) -> None:
        super().__init__(config)
        rows = read_rows(Path(config.path), config.question_column, config.answer_column)
        self.splits = {"train": [], "eval": []}
        for row in rows:
            self.splits[split_of(row["question"], config.eval_fraction)].append(row)
        for split, items in self.splits.items():
            if not items:
                raise ValueError(
                    f"{config.path}: {len(rows)} rows leave the {split} split empty; add rows or change eval_fraction"
                )

    def example(self, split: str, index: int) -> Example:
        rows = self.splits[split]
        return rows[index % len(rows)]

    def score(self, completion: str, example: Example) -> float:
        answer = extract_answer(completion)
        if answer is None or not answer.strip():
            return 0.0
        if self.config.checker == "numeric":
            return 1.0 if self.check_numeric(answer, example["answer"]) else 0.0
        return 1.0 if " ".join(answer.split()) == " ".join(str(example["answer"]).split()) else 0.0

    @staticmethod
    def check_numeric(answer: str, gold: str) -> bool:
        got, want = _number(answer), _number(str(gold))
        return got is not None and got == want


def _number(text: str) -> Fraction | None:
    text = text.strip()
    if len(text) > 64 or not _NUMBER.fullmatch(text):
        return None
    try:
        return Fraction(text.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def read_rows(path: Path, question_column: str, answer_column: str) -> list[Example]:
    """Rows as examples; every error names the file, and the row and column where it has one."""
    if not path.is_file():
        raise ValueError(f"dataset file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 (bad byte at offset {err.start}); re-save it as UTF-8") from err
    if path.suffix.lower() == ".jsonl":
        raw = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path} line {number} is not valid JSON: {err.msg}") from err
            if not isinstance(record, dict):
                raise ValueError(f"{path} line {number} is not a JSON object")
            raw.append((number, record))
        where = "line"
    else:
        raw = list(enumerate(csv.DictReader(text.splitlines()), start=2))  # row 1 is the header
        where = "row"
    if not raw:
        raise ValueError(f"{path} has no rows")
    rows = []
    for number, record in raw:
        for column in (question_column, answer_column):
            if column not in record:
                raise ValueError(
                    f"{path} {where} {number} has no column {column!r} (it has: "
                    f"{', '.join(map(str, record))}); set task.params.{_param(column, question_column)}"
                )
            if record[column] is None or not str(record[column]).strip():
                raise ValueError(f"{path} {where} {number} column {column!r} is empty")
        rows.append({"question": str(record[question_column]).strip(), "answer": str(record[answer_column]).strip()})
    return rows


def _param(column: str, question_column: str) -> str:
    return "question_column" if column == question_column else "answer_column"
