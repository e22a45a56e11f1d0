"""Math word problems checked with math-verify: NuminaMath-TIR and GSM8K data, from the hub or a file.

    task: {name: math, params: {source: AI-MO/NuminaMath-TIR}}                 # hub id
    task: {name: math, params: {source: openai/gsm8k, subset: main}}
    task: {name: math, params: {source: data/problems.jsonl, schema: gsm8k}}   # local .jsonl/.csv/.parquet

Schemas: `numina` (`problem`, `solution` whose last `\\boxed{...}` is the gold answer) and `gsm8k`
(`question`, `answer` ending in `#### N`); `auto` picks by the columns of the first row. A hub id or
dataset folder is read per split (`train_split`, `test_split`; validation is a stable share of the
train split, `validation_fraction`); a single file is split three ways by a stable hash of the
normalised question (`validation_fraction`, `test_fraction`). No question is in two splits: training
and validation rows whose question is also a test question are dropped.

Items whose gold answer math-verify cannot read are skipped, counted and reported (`notes()`, the
training log, `summary.json`), never scored 0 in silence. Scoring is math-verify's
`verify(parse(gold), parse(answer))` with gold and answer read as LaTeX (`$...$`) and plain
expressions in one call, so `3\\sqrt{2}` is not 3 and `1, 2, 3` is a set; answers first pass
`grpokit.sandbox.scorers.math_refusal` (no code-like text; no hedges or relations the gold lacks). It runs in
the confined sandbox worker (`grpokit.sandbox.client`): its timeouts hold whatever thread calls, and a hung
or crashing check scores 0 and is counted in `score_errors`. `score_many` (what the correctness reward
gives TRL's batch to) sends a batch's checks in one round trip, with the same verdicts as `score`.

>>> boxed_answer(r"So $x = 2$ and the sum is $\\boxed{\\frac{1}{2}}$.")
'\\\\frac{1}{2}'
>>> gsm8k_answer("She pays 48/2 = <<48/2=24>>24 dollars.\\n#### 1,024")
'1024'
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpokit.errors import SandboxError, SandboxRefused, SandboxTimeout
from grpokit.sandbox.client import shared_sandbox
from grpokit.sandbox.scorers import math_refusal
from grpokit.tasks.base import Example, Task, check_fractions, check_split, normalise_question, partition
from grpokit.tasks.data import is_local_file, load_split, read_file, require_columns
from grpokit.tasks.parsing import extract_answer
from grpokit.tasks.registry import register_task

logger = logging.getLogger(__name__)

SCHEMAS = ("auto", "numina", "gsm8k")
SCORE_TIMEOUT_S = 10.0  # the parent's hard limit per check; math-verify's own limit inside is 3 s per step
_COLUMNS = {"numina": ("problem", "solution"), "gsm8k": ("question", "answer")}
_CALCULATOR = re.compile(r"<<[^<>]*>>")
_errors_lock = threading.Lock()
score_errors = {"timeout": 0, "error": 0}


def math_score(answer: str | None, gold: str) -> float:
    """1.0 when math-verify finds `answer` equivalent to `gold`; 0.0 otherwise, and on any failure."""
    return math_scores([answer], [gold])[0]


def math_scores(answers: list[str | None], golds: list[str]) -> list[float]:
    """`math_score` for each pair, the checks that pass the screen sent to the sandbox in batches
    (`Sandbox.score_many`: one round trip for many, each verdict still its own)."""
    scores = [0.0] * len(answers)
    pairs = list(zip(answers, golds, strict=True))
    todo = [i for i, (answer, gold) in enumerate(pairs) if answer is not None and math_refusal(answer, gold) is None]
    checks = [list(pairs[i]) for i in todo]
    try:
        results = shared_sandbox().score_many("grpokit.sandbox.scorers:math_equal", checks, timeout=SCORE_TIMEOUT_S)
    except SandboxError as err:  # refused on this machine: every check fails
        results = [err] * len(todo)
    for i, result in zip(todo, results, strict=True):
        if isinstance(result, SandboxError):
            with _errors_lock:
                score_errors["timeout" if isinstance(result, SandboxTimeout) else "error"] += 1
            logger.debug("math check failed: %s", result)
        else:
            scores[i] = result
    return scores


def gold_parses(gold: str) -> bool:
    try:
        return shared_sandbox().score("grpokit.sandbox.scorers:math_gold_parses", gold, timeout=SCORE_TIMEOUT_S) == 1.0
    except SandboxRefused:
        raise
    except SandboxError:
        return False


def boxed_answer(solution: str) -> str | None:
    """The contents of the last `\\boxed{...}` (balanced braces), or None."""
    start = solution.rfind("\\boxed")
    while start != -1:
        i = solution.find("{", start)
        if i != -1 and solution[start + len("\\boxed") : i].strip() == "":
            depth = 0
            for j in range(i, len(solution)):
                depth += {"{": 1, "}": -1}.get(solution[j], 0)
                if depth == 0:
                    return solution[i + 1 : j].strip() or None
        start = solution.rfind("\\boxed", 0, start)
    return None


def gsm8k_answer(answer: str) -> str | None:
    """The number after the final `####`, thousands separators removed, or None."""
    if "####" not in answer:
        return None
    gold = answer.rsplit("####", 1)[1].strip().replace(",", "")
    return gold or None


class CheckedRows:
    """Rows per split whose gold answers are checked lazily, as problems are first used.

    Checking happens on first use, so a 70k-row hub split costs only the rows a run reads.
    """

    def __init__(self, splits: dict[str, list[Example]], source: str) -> None:
        self.rows = splits
        self.source = source
        self.valid: dict[str, list[int]] = {s: [] for s in splits}
        self.scanned = dict.fromkeys(splits, 0)
        self.unparsable: list[tuple[str, str, str]] = []  # (split, where, gold)

    def get(self, split: str, index: int) -> Example:
        rows, valid = self.rows[split], self.valid[split]
        if not rows:
            raise ValueError(f"{self.source}: the {split} split is empty; add rows or raise {split}_fraction")
        while len(valid) <= index and self.scanned[split] < len(rows):
            row = rows[self.scanned[split]]
            if row["answer"] is not None and gold_parses(row["answer"]):
                valid.append(self.scanned[split])
            else:
                self.unparsable.append((split, row["where"], str(row["answer"])[:80]))
            self.scanned[split] += 1
        if not valid:
            raise ValueError(
                f"{self.source}: none of the {len(rows)} {split} rows has a gold answer math-verify can read "
                "(is the schema right? see task.params.schema)"
            )
        return rows[valid[index % len(valid)]]

    def notes(self) -> list[str]:
        if not self.unparsable:
            return []
        checked = sum(self.scanned.values())
        first = "; ".join(f"{split} {where}: {gold!r}" for split, where, gold in self.unparsable[:3])
        return [
            f"{self.source}: skipped {len(self.unparsable)} of {checked} checked rows whose gold answer "
            f"math-verify cannot read (first: {first})"
        ]


@dataclass
class MathConfig:
    source: str = ""
    subset: str | None = None
    schema: str = "auto"
    train_split: str = "train"
    test_split: str | None = "test"  # None: the test split is a share of the train split too
    validation_fraction: float = 0.05
    test_fraction: float = 0.1  # of a single file, or of the train split when test_split is None
    limit: int | None = None  # read at most this many rows per split

    def validate(self) -> None:
        if not self.source:
            raise ValueError(
                "task.params.source is required: a hub id (AI-MO/NuminaMath-TIR, openai/gsm8k) "
                "or a local .jsonl/.csv/.parquet file or dataset folder"
            )
        if self.schema not in SCHEMAS:
            raise ValueError(f"schema={self.schema!r}; choose from {', '.join(SCHEMAS)}")
        check_fractions(self.validation_fraction, self.test_fraction)
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit={self.limit}; use a positive number of rows or leave it out")


@register_task
class MathTask(Task):
    name = "math"
    config_class = MathConfig
    uses_sandbox = True

    def __init__(self, config: MathConfig) -> None:
        super().__init__(config)
        self._checked: CheckedRows | None = None
        if is_local_file(config.source):
            self.checked  # a local file is cheap to read: its errors show when the recipe loads  # noqa: B018

    @property
    def checked(self) -> CheckedRows:
        """The rows, read on first use: a hub data set downloads only when a run needs it."""
        if self._checked is None:
            splits = {split: [self._convert(w, row) for w, row in records] for split, records in self._read().items()}
            for split, rows in splits.items():
                if not rows and split != "validation":  # validation is needed only by in-training evaluations
                    raise ValueError(
                        f"{self.config.source}: the {split} split is empty; add rows or change "
                        "validation_fraction / test_fraction"
                    )
            self._checked = CheckedRows(splits, self.config.source)
        return self._checked

    def _read(self) -> dict[str, list[tuple[str, dict[str, Any]]]]:
        cfg = self.config
        if is_local_file(cfg.source):
            path = Path(cfg.source)
            records = [(f"{path} {where}", row) for where, row in read_file(path)][: cfg.limit]
        else:
            records = load_split(cfg.source, cfg.train_split, cfg.subset)[: cfg.limit]
            if cfg.test_split is not None:
                test = load_split(cfg.source, cfg.test_split, cfg.subset)[: cfg.limit]
                tested = {self._key(r) for r in test}
                kept = [r for r in records if self._key(r) not in tested]
                # The hub's test split is the test split; validation is a share of the rest.
                return {**partition(kept, self._key, cfg.validation_fraction, 0.0), "test": test}
        # One file, or a hub split with no test split: a stable hash of the question decides.
        return partition(records, self._key, cfg.validation_fraction, cfg.test_fraction)

    def _key(self, record: tuple[str, dict[str, Any]]) -> str:
        """A raw record's split key: its normalised question text (the row's place when it has none)."""
        where, row = record
        return normalise_question(str(row.get(self._columns(row)[0], where)))

    def _schema(self, row: dict[str, Any]) -> str:
        if self.config.schema != "auto":
            return self.config.schema
        for schema, columns in _COLUMNS.items():
            if all(c in row for c in columns):
                return schema
        raise ValueError(
            f"{self.config.source}: cannot tell the schema from the columns {', '.join(map(str, row))}; "
            "expected problem/solution (numina) or question/answer (gsm8k), or set task.params.schema"
        )

    def _columns(self, row: dict[str, Any]) -> tuple[str, str]:
        return _COLUMNS[self._schema(row)]

    def _convert(self, where: str, row: dict[str, Any]) -> Example:
        schema = self._schema(row)
        question_column, solution_column = _COLUMNS[schema]
        require_columns(where, row, (question_column, solution_column), f"this is the {schema} schema")
        solution = str(row[solution_column])
        gold = boxed_answer(solution) if schema == "numina" else gsm8k_answer(solution)
        return {"question": str(row[question_column]).strip(), "answer": gold, "solution": solution, "where": where}

    def example(self, split: str, index: int) -> Example:
        check_split(split)
        return self.checked.get(split, index)

    def score(self, completion: str, example: Example) -> float:
        return math_score(extract_answer(completion, tags=self.tags), str(example["answer"]))

    def score_many(self, completions: list[str], examples: list[Example]) -> list[float]:
        """`score` for each pair, in a few sandbox round trips instead of one per completion."""
        answers = [extract_answer(c, tags=self.tags) for c in completions]
        return math_scores(answers, [str(e["answer"]) for e in examples])

    def notes(self) -> list[str]:
        return self._checked.notes() if self._checked is not None else []

    def demonstration(self, example: Example) -> str | None:
        """The data set's own worked solution as the thought, its gold answer as the answer."""
        solution = example.get("solution") or ""
        thought = _CALCULATOR.sub("", solution.rsplit("####", 1)[0]) if "####" in solution else solution
        t = self.tags
        return f"{t.think_open}\n{thought.strip()}\n{t.think_close}\n{t.answer_open}{example['answer']}{t.answer_close}"

    def adversarial(self, example: Example) -> list[tuple[str, str]]:
        gold = str(example["answer"])
        return [
            (
                "every small integer listed",
                "<think>x</think><answer>" + ", ".join(map(str, range(-5, 101))) + "</answer>",
            ),
            ("answer in prose with a wrong number", "<think>x</think><answer>it is not " + gold + " but 1e9</answer>"),
            ("sympy injection", "<think>x</think><answer>__import__('os').system('touch pwned.txt')</answer>"),
            ("nested power", "<think>x</think><answer>9**9**9**9</answer>"),
            *(
                (f"LaTeX whose last number is the gold: {trick}", f"<think>x</think><answer>{trick}</answer>")
                for trick in last_number_tricks(gold)
            ),
        ]


def last_number_tricks(gold: str) -> list[str]:
    """Wrong answers that end (or start) with the gold: a scorer that reads one bare number pays them."""
    tricks = [f"{gold}1 \\approx {gold}", f"{gold}1 > {gold}", f"\\pm {gold}", f"-1000, {gold}", f"{gold}1 or {gold}"]
    if gold.strip() not in ("0", "1", "-1"):  # where these would equal the gold
        tricks += [f"12 \\cdot {gold}", f"{gold}x", f"(-\\infty, {gold}]", f"x^2 + 2x + {gold}", f"3\\sqrt{{{gold}}}"]
    return tricks
