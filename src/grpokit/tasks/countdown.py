"""Countdown, as in the Mini-R1 run: reach the target with an equation using each given number once.

>>> task = CountdownTask(CountdownConfig())
>>> row = CountdownTask.make_row([25, 5, 75, 2], 20)
>>> task.score("<think>50 / 5 = 10, 10 * 2 = 20</think><answer>(75 - 25) / 5 * 2</answer>", row)
1.0
>>> task.score("<think>...</think><answer>(75 - 25) / 5 * 2 * 2 / 2</answer>", row)  # 2 used twice
0.0

Instances are generated solvable, like the public Countdown-Tasks-3to4 data (3-4 numbers in 1..99,
target 1..100); `load_rows` reads that data set's schema (`nums`, `target`) from a hub id or file.
The answer is parsed by `grpokit.sandbox.expressions` (an AST whitelist, exact division), never `eval`.
"""

from __future__ import annotations

import ast
import operator
import random
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from itertools import permutations
from pathlib import Path
from typing import Any

from grpokit.sandbox.expressions import evaluate_expression
from grpokit.tasks.base import Example, Task, check_fractions, check_split, partition, split_of
from grpokit.tasks.data import is_local_file, load_split, read_file, require_columns
from grpokit.tasks.parsing import THINK_TAGS, extract_answer, retag
from grpokit.tasks.registry import register_task

APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
_OPS = tuple(APPLY)
_MAX_DRAWS = 2000
DEMONSTRATIONS = ("solution", "worked", "tries", "backtrack", "search")
BACKTRACK_MOST = 20  # steps a backtracking thought may write (3 numbers: 4 first steps x 4 tries, at most)


def problem_key(nums: list[int], target: int) -> str:
    """A countdown problem's canonical form: its numbers as a multiset, and its target."""
    return f"{sorted(nums)}->{target}"


@dataclass
class CountdownConfig:
    min_numbers: int = 3
    max_numbers: int = 4
    min_value: int = 1
    max_value: int = 99
    min_target: int = 1
    max_target: int = 100
    # Shares of the problems (a multiset of numbers and a target) held out for validation and test.
    validation_fraction: float = 0.05
    test_fraction: float = 0.1
    seed: int = 0
    # Instead of generating: a hub id (Jiayi-Pan/Countdown-Tasks-3to4) or a .jsonl/.csv/.parquet file
    # with `nums` and `target`; its train split is partitioned into train/validation/test by a stable hash.
    source: str | None = None
    limit: int | None = None
    # The sft stage's thought: "solution" writes the solution's equation (`12 * 2 + 7 = 31`); "worked"
    # folds the numbers in one step at a time, larger number first, every step a whole number >= 0
    # (`12 * 2 = 24, 24 + 7 = 31.`; the question's order and + - * / preferred, `simplest_chain`), so
    # every value the policy writes is one it computed and only the last step must land; "tries" is
    # "worked" with the last step found by trying + - * / in turn on the same two values, every try
    # written (`15 + 5 = 20, 20 + 8 = 28, 20 - 8 = 12.` for 12: `last_step_tries`); "backtrack" also
    # tries the earlier steps: in the simplest chain's order, every step from + to /, each first step
    # followed by its tries until one lands (`15 + 5 = 20, 20 + 8 = 28, ..., 15 - 5 = 10, 10 + 8 = 18.`:
    # `backtrack_steps`; past 20 steps, as "tries"); "search" writes up to
    # `search_attempts` wrong tries, each worked step by step with its miss, then the generator's
    # solution worked the same way (Stream of Search, Gandhi et al. 2024): a thought that checks its tries.
    demonstration: str = "solution"
    search_attempts: int = 2
    # Which chain "worked" and "tries" write: "simplest" (`simplest_chain`, one way for every problem alike)
    # or "any": one of the problem's landing chains (`landing_chains`), drawn per problem with a fixed
    # seed, so that the demonstrations show several first steps and the policy samples several.
    chain: str = "simplest"

    def validate(self) -> None:
        if self.demonstration not in DEMONSTRATIONS:
            raise ValueError(f"demonstration={self.demonstration!r}; use one of {', '.join(DEMONSTRATIONS)}")
        if self.chain not in ("simplest", "any"):
            raise ValueError(f"chain={self.chain!r}; use simplest or any")
        if self.chain == "any" and self.demonstration not in ("worked", "tries"):
            raise ValueError(f"chain='any' with demonstration={self.demonstration!r}; it applies to worked and tries")
        if not 0 <= self.search_attempts <= 5:
            raise ValueError(f"search_attempts={self.search_attempts}; use 0..5 wrong tries before the solution")
        if not 2 <= self.min_numbers <= self.max_numbers <= 6:
            raise ValueError(f"numbers {self.min_numbers}..{self.max_numbers}; use 2 <= min <= max <= 6")
        if not 1 <= self.min_value <= self.max_value <= 10_000:
            raise ValueError(f"values {self.min_value}..{self.max_value}; use 1 <= min <= max <= 10000")
        if not 1 <= self.min_target <= self.max_target:
            raise ValueError(f"targets {self.min_target}..{self.max_target}; use 1 <= min <= max")
        check_fractions(self.validation_fraction, self.test_fraction)


@register_task
class CountdownTask(Task):
    name = "countdown"
    config_class = CountdownConfig

    def __init__(self, config: CountdownConfig) -> None:
        super().__init__(config)
        self.loaded: dict[str, list[Example]] | None = None
        if config.source and is_local_file(config.source):
            self.load()  # a local file is cheap to read: its errors show when the recipe loads

    def load(self) -> dict[str, list[Example]]:
        """Rows of `source`, read once (a hub id downloads on first use, not when a recipe validates)."""
        if self.loaded is None:
            config = self.config
            records = (
                read_file(Path(config.source)) if is_local_file(config.source) else load_split(config.source, "train")
            )
            records = records[: config.limit]
            for where, row in records:
                require_columns(
                    f"{config.source} {where}", row, ("nums", "target"), "Countdown data needs nums and target"
                )
            examples = load_rows([row for _, row in records])
            loaded = partition(examples, self.key, config.validation_fraction, config.test_fraction)
            for split, rows in loaded.items():
                if not rows:
                    raise ValueError(
                        f"{config.source}: the {split} split is empty; add rows or change {split}_fraction"
                    )
            self.loaded = loaded
        return self.loaded

    def example(self, split: str, index: int) -> Example:
        row = self._example(split, index)
        # The question names the answer tag; rows are written (and loaded rows cached) in the default tags.
        return row if self.tags == THINK_TAGS else {**row, "question": retag(row["question"], self.tags)}

    def _example(self, split: str, index: int) -> Example:
        check_split(split)
        if self.config.source:
            rows = self.load()[split]
            return rows[index % len(rows)]
        cfg = self.config
        rng = random.Random(f"{cfg.seed}:{split}:{index}")
        for _ in range(_MAX_DRAWS):
            nums = [
                rng.randint(cfg.min_value, cfg.max_value) for _ in range(rng.randint(cfg.min_numbers, cfg.max_numbers))
            ]
            solution = _random_solution(nums, rng)
            if solution is None:
                continue
            expression, value = solution
            if value.denominator != 1 or not cfg.min_target <= value <= cfg.max_target:
                continue
            if split_of(problem_key(nums, int(value)), cfg.validation_fraction, cfg.test_fraction) == split:
                return self.make_row(nums, int(value), expression)
        raise ValueError(f"no solvable {split} countdown instance in {_MAX_DRAWS} draws for {cfg}; widen the ranges")

    def key(self, example: Example) -> str:
        return problem_key(example["nums"], example["target"])

    @staticmethod
    def make_row(nums: list[int], target: int, solution: str | None = None) -> Example:
        question = (
            f"Using the numbers {nums}, create an equation that equals {target}. Use + - * / and each "
            "number exactly once. Write only the equation inside <answer> </answer>, e.g. <answer>(1 + 2) / 3</answer>."
        )
        return {
            "question": question,
            "nums": list(nums),
            "target": target,
            "answer": target,
            "solution": solution or "",
        }

    def score(self, completion: str, example: Example) -> float:
        return 1.0 if self.value(completion, example) == Fraction(int(example["target"])) else 0.0

    def value(self, completion: str, example: Example) -> Fraction | None:
        """The value of the answer's equation if it uses each given number exactly once, else None."""
        answer = extract_answer(completion, tags=self.tags)
        if answer is None:
            return None
        # "= 20" at the end is a common, harmless habit; anything else must be the bare expression.
        expression, equals, claimed = answer.partition("=")
        if equals and claimed.strip() != str(example["target"]):
            return None
        evaluated = evaluate_expression(expression)
        if evaluated is None or Counter(evaluated.numbers) != Counter(int(n) for n in example["nums"]):
            return None
        if equals and evaluated.value != int(example["target"]):
            return None  # a false claim to reach the target
        return evaluated.value

    def adversarial(self, example: Example) -> list[tuple[str, str]]:
        target, first = example["target"], example["nums"][0]
        solution = example.get("solution") or " + ".join(str(n) for n in example["nums"])
        return [
            ("the target echoed as the equation", f"<think>x</think><answer>{target}</answer>"),
            ("the target echoed after '='", f"<think>x</think><answer>{target} = {target}</answer>"),
            ("a number used twice", f"<think>x</think><answer>{solution} + {first} - {first}</answer>"),
            ("an unlisted number", f"<think>x</think><answer>{solution} + 0</answer>"),
            ("a number left out", f"<think>x</think><answer>{target} * 1</answer>"),
            ("a huge power", f"<think>x</think><answer>{first}**{first}**{first}</answer>"),
        ]

    def demonstration(self, example: Example) -> str | None:
        """The sft stage's completion for a generated row (loaded rows have no solution: None).

        >>> row = CountdownTask.make_row([5, 15, 8], 12, "(15 - 8) + 5")
        >>> print(CountdownTask(CountdownConfig()).demonstration(row))
        <think>(15 - 8) + 5 = 12</think><answer>(15 - 8) + 5</answer>
        >>> search = CountdownTask(CountdownConfig(demonstration="search"))
        >>> print(search.demonstration(row))  # doctest: +NORMALIZE_WHITESPACE
        <think>15 * 8 = 120, 120 / 5 = 24, not 12. 5 * 15 = 75, 8 * 75 = 600, not 12.
        15 - 8 = 7, 7 + 5 = 12.</think><answer>(15 - 8) + 5</answer>
        """
        if not example.get("solution"):
            return None
        t, solution, target = self.tags, example["solution"], int(example["target"])
        if self.config.demonstration == "search":
            tries = _wrong_tries(example["nums"], target, self.config.search_attempts)
            worked = ", ".join(_worked(solution))
            thought = " ".join([*(f"{', '.join(steps)}, not {target}." for steps in tries), f"{worked}."])
        elif self.config.demonstration in ("worked", "tries", "backtrack"):
            nums = example["nums"]
            if self.config.chain == "any":
                chains = landing_chains(nums, target)
                chain = random.Random(f"chain:{nums}:{target}").choice(chains) if chains else None
            else:
                chain = simplest_chain(nums, target)
            if chain is not None:  # else (4+ numbers joined in pairs only) the generator's solution, worked
                solution, steps = chain
                kind = self.config.demonstration
                searched = backtrack_steps(nums, target) if kind == "backtrack" else None
                if searched is not None:
                    steps = searched
                elif kind != "worked":
                    steps = [*steps[:-1], *last_step_tries(steps[-1])]
            else:
                steps = _worked(solution)
            thought = f"{', '.join(steps)}."
        else:
            thought = f"{solution} = {target}"
        return f"{t.think_open}{thought}{t.think_close}{t.answer_open}{solution}{t.answer_close}"


def load_rows(rows: list[dict[str, Any]]) -> list[Example]:
    """Rows in the Countdown-Tasks-3to4 schema (`nums`, `target`) as task examples."""
    out = []
    for i, row in enumerate(rows):
        if "nums" not in row or "target" not in row:
            raise ValueError(f"countdown row {i} lacks 'nums' or 'target' (has {sorted(row)})")
        out.append(CountdownTask.make_row([int(n) for n in row["nums"]], int(row["target"])))
    return out


def _random_solution(nums: list[int], rng: random.Random) -> tuple[str, Fraction] | None:
    """Combine the numbers in a random order with random operators; exact division only."""
    combined = _combine(nums, rng)
    return None if combined is None else combined[:2]


def _combine(nums: list[int], rng: random.Random) -> tuple[str, Fraction, list[str]] | None:
    """A random combination of all the numbers: its expression, its value and its steps (`12 * 2 = 24`)."""
    items: list[tuple[str, Fraction]] = [(str(n), Fraction(n)) for n in nums]
    rng.shuffle(items)
    steps = []
    while len(items) > 1:
        i, j = rng.sample(range(len(items)), 2)
        (a_text, a), (b_text, b) = items[i], items[j]
        op = rng.choice(_OPS)
        if op == "/" and (b == 0 or (a / b).denominator != 1):
            return None
        value = APPLY[op](a, b)
        steps.append(f"{a} {op} {b} = {value}")
        combined = (f"({a_text} {op} {b_text})", value)
        items = [x for k, x in enumerate(items) if k not in (i, j)] + [combined]
    text, value = items[0]
    return (text[1:-1] if text.startswith("(") else text), value, steps


def _wrong_tries(nums: list[int], target: int, most: int) -> list[list[str]]:
    """0..`most` distinct combinations that miss `target` (their steps), the same for the same problem."""
    rng = random.Random(f"search:{sorted(nums)}:{target}")
    wanted, tries, seen = rng.randint(0, most), [], set()
    for _ in range(50 * most):
        if len(tries) == wanted:
            break
        combined = _combine(nums, rng)
        if combined is None or combined[1] == target or combined[1].denominator != 1 or combined[0] in seen:
            continue
        seen.add(combined[0])
        tries.append(combined[2])
    return tries


def simplest_chain(nums: list[int], target: int) -> tuple[str, list[str]] | None:
    """The simplest solution that folds the numbers in one at a time: its expression and its steps.

    Each step combines the running value with the next number, the larger operand written first, and
    must give a whole number >= 0. Simplest: the numbers in the question's order if they can be, and
    each operator the first, in the order + - * /, from which the rest can reach the target: a policy
    that adds the first two numbers unless it cannot, then looks for the step that lands. None when no
    chain reaches the target (4+ numbers may need two pairs).

    >>> simplest_chain([20, 1, 5], 16)
    ('(20 + 1) - 5', ['20 + 1 = 21', '21 - 5 = 16'])
    >>> simplest_chain([7, 17, 4], 11)
    ('(7 * 4) - 17', ['7 * 4 = 28', '28 - 17 = 11'])
    """
    chains = landing_chains(nums, target)
    return chains[0] if chains else None


def landing_chains(nums: list[int], target: int) -> list[tuple[str, list[str]]]:
    """Every chain (as `simplest_chain` folds them) that reaches the target, simplest first, each once.

    >>> for chain in landing_chains([6, 2, 7], 11):
    ...     print(chain)
    ('7 + (6 - 2)', ['6 - 2 = 4', '7 + 4 = 11'])
    ('(7 + 6) - 2', ['7 + 6 = 13', '13 - 2 = 11'])
    ('6 + (7 - 2)', ['7 - 2 = 5', '6 + 5 = 11'])
    """
    found: dict[tuple[str, ...], tuple[tuple, str]] = {}

    def fold(text: str, value: int, rest: list[int], order: tuple, ops: tuple, steps: list[str]) -> None:
        if not rest:
            key = (order, [_OPS.index(op) for op in ops])
            if value == target and (tuple(steps) not in found or key < found[tuple(steps)][0]):
                found[tuple(steps)] = (key, text)
            return
        for i in rest:
            n = nums[i]
            running, number = (value, text), (n, str(n))
            (high, left), (low, right) = (running, number) if value >= n else (number, running)
            for op in _OPS:
                result = _whole_step(high, op, low)
                if result is None:
                    continue
                step = f"{high} {op} {low} = {result}"
                others = [j for j in rest if j != i]
                fold(f"({left} {op} {right})", result, others, (*order, i), (*ops, op), [*steps, step])

    if len(nums) > 4:
        return []  # 5! x 4^4 chains and more: the generator's solution serves
    for first in range(len(nums)):
        fold(str(nums[first]), nums[first], [j for j in range(len(nums)) if j != first], (first,), (), [])
    ranked = sorted(found.items(), key=lambda item: item[1][0])
    return [((text[1:-1] if text.startswith("(") else text), list(steps)) for steps, (_, text) in ranked]


def backtrack_steps(nums: list[int], target: int, most: int = BACKTRACK_MOST) -> list[str] | None:
    """The steps a depth-first search writes before it lands on `simplest_chain`'s solution.

    The numbers are folded in the simplest chain's order; at each step the operators are tried in the
    order + - * / (the larger value first, a division that is not whole skipped), and a step that is not
    the last is followed by the search below it. Every step is written, the search stops at the first
    that reaches the target: its path is the simplest chain. None when no order lands or the search
    would write more than `most` steps.

    >>> backtrack_steps([6, 2, 7], 11)
    ['6 + 2 = 8', '8 + 7 = 15', '8 - 7 = 1', '8 * 7 = 56', '6 - 2 = 4', '7 + 4 = 11']
    """
    written: list[str] = []

    def fold(value: int, rest: list[int]) -> bool:
        n, others = rest[0], rest[1:]
        high, low = max(value, n), min(value, n)
        for op in _OPS:
            result = _whole_step(high, op, low)
            if result is None:
                continue
            written.append(f"{high} {op} {low} = {result}")
            if (result == target) if not others else fold(result, others):
                return True
        return False

    for order in permutations(range(len(nums))):  # simplest_chain's preference: the question's order first
        written.clear()
        if fold(nums[order[0]], [nums[i] for i in order[1:]]):
            return written if len(written) <= most else None
    return None


def last_step_tries(step: str) -> list[str]:
    """A chain's last step preceded by the tries of the operators before its own, in the order + - * /,
    on the same two values (larger first; a division that is not whole is skipped).

    >>> last_step_tries("24 - 7 = 17")
    ['24 + 7 = 31', '24 - 7 = 17']
    >>> last_step_tries("12 / 4 = 3")
    ['12 + 4 = 16', '12 - 4 = 8', '12 * 4 = 48', '12 / 4 = 3']
    """
    high, op, low, _, _ = step.split(" ")
    tried = ((other, _whole_step(int(high), other, int(low))) for other in _OPS[: _OPS.index(op)])
    return [*(f"{high} {other} {low} = {result}" for other, result in tried if result is not None), step]


def _whole_step(high: int, op: str, low: int) -> int | None:
    """`high op low` (high >= low >= 0), or None for a division that is not whole."""
    if op == "/" and (low == 0 or high % low):
        return None
    return int(APPLY[op](Fraction(high), Fraction(low)))


def _worked(expression: str) -> list[str]:
    """The steps of a fully parenthesized solution this module wrote (`(12 * 2) + 7`: `12 * 2 = 24`, ...).

    The text is the generator's own, never model output; it is read with the AST, not evaluated."""
    steps: list[str] = []

    def walk(node: ast.expr) -> Fraction:
        if isinstance(node, ast.Constant):
            return Fraction(node.value)
        assert isinstance(node, ast.BinOp), f"not a generated solution: {expression!r}"
        a, b = walk(node.left), walk(node.right)
        op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}[type(node.op)]
        value = APPLY[op](a, b)  # the generator never divides by 0
        steps.append(f"{a} {op} {b} = {value}")
        return value

    walk(ast.parse(expression, mode="eval").body)
    return steps
