"""A first recipe for a user's own question/answer data (`grpokit init DATA`), sized to the data.

The data is read as the `custom` task reads it (`grpokit.tasks.custom`). The columns are guessed from common
names unless given, the checker is `numeric` when nearly every answer is a number, and the held-out splits,
the warm-up and the GRPO stage are sized to the rows. The recipe is written as commented YAML that the
recipe loader accepts (`write_recipe` loads it back before it returns).

>>> guess_column(["Problem", "Answer"], QUESTION_NAMES)
'Problem'
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from grpokit.errors import RecipeError
from grpokit.recipe.load import load_recipe
from grpokit.tasks.base import Example, normalise_question, split_of
from grpokit.tasks.custom import WORKED_SHARE, CustomConfig, read_number, read_records, to_example
from grpokit.tasks.parsing import THINK_TAGS

QUESTION_NAMES = ("question", "problem", "prompt", "input", "instruction", "query")
ANSWER_NAMES = ("answer", "target", "output", "label", "final_answer", "solution")
SOLUTION_NAMES = ("solution", "worked_solution", "rationale", "explanation", "reasoning", "steps")
NUMERIC_SHARE = 0.9  # answers that read as numbers, at least, for the numeric checker
MIN_QUESTIONS = 20  # distinct questions, at least: a few to hold out, the rest to train on
MAX_HELD_OUT = 50  # rows each held-out split needs at most (10% of the rows when fewer)
DEMOS_PER_STEP = 16  # the warm-up's batch, as in the default recipe
MAX_DEMOS, MAX_GRPO_STEPS = 480, 55  # at most the default recipe's warm-up and GRPO stage


@dataclass(frozen=True)
class Draft:
    """What `grpokit init` guessed and sized; `render` writes it as a recipe."""

    data: str
    columns: list[str]
    question_column: str | None  # None: the conversation's last user turn
    answer_column: str | None  # None: the conversation's reply
    solution_column: str | None
    checker: str
    numeric_share: float  # of the answers that read as numbers
    rows: int  # distinct questions
    splits: dict[str, int]  # distinct questions per split
    held_out_fraction: float  # validation_fraction and test_fraction, each
    solutions: bool  # every row has a worked solution: the recipe warms up on them
    worked_steps: float  # the share of rows whose solutions are `x op y = z` steps the `steps` reward reads
    sft_examples: int
    sft_steps: int
    grpo_steps: int
    max_tokens: int


def guess_column(columns: list[str], names: tuple[str, ...], taken: tuple[str | None, ...] = ()) -> str | None:
    """The first of `names` among `columns` (case ignored) that is not `taken`; None when none is."""
    by_name = {c.lower(): c for c in reversed(columns)}
    return next((by_name[n] for n in names if n in by_name and by_name[n] not in taken), None)


def draft(
    data: str,
    question_column: str | None = None,
    answer_column: str | None = None,
    solution_column: str | None = None,
    checker: str | None = None,
) -> Draft:
    """Read `data`, guess what is not given, and size a recipe to it; errors name the data and the fix."""
    try:
        records = read_records(data)
    except ValueError as err:
        raise RecipeError(str(err)) from err
    columns = list(dict.fromkeys(c for _, row in records for c in row))
    chat = any(c in columns for c in ("messages", "completion"))
    question = question_column or guess_column(columns, QUESTION_NAMES)
    answer = answer_column or guess_column(columns, ANSWER_NAMES, (question,))
    if answer == "solution" and chat:  # a conversation's reply holds the answer; the column is its solution
        answer = None
    solution = solution_column or guess_column(columns, SOLUTION_NAMES, (question, answer))
    if question is None and "messages" not in columns:
        raise RecipeError(f"{data}: no question column among {', '.join(columns)}; name it: --question-column COLUMN")
    if answer is None and not chat:
        raise RecipeError(f"{data}: no answer column among {', '.join(columns)}; name it: --answer-column COLUMN")
    config = CustomConfig(data, question_column=question, answer_column=answer, solution_column=solution)
    try:
        config.validate()
        rows = [to_example(where, row, config) for where, row in records]
    except ValueError as err:
        raise RecipeError(str(err)) from err
    numeric = sum(read_number(row["answer"]) is not None for row in rows) / len(rows)
    checker = checker or ("numeric" if numeric >= NUMERIC_SHARE else "exact")
    keys = list(dict.fromkeys(normalise_question(row["question"]) for row in rows))  # the task's split key
    fraction, splits = held_out_share(data, keys)
    solutions = all(row["solution"] for row in rows)
    train = splits["train"]
    examples = max(DEMOS_PER_STEP, min(MAX_DEMOS, 3 * train) // DEMOS_PER_STEP * DEMOS_PER_STEP)
    return Draft(
        data=data,
        columns=columns,
        question_column=question,
        answer_column=answer,
        solution_column=solution,
        checker=checker,
        numeric_share=numeric,
        rows=len(keys),
        splits=splits,
        held_out_fraction=fraction,
        solutions=solutions,
        worked_steps=sum(bool(row["steps"]) for row in rows) / len(rows),
        sft_examples=examples if solutions else 0,
        sft_steps=examples // DEMOS_PER_STEP if solutions else 0,
        grpo_steps=min(MAX_GRPO_STEPS, max(10, train // 4)),  # each training question drawn about twice
        max_tokens=completion_budget(rows) if solutions else 128,  # room for a thought of its own
    )


def held_out_share(data: str, keys: list[str]) -> tuple[float, dict[str, int]]:
    """The smallest share (in whole percents from 10%, or less for large data) that leaves each held-out
    split at least min(50, 10% of the questions), and the questions per split it gives."""
    if len(keys) < MIN_QUESTIONS:
        raise RecipeError(
            f"{data}: {len(keys)} distinct questions are too few to train on and hold some out; "
            f"grpokit init needs at least {MIN_QUESTIONS}"
        )
    need = max(1, min(MAX_HELD_OUT, math.ceil(0.1 * len(keys))))
    start = min(10, max(1, math.ceil(150 * need / len(keys))))
    for percent in range(start, 41):
        counts = Counter(split_of(key, percent / 100, percent / 100) for key in keys)
        splits = {split: counts[split] for split in ("train", "validation", "test")}
        if splits["validation"] >= need and splits["test"] >= need and splits["train"] >= need:
            return percent / 100, splits
    raise RecipeError(
        f"{data}: {len(keys)} distinct questions are too few to hold {need} out for validation and {need} for "
        "test; give grpokit init at least about 20"
    )


def completion_budget(rows: list[Example]) -> int:
    """Completion tokens for the longest demonstrations: 1.5x the 90th percentile's, in steps of 32 (64-512).
    Counted as 2.5 characters a token, which holds for digits and short words in small models' vocabularies."""
    tags = sum(map(len, THINK_TAGS.all))
    lengths = sorted(tags + len(row["solution"]) + len(row["answer"]) for row in rows)
    tokens = 1.5 * lengths[int(0.9 * (len(lengths) - 1))] / 2.5
    return min(512, max(64, 32 * math.ceil(tokens / 32)))


def default_out(data: str) -> Path:
    """`<stem>_grpo.yaml` in the current folder."""
    return Path(f"{Path(data.rstrip('/')).stem}_grpo.yaml")


def _text(value: str) -> str:
    """A YAML scalar for any text: a JSON string is one, quoted where it must be."""
    return json.dumps(value)


def _column(name: str | None) -> str:
    return _text(name) if name else "null  # read from the conversation's turns"


def render(d: Draft, out: Path) -> str:
    """The recipe as commented YAML, to be saved as `out`."""
    eval_n, watched = min(100, d.splits["test"]), min(50, d.splits["validation"])
    lines = [
        f"# GRPO on {d.data}, written by `grpokit init` for the embedded SmolLM2-135M-Instruct.",
        "# Hardware: CPU only (2 cores are enough). Run from the folder `grpokit init` ran in (paths start there):",
        f"#   grpokit train {out}",
        "# Edit freely; `grpokit train RECIPE key.sub=value` changes one value for one run.",
        "model:",
        "  name: embedded  # or a hub id or local folder of a chat model",
        "lora:",
        "  r: 16",
        "  alpha: 32",
        "  target_modules: all-linear",
        "task:",
        "  name: custom",
        "  params:",
        f"    path: {_text(d.data)}",
        f"    question_column: {_column(d.question_column)}",
        f"    answer_column: {_column(d.answer_column)}",
    ]
    if d.solution_column:
        lines += [
            "    # Worked solutions: each demonstration is <think>{solution}</think><answer>{answer}</answer>.",
            f"    solution_column: {_text(d.solution_column)}",
        ]
    share = f"{d.numeric_share:.0%} of the answers read as numbers"
    lines += [
        f"    # exact, numeric or math ({share}; numeric from 90%).",
        f"    checker: {d.checker}",
        f"    # {d.held_out_fraction:.0%} of the {d.rows} distinct questions each: {d.splits['validation']} for "
        f"validation (watched during training), {d.splits['test']} for test (reported).",
        f"    validation_fraction: {d.held_out_fraction}",
        f"    test_fraction: {d.held_out_fraction}",
        "rewards:",
        "  - {name: format, weight: 0.5}  # <think>...</think><answer>...</answer> and nothing else",
        "  - {name: correctness, weight: 1.0}",
    ]
    if d.solutions and d.worked_steps >= WORKED_SHARE:
        lines += [
            f"  # {d.worked_steps:.0%} of the solutions are `x op y = z` steps, so per-step credit is available:",
            "  # each step the thought writes right pays a share, a false equation pays 0. Uncomment to try it.",
            "  # - {name: steps, weight: 0.5}",
        ]
    if d.solutions:
        lines += [
            "cold_start:",
            "  batch_size: 16",
            "  micro_batch: 4  # 4 demonstrations per pass, 16 per step: a quarter of the logits in memory",
            "  learning_rate: 5e-4",
        ]
    lines.append("stages:")
    if d.solutions:
        lines += [
            f"  # A supervised warm-up on the worked solutions of the {d.splits['train']} training questions: the",
            "  # untouched model never writes the tags, and GRPO learns nothing while every reward is equal.",
            f"  - {{name: warmup, kind: sft, steps: {d.sft_steps}, examples: {d.sft_examples}}}",
        ]
    else:
        lines += [
            "  # No worked solutions, so no warm-up: the untouched embedded model rarely writes the tags, and GRPO",
            "  # alone may learn little. Add a column of solutions (task.params.solution_column) and an sft stage,",
            "  # or set task.params.demonstrate_answers: true and add {name: warmup, kind: sft, steps: 30}.",
        ]
    lines += [
        "  # GRPO: 8 completions per prompt; the 4 whose rewards vary most train (dynamic_sampling.downsample_to).",
        f"  - {{name: grpo, kind: grpo, steps: {d.grpo_steps}}}",
        "dynamic_sampling:",
        "  enabled: true",
        "  downsample_to: 4",
        "  max_extra: 1.0",
        "  retry: 1  # a prompt whose group was all wrong is drawn once more within its step",
    ]
    if d.solutions:
        lines.append("  guide: true  # ... with its worked solution in one row of that group")
    lines += [
        "grpo:",
        "  learning_rate: 3e-4",
        "  lr_scheduler_type: cosine",
        "  warmup_steps: 2",
        "  num_generations: 8",
        "  per_device_train_batch_size: 64  # completions per step: 8 prompts x 8",
        f"  max_completion_length: {d.max_tokens}",
        "  temperature: 1.0",
        "  beta: 0.0  # no reference-model pass",
        "  activation_checkpointing: false",
        "  logging_steps: 1",
        "train_pass:",
        "  micro_batch_rows: 8  # the loss 8 rows at a time: the same gradient in less memory",
        "  return_freed_memory: true",
        "eval:",
        f"  n: {eval_n}  # test questions, greedy: the accuracy every stage reports",
        f"  max_new_tokens: {d.max_tokens}",
        f"  batch_size: {min(50, eval_n)}",
        f"  every: {20 if d.grpo_steps > 20 else 0}  # validation accuracy every N GRPO steps (0: off)",
        f"  every_n: {watched}",
    ]
    return "\n".join(lines) + "\n"


def write_recipe(d: Draft, out: Path, force: bool = False) -> Path:
    """Write the drafted recipe to `out` (never over a file unless `force`) and load it back: a recipe that
    would not load is removed and its error raised."""
    if out.exists() and not force:
        raise RecipeError(f"{out} exists; choose another name with --out, or pass --force to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(d, out), encoding="utf-8")
    try:
        load_recipe(out)
    except RecipeError:
        out.unlink()
        raise
    return out
