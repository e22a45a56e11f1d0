"""Synthetic arithmetic: `a + b * c` and `a * b + c` with integers 1..10, as in the reference run.

Problems are split by their computation (`computation`): `3 + 4 * 5`, `5 * 4 + 3` and `3 + 5 * 4` are one
problem and fall in one split.

>>> task = ArithmeticTask(ArithmeticConfig())
>>> row = task.example("train", 0)
>>> row["question"]  # doctest: +SKIP
'What is 7 + 2 * 9?'
>>> task.score("<think>2 * 9 = 18. 7 + 18 = 25.</think><answer>25</answer>", row)  # doctest: +SKIP
1.0

The ground truth is computed here from the generated operands, never by evaluating text.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from grpokit.tasks.base import Example, Task, check_fractions, check_split, split_of
from grpokit.tasks.parsing import extract_answer
from grpokit.tasks.registry import register_task

OPERATORS = ("+", "-", "*")
SPLIT_SUMS = ("none", "carries", "all", "any", "columns", "every_column")
_MAX_DRAWS = 1000  # a split of a tiny problem space may be empty: fail instead of spinning
_INTEGER = re.compile(r"-?[0-9]{1,10000}")  # ASCII digits only (int() also reads "３"), any length a right answer has


@dataclass
class ArithmeticConfig:
    operands: int = 3
    min_value: int = 1
    max_value: int = 10
    operators: list[str] = field(default_factory=lambda: ["+", "*"])
    # The range of a term that is added or subtracted alone (the `a` of `a + b * c`; not a factor of a
    # product); None: min_value / max_value. An evaluation suite can shift it to numbers training never saw.
    addend_min: int | None = None
    addend_max: int | None = None
    # Each problem uses every operator at least once (3 operands, + and *: exactly a+b*c or a*b+c).
    all_operators: bool = True
    # How worked steps write a sum of a number >= 10 and a digit: "none" in one step (`54 + 6 = 60.`),
    # "carries" in two when the units carry (`4 + 6 = 10. 50 + 10 = 60.`: the units, then the tens), "all"
    # in two always (`4 + 3 = 7. 50 + 7 = 57.` too), "any" in two whenever the larger term is >= 10, whatever
    # the other (`4 + 10 = 14. 50 + 14 = 64.` too). "columns" writes any sum of non-negative terms, one of
    # them >= 10, as column addition from the units (`7 + 4 = 11. 4 + 2 + 1 = 7. 47 + 24 = 71.`, see
    # `column_sum`): a procedure that holds for any number of digits, not a template for two-digit terms.
    # "every_column" writes every sum of non-negative terms that way with no column left out: each column is
    # three terms, the missing digit as 0 and the carry as `+ 0` or `+ 1`, and a carry out of the last
    # column is a column of its own (`9 + 0 + 0 = 9. 8 + 2 + 0 = 10. 0 + 0 + 1 = 1. 89 + 20 = 109.`): one
    # rule with no case to learn. The demonstrations and the `steps` reward follow it.
    split_sums: str = "none"
    # Shares of the computations held out: `validation` (watched during training) and `test` (reported).
    validation_fraction: float = 0.1
    test_fraction: float = 0.2
    seed: int = 0

    def validate(self) -> None:
        if not 2 <= self.operands <= 8:
            raise ValueError(f"operands={self.operands}; use 2..8")
        if self.min_value > self.max_value:
            raise ValueError(f"min_value={self.min_value} > max_value={self.max_value}")
        lo, hi = self.addend_range
        if lo > hi:
            raise ValueError(f"addend_min={lo} > addend_max={hi}")
        if max(abs(self.min_value), abs(self.max_value), abs(lo), abs(hi)) > 10**6:
            raise ValueError("operand range must stay within ±1,000,000")
        bad = [op for op in self.operators if op not in OPERATORS]
        if bad or not self.operators:
            raise ValueError(f"operators={self.operators}; choose from {list(OPERATORS)}")
        if not isinstance(self.all_operators, bool):
            raise ValueError(f"all_operators={self.all_operators!r}; use true or false")
        if self.all_operators and len(set(self.operators)) > self.operands - 1:
            raise ValueError(f"all_operators needs operands-1 >= {len(set(self.operators))} distinct operators")
        if self.split_sums not in SPLIT_SUMS:
            raise ValueError(f"split_sums={self.split_sums!r}; use one of {', '.join(SPLIT_SUMS)}")
        check_fractions(self.validation_fraction, self.test_fraction)

    @property
    def addend_range(self) -> tuple[int, int]:
        """The range of terms that stand alone in a sum (not factors of a product)."""
        lo = self.min_value if self.addend_min is None else self.addend_min
        hi = self.max_value if self.addend_max is None else self.addend_max
        return lo, hi


@register_task
class ArithmeticTask(Task):
    name = "arithmetic"
    config_class = ArithmeticConfig
    worked_steps = True

    def example(self, split: str, index: int) -> Example:
        check_split(split)
        cfg = self.config
        # Split streams are seeded apart; rejection keeps each draw inside its own partition.
        rng = random.Random(f"{cfg.seed}:{split}:{index}")
        for _ in range(_MAX_DRAWS):
            ops = [rng.choice(cfg.operators) for _ in range(cfg.operands - 1)]
            if cfg.all_operators and set(ops) != set(cfg.operators):
                continue
            ranges = [(cfg.min_value, cfg.max_value) if factor else cfg.addend_range for factor in _factors(ops)]
            nums = [rng.randint(lo, hi) for lo, hi in ranges]
            if self.split(nums, ops) == split:
                break
        else:
            raise ValueError(
                f"no {split} problem found in {_MAX_DRAWS} draws: the problem space of {cfg} is too "
                "small to split; widen min_value..max_value or add operands"
            )
        expression = _render(nums, ops)
        steps, value = solve(nums, ops, split_sums=cfg.split_sums)
        return {
            "question": f"What is {expression}?",
            "expression": expression,
            "computation": computation(nums, ops),
            "answer": value,
            "steps": steps,
        }

    def split(self, nums: list[int], ops: list[str]) -> str:
        """The split of the problem `nums` joined by `ops`: that of its computation, whatever its order."""
        return split_of(computation(nums, ops), self.config.validation_fraction, self.config.test_fraction)

    def key(self, example: Example) -> str:
        return example["computation"]

    def score(self, completion: str, example: Example) -> float:
        answer = extract_answer(completion, tags=self.tags)
        if answer is None or not _INTEGER.fullmatch(answer):
            return 0.0
        # Compared as text: int() refuses strings past 4,300 digits, and a right answer may be long.
        sign, digits = ("-", answer[1:]) if answer.startswith("-") else ("", answer)
        digits = digits.lstrip("0") or "0"
        return 1.0 if (sign if digits != "0" else "") + digits == str(int(example["answer"])) else 0.0

    def adversarial(self, example: Example) -> list[tuple[str, str]]:
        answer = example["answer"]
        return [
            ("the expression instead of its value", f"<think>x</think><answer>{example['expression']}</answer>"),
            ("a decorated number", f"<think>x</think><answer>= {answer}</answer>"),
            ("a float", f"<think>x</think><answer>{answer}.0</answer>"),
            (
                "true equations listed until one is a step",
                f"<think>{_listed(example)}</think><answer>{answer + 1}</answer>",
            ),
        ]

    def demonstration(self, example: Example) -> str:
        t, steps = self.tags, " ".join(example["steps"])
        return f"{t.think_open}{steps}{t.think_close}{t.answer_open}{example['answer']}{t.answer_close}"


def computation(nums: list[int], ops: list[str]) -> str:
    """The problem's canonical form: its terms (products of factors) with their signs, each term's factors
    and the terms sorted, so commuted and reordered forms of one computation are equal.

    >>> computation([3, 4, 5], ["+", "*"]) == computation([5, 4, 3], ["*", "+"]) == computation([3, 5, 4], ["+", "*"])
    True
    >>> computation([3, 4, 5], ["-", "*"]) == computation([-4, 5, 3], ["*", "+"])
    True
    >>> computation([3, 4, 5], ["+", "*"]) == computation([4, 3, 5], ["+", "*"])
    False
    """
    terms: list[tuple[int, list[int]]] = [(1, [nums[0]])]
    for op, num in zip(ops, nums[1:], strict=True):
        if op == "*":
            terms[-1][1].append(num)
        else:
            terms.append((1 if op == "+" else -1, [num]))
    canonical = []
    for sign, factors in terms:
        for factor in factors:
            sign = -sign if factor < 0 else sign
        canonical.append(("+" if sign > 0 else "-") + "*".join(str(f) for f in sorted(abs(f) for f in factors)))
    return " ".join(sorted(canonical))


def _factors(ops: list[str]) -> list[bool]:
    """For each operand of `ops`, whether it is a factor of a product (a neighbouring `*`)."""
    padded = ["+", *ops, "+"]
    return [padded[i] == "*" or padded[i + 1] == "*" for i in range(len(ops) + 1)]


def solve(nums: list[int], ops: list[str], split_sums: str = "none") -> tuple[list[str], int]:
    """Evaluate with the usual precedence, recording each step as `x op y = z.` (a column of column
    addition as `x + y + 1 = z.`).

    `split_sums` writes a sum of a number >= 10 and a digit as two steps (see `split_sum`): "carries"
    when its units carry, "all" always; "columns" writes a sum with a term >= 10 column by column (see
    `column_sum`); the value is the same.

    >>> solve([6, 9, 6], ["*", "+"], split_sums="carries")
    (['6 * 9 = 54.', '4 + 6 = 10.', '50 + 10 = 60.'], 60)
    >>> solve([47, 3, 8], ["+", "*"], split_sums="columns")
    (['3 * 8 = 24.', '7 + 4 = 11.', '4 + 2 + 1 = 7.', '47 + 24 = 71.'], 71)
    """
    nums, ops, steps = list(nums), list(ops), []
    while "*" in ops:  # multiplications first, left to right
        i = ops.index("*")
        product = nums[i] * nums[i + 1]
        steps.append(f"{_term(nums[i])} * {_term(nums[i + 1])} = {product}.")
        nums[i : i + 2] = [product]
        del ops[i]
    total = nums[0]
    for op, num in zip(ops, nums[1:], strict=True):
        result = total + num if op == "+" else total - num
        split = split_sum(total, num, split_sums) if op == "+" else None
        steps += split or [f"{total} {op} {_term(num)} = {result}."]
        total = result
    return steps, total


def split_sum(x: int, y: int, mode: str = "all") -> list[str] | None:
    """`x + y` as the units' sum, then the tens plus it, when one term is a digit and the other is not
    (`mode` "all"), only when the units carry ("carries"), whenever the larger term is >= 10 ("any": the
    larger term's units plus the other, then its tens plus that), or never ("none": None, one step). A
    negative term is never split. "columns" is `column_sum`.

    >>> split_sum(54, 7)
    ['4 + 7 = 11.', '50 + 11 = 61.']
    >>> split_sum(8, 28)  # either order
    ['8 + 8 = 16.', '20 + 16 = 36.']
    >>> split_sum(54, 3)
    ['4 + 3 = 7.', '50 + 7 = 57.']
    >>> split_sum(54, 3, "carries") is None  # no carry: one step
    True
    >>> split_sum(10, 54, "any")  # the other term need not be a digit
    ['4 + 10 = 14.', '50 + 14 = 64.']
    """
    if mode in ("columns", "every_column"):
        return column_sum(x, y, every=mode == "every_column")
    big, other = max(x, y), min(x, y)
    splits = {
        "any": big >= 10 and other >= 0,
        "all": 0 <= other < 10 <= big,
        "carries": 0 <= other < 10 <= big and big % 10 + other >= 10,
    }
    if not splits.get(mode, False):  # "none": one step
        return None
    units, tens = big % 10, big - big % 10
    return [f"{units} + {other} = {units + other}.", f"{tens} + {units + other} = {big + other}."]


def column_sum(x: int, y: int, every: bool = False) -> list[str] | None:
    """`x + y` as column addition from the units, then the whole sum; None (one step) when a term is
    negative or, unless `every`, both are single digits.

    Each column that needs work is one true equation: x's digit, then y's, then the carry as `+ 1`. A
    column where one term has run out of digits writes the other's digit plus the carry (`2 + 1 = 3.`),
    and nothing when there is no carry (a lone digit is copied down, not computed); a carry out of the
    last column is the sum's leading 1, not a step. The same rule holds for any number of digits.

    `every` writes every column as three terms, x's digit (0 once x has run out), y's, and the carry in
    (`+ 0` or `+ 1`), and a carry out of the last column as a column `0 + 0 + 1 = 1.`: the sum's digits are
    then the last digit of each column's result, read from the last column back, with no case to tell.

    >>> column_sum(47, 24)
    ['7 + 4 = 11.', '4 + 2 + 1 = 7.', '47 + 24 = 71.']
    >>> column_sum(7, 24)  # the tens: y's digit and the carry
    ['7 + 4 = 11.', '2 + 1 = 3.', '7 + 24 = 31.']
    >>> column_sum(100, 47)  # the hundreds: a lone digit, no carry: not written
    ['0 + 7 = 7.', '0 + 4 = 4.', '100 + 47 = 147.']
    >>> column_sum(3, 4) is None
    True
    >>> column_sum(7, 24, every=True)
    ['7 + 4 + 0 = 11.', '0 + 2 + 1 = 3.', '7 + 24 = 31.']
    >>> column_sum(89, 20, every=True)
    ['9 + 0 + 0 = 9.', '8 + 2 + 0 = 10.', '0 + 0 + 1 = 1.', '89 + 20 = 109.']
    >>> column_sum(3, 4, every=True)
    ['3 + 4 + 0 = 7.', '3 + 4 = 7.']
    """
    if x < 0 or y < 0 or (max(x, y) < 10 and not every):
        return None
    xs, ys = str(x)[::-1], str(y)[::-1]  # units first
    steps, carry = [], 0
    for k in range(max(len(xs), len(ys))):
        if every:
            terms = [int(digits[k]) if k < len(digits) else 0 for digits in (xs, ys)] + [carry]
        else:
            terms = [int(digits[k]) for digits in (xs, ys) if k < len(digits)] + [1] * carry
        if every or len(terms) > 1:
            steps.append(f"{' + '.join(map(str, terms))} = {sum(terms)}.")
        carry = sum(terms) // 10
    if every and carry:
        steps.append(f"0 + 0 + {carry} = {carry}.")
    return [*steps, f"{x} + {y} = {x + y}."]


def _listed(example: Example) -> str:
    """`x op p = ...` for p in 0..100, x and op those of the last worked step: the step is among them."""
    x, op = example["steps"][-1].split(" ")[:2]
    first = int(x.strip("()"))
    values = [first + p if op == "+" else first - p if op == "-" else first * p for p in range(101)]
    return " ".join(f"{x} {op} {p} = {value}." for p, value in enumerate(values))


def _render(nums: list[int], ops: list[str]) -> str:
    parts = [_term(nums[0])]
    for op, num in zip(ops, nums[1:], strict=True):
        parts += [op, _term(num)]
    return " ".join(parts)


def _term(n: int) -> str:
    return f"({n})" if n < 0 else str(n)
