"""Your own questions: a file, a dataset folder or a hub data set with a question and an answer per row, and a checker.

    task: {name: custom, params: {path: data/qa.jsonl, question_column: q, answer_column: a, checker: numeric}}
    task: {name: custom, params: {path: data/shop_math.jsonl, solution_column: solution, checker: numeric}}
    task: {name: custom, params: {path: org/name, split: train, subset: main}}     # a hub data set id

`path` is a local .csv/.jsonl/.json/.parquet file, a local dataset folder (`save_to_disk`'s, or laid out like
a hub repo) or a hub data set id; of a folder or hub id one split is read (`split`, `subset`). The rows are
split three ways by a stable hash of the normalised question (`validation_fraction`, `test_fraction`).

A row is a question and an answer column, or a conversation: `messages` (a list of {role, content}: the
question is the last user turn, the answer the assistant turn after it), or `prompt` (text or messages) with
an `answer` column or a `completion` (text or messages). An assistant turn holding `<answer>…</answer>` gives
the text inside as the answer and the rest, without its thought tags, as the worked solution.

Demonstrations (what an sft stage trains on) are `<think>{solution}</think><answer>{answer}</answer>` in the
recipe's tags, the solution from `solution_column` or the conversation; with no solutions and
`demonstrate_answers: true`, the answer after an empty thought (it teaches the tags, not the reasoning).
Otherwise the task writes none, and a recipe with an sft stage is refused with the fix named.

Worked solutions written as `x op y = z` equations of whole numbers (`7 * 11 = 77. 77 + 20 = 97.`, divisions
exact) are also each row's `steps`, so the `steps` reward pays a thought per step written right; it is
allowed when at least 90% of the rows' solutions read so (`grpokit.tasks.equations.worked`; the others get no
steps, so their groups tie on it).

Checkers: `exact` (whitespace-normalised string equality), `numeric` (exact rational comparison of
integers, decimals (`.5`, `5.`) or fractions (`3/4`, `1 / 2`, `-1/-2`, `\\frac{1}{2}`); blanks ignored, a
unicode minus read as a minus, commas as thousands separators allowed) and `math`
(math-verify: `\\frac{1}{2}`, `0.5` and `1/2` agree; the gold is read as LaTeX, run in the sandbox). A bad
local file fails when the recipe loads, naming the file, the row and the column; a hub data set is read on
first use.

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
from typing import Any

from grpokit.tasks.base import Example, Task, check_fractions, check_split, partition
from grpokit.tasks.data import FILE_SUFFIXES, Record, is_local_file, load_split, read_file, require_columns
from grpokit.tasks.equations import worked
from grpokit.tasks.math_problems import math_score
from grpokit.tasks.parsing import THINK_TAGS, extract_answer
from grpokit.tasks.registry import register_task

CHECKERS = ("exact", "numeric", "math")
WORKED_SHARE = 0.9  # the share of rows whose solutions must read as steps for the `steps` reward
_DECIMAL = r"[-+]?(?:(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+)"  # ASCII digits: `5.`, `.5`, `1,000`
_NUMBER = re.compile(rf"(?P<top>{_DECIMAL})(?:/(?P<bottom>{_DECIMAL}))?")
_LATEX_FRACTION = re.compile(r"(?P<sign>[-+]?)\\[dt]?frac\{(?P<top>[^{}]*)\}\{(?P<bottom>[^{}]*)\}")
# An assistant turn written in the default tags: its answer block, and the thought tags around the rest.
_ANSWER_BLOCK = re.compile(re.escape(THINK_TAGS.answer_open) + "(.*?)" + re.escape(THINK_TAGS.answer_close), re.S)
_THOUGHT_TAG = re.compile(f"{re.escape(THINK_TAGS.think_open)}|{re.escape(THINK_TAGS.think_close)}")
# Columns a conversational row's question and reply come from when no column is named, in this order.
QUESTION_COLUMNS = ("question", "prompt", "messages")
REPLY_COLUMNS = ("completion", "messages")
_SOURCES = f"{', '.join(FILE_SUFFIXES)} file, a dataset folder or a hub data set id"


@dataclass
class CustomConfig:
    # A local .csv/.jsonl/.json/.parquet file, a local dataset folder, or a hub data set id.
    path: str = ""
    # Of a dataset folder or hub id: the split read (it is split three ways like a file) and the config name.
    split: str = "train"
    subset: str | None = None
    # None: `question`, else a conversational row's `prompt` or `messages` (the last user turn).
    question_column: str | None = None
    # None: `answer`, else a conversational row's reply (`completion`, or the assistant turn of `messages`).
    answer_column: str | None = None
    # A column of worked solutions: the demonstrations' thoughts.
    solution_column: str | None = None
    # With no worked solutions, demonstrate the answer after an empty thought.
    demonstrate_answers: bool = False
    checker: str = "exact"
    # Shares of the questions (by normalised text) held out for validation and test.
    validation_fraction: float = 0.1
    test_fraction: float = 0.1

    def validate(self) -> None:
        if not self.path:
            raise ValueError(f"task.params.path is required: a {_SOURCES}")
        path = Path(self.path).expanduser()
        if path.is_file() and path.suffix.lower() not in FILE_SUFFIXES:
            raise ValueError(f"{self.path}: use a {_SOURCES}")
        if looks_local(self.path) and not is_local_file(self.path) and not path.exists():
            raise ValueError(f"dataset folder not found: {self.path} (relative paths start at the current directory)")
        if self.checker not in CHECKERS:
            raise ValueError(f"checker={self.checker!r}; choose from {', '.join(CHECKERS)}")
        if not isinstance(self.demonstrate_answers, bool):
            raise ValueError(f"demonstrate_answers={self.demonstrate_answers!r}; use true or false")
        check_fractions(self.validation_fraction, self.test_fraction)


def looks_local(path: str) -> bool:
    """True for a path that names this machine's files (a hub id is `name` or `org/name`)."""
    return path.startswith((".", "/", "~")) or path.count("/") > 1 or Path(path).expanduser().exists()


@register_task
class CustomTask(Task):
    name = "custom"
    config_class = CustomConfig

    def __init__(self, config: CustomConfig) -> None:
        super().__init__(config)
        self._rows: list[Example] | None = None
        self._splits: dict[str, list[Example]] | None = None
        self._unsolved: list[str] = []
        if looks_local(config.path) or is_local_file(config.path):
            self.splits  # a local file or folder is cheap to read: its errors show when the recipe loads  # noqa: B018

    @property
    def rows(self) -> list[Example]:
        """Every row as an example (`question`, `answer`, `solution` ("" for none), `steps`, `where`), read on
        first use."""
        if self._rows is None:
            cfg = self.config
            self._rows = [to_example(where, row, cfg) for where, row in read_records(cfg.path, cfg.split, cfg.subset)]
            self._unsolved = [row["where"] for row in self._rows if not row["solution"]]
        return self._rows

    @property
    def worked_steps(self) -> bool:  # type: ignore[override]  # per data set, not per class
        """True when at least 90% of the rows carry worked steps (`steps`): the `steps` reward can pay them."""
        rows = self.rows
        return bool(rows) and sum(bool(row["steps"]) for row in rows) >= WORKED_SHARE * len(rows)

    def worked_steps_hint(self) -> str:
        """Why the `steps` reward is refused, and the fix."""
        rows = self.rows
        plain = [row["where"] for row in rows if not row["steps"]]
        if len(self._unsolved) == len(rows):
            return "set task.params.solution_column to a column of worked solutions (`7 * 11 = 77. 77 + 20 = 97.`)"
        return (
            f"{len(plain)} of {len(rows)} rows have no worked solution written as `x op y = z` equations of whole "
            f"numbers, all true (first: {plain[0]}); {WORKED_SHARE:.0%} must have one"
        )

    @property
    def splits(self) -> dict[str, list[Example]]:
        if self._splits is None:
            cfg = self.config
            splits = partition(self.rows, self.key, cfg.validation_fraction, cfg.test_fraction)
            for split, items in splits.items():
                if not items and split != "validation":  # validation is needed only by in-training evaluations
                    raise ValueError(
                        f"{cfg.path}: {len(self.rows)} rows leave the {split} split empty; add rows or change "
                        "validation_fraction / test_fraction"
                    )
            self._splits = splits
        return self._splits

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

    def demonstration(self, example: Example) -> str | None:
        """`<think>{solution}</think><answer>{answer}</answer>` in the recipe's tags, when every row has a
        worked solution (or `demonstrate_answers` allows an empty thought); else None."""
        if self.unsolved() and not self.config.demonstrate_answers:
            return None
        t, thought = self.tags, example.get("solution") or ""
        return f"{t.think_open}{thought}{t.think_close}{t.answer_open}{example['answer']}{t.answer_close}"

    def unsolved(self) -> list[str]:
        """Where the rows without a worked solution are."""
        self.rows  # noqa: B018
        return self._unsolved

    def demonstration_hint(self) -> str:
        unsolved, total = self.unsolved(), len(self.rows)
        if len(unsolved) < total:
            return (
                f"{len(unsolved)} of {total} rows have no worked solution (first: {unsolved[0]}); give every row "
                "one, or set task.params.demonstrate_answers: true to demonstrate those rows' answers alone"
            )
        return (
            "set task.params.solution_column to a column of worked solutions (each demonstration is then "
            "<think>solution</think><answer>answer</answer>), or task.params.demonstrate_answers: true to "
            "demonstrate the answers alone"
        )

    @staticmethod
    def check_numeric(answer: str, gold: str) -> bool:
        got, want = read_number(answer), read_number(str(gold))
        return got is not None and got == want


def read_number(text: str) -> Fraction | None:
    """An integer, decimal or fraction (`3/4`, `-1/-2`, `\\frac{1}{2}`), read exactly; None otherwise.
    Blanks around `/` and inside `\\frac`'s braces are ignored (not between digits: `4 2` is no number),
    and a unicode minus is a minus."""
    text = re.sub(r"\s*([/{}])\s*", r"\1", text.strip().replace("\u2212", "-"))
    if len(text) > 64:
        return None
    latex = _LATEX_FRACTION.fullmatch(text)
    if latex:  # its braces hold no braces: this reads plain numbers only
        value = read_number(f"{latex['top']}/{latex['bottom']}")
        return -value if value is not None and latex["sign"] == "-" else value
    match = _NUMBER.fullmatch(text)
    if not match:
        return None
    try:
        value = Fraction(match["top"].replace(",", ""))
        return value / Fraction(match["bottom"].replace(",", "")) if match["bottom"] else value
    except (ValueError, ZeroDivisionError):
        return None


def read_records(path: str, split: str = "train", subset: str | None = None) -> list[Record]:
    """The raw rows of a file, dataset folder or hub id, each with where it was found (file and line, split and row)."""
    if is_local_file(path):
        file = Path(path).expanduser()
        return [(f"{file} {where}", row) for where, row in read_file(file)]
    return [(f"{path} {where}", row) for where, row in load_split(path, split, subset)]


def to_example(where: str, row: dict[str, Any], cfg: CustomConfig) -> Example:
    """One row as an example (`question`, `answer`, `solution`, `steps`: [solution] when it reads as worked
    steps, else []); every error names the row and the column, and the fix."""
    question = read_question(where, row, cfg.question_column)
    answer, solution = read_answer(where, row, cfg.answer_column)
    if cfg.solution_column is not None:
        require_columns(
            where, row, (cfg.solution_column,), "set task.params.solution_column to your column of worked solutions"
        )
        solution = str(row[cfg.solution_column]).strip()
    for tag in THINK_TAGS.all:  # a solution is the thought's text: a tag in it would end the thought early
        if solution and tag in solution:
            column = cfg.solution_column or "its reply"
            raise ValueError(
                f"{where} column {column!r}: the worked solution holds the tag {tag}; write it without tags"
            )
    steps = [solution] if solution and worked(solution) else []
    return {"question": question, "answer": answer, "solution": solution or "", "steps": steps, "where": where}


def read_question(where: str, row: dict[str, Any], column: str | None) -> str:
    hint = "set task.params.question_column"
    if column is None:
        column = next((c for c in QUESTION_COLUMNS if c in row), QUESTION_COLUMNS[0])
        hint += ", or give conversational rows (a messages or prompt column)"
    require_columns(where, row, (column,), hint)
    value = row[column]
    if isinstance(value, str) and column != "messages":
        return value.strip()
    users = [turn["content"] for turn in read_turns(where, column, value) if turn["role"] == "user"]
    if not users or not users[-1].strip():
        raise ValueError(f"{where} column {column!r} has no user turn with text; the question is the last user turn")
    return users[-1].strip()


def read_answer(where: str, row: dict[str, Any], column: str | None) -> tuple[str, str | None]:
    """The gold answer and the worked solution the reply holds (None: none)."""
    if column is None:
        replies = [c for c in REPLY_COLUMNS if c in row]
        column = "answer" if "answer" in row or not replies else replies[0]
        hint = "set task.params.answer_column, or give conversational rows (a messages or completion column)"
    else:
        hint = "set task.params.answer_column"
    require_columns(where, row, (column,), hint)
    value = row[column]
    if isinstance(value, list) or column == "messages":
        return split_reply(where, column, reply_of(where, column, value))
    if column == "completion":
        return split_reply(where, column, str(value))
    return str(value).strip(), None


def read_turns(where: str, column: str, value: Any) -> list[dict[str, str]]:
    """A list of {role, content} turns, or an error naming the row and the column."""
    if not isinstance(value, list) or not all(
        isinstance(t, dict) and isinstance(t.get("role"), str) and isinstance(t.get("content"), str) for t in value
    ):
        raise ValueError(
            f"{where} column {column!r} is neither text nor a list of {{role, content}} turns with text content"
        )
    return value


def reply_of(where: str, column: str, value: Any) -> str:
    """The text of the last assistant turn after the last user turn."""
    turns = read_turns(where, column, value)
    last_user = max((i for i, t in enumerate(turns) if t["role"] == "user"), default=-1)
    replies = [t["content"] for t in turns[last_user + 1 :] if t["role"] == "assistant"]
    if not replies:
        raise ValueError(f"{where} column {column!r} has no assistant turn after the last user turn: no answer")
    return replies[-1]


def split_reply(where: str, column: str, text: str) -> tuple[str, str | None]:
    """(answer, worked solution) of an assistant's reply: with `<answer>…</answer>` the last block's text and
    the rest without thought tags; without, the whole reply and no solution."""
    blocks = _ANSWER_BLOCK.findall(text)
    if not blocks:
        if not text.strip():
            raise ValueError(f"{where} column {column!r}: the assistant's reply is empty")
        return text.strip(), None
    answer = blocks[-1].strip()
    if not answer:
        raise ValueError(f"{where} column {column!r}: the reply's last answer block is empty")
    rest = _THOUGHT_TAG.sub("", _ANSWER_BLOCK.sub("", text)).strip()
    return answer, rest or None
