from collections import Counter

import pytest

from grpokit.rewards import make_reward
from grpokit.tasks import build_task
from grpokit.tasks.equations import equations, step_key, sums


@pytest.fixture(scope="module")
def task():
    return build_task("arithmetic")


@pytest.fixture(scope="module")
def row(task):
    row = task.example("train", 0)
    assert len(row["steps"]) == 2  # `a + b * c` or `a * b + c`: a product, then a sum
    return row


def worked(row, *, answer=None, steps=None):
    steps = " ".join(row["steps"] if steps is None else steps)
    return f"<think>{steps}</think><answer>{row['answer'] if answer is None else answer}</answer>"


def test_each_right_step_earns_its_share(task, row):
    reward = make_reward("steps", task)
    product = row["steps"][0]
    assert reward(worked(row), row) == 1.0
    assert reward(worked(row, answer=-1), row) == 1.0  # the steps, not the answer: correctness pays for that
    assert reward(worked(row, steps=[product]), row) == 0.5
    assert reward(worked(row, steps=[]), row) == 0.0
    assert reward(f"<answer>{row['answer']}</answer>", row) == 0.0  # a bare answer shows no working


def test_commuted_operands_count_and_the_thought_only(task):
    reward = make_reward("steps", task)
    row = {"steps": ["3 * 8 = 24.", "7 + 24 = 31."], "answer": 31}
    assert reward("<think>8 × 3 = 24 and 24 + 7 = 31</think><answer>31</answer>", row) == 1.0
    # right equations after the thought (in the answer, or trailing) earn nothing
    assert reward("<think>no idea</think><answer>3 * 8 = 24. 7 + 24 = 31</answer>", row) == 0.0
    # a prefilled thought (no `<think>` in the completion) is read up to `</think>`
    assert reward("3*8=24, 7+24=31</think><answer>31</answer>", row) == 1.0
    # subtraction does not commute
    sub = {"steps": ["9 - 4 = 5."], "answer": 5}
    assert reward("<think>4 - 9 = 5</think><answer>5</answer>", sub) == 0.0


@pytest.mark.parametrize(
    ("thought", "expected"),
    [
        ("3 * 8 = 23. 3 * 8 = 24. 3 * 8 = 25. 7 + 24 = 31.", 0.0),  # listing candidates: a false one zeroes it
        ("3 * 8 = 24. 7 + 24 = 31. 1 + 1 = 3.", 0.0),
        ("1 + 1 = 2. 2 * 2 = 4. 10 - 3 = 7.", 0.0),  # true, but not this problem's steps
        ("3 8 24 7 31", 0.0),  # the numbers without equations
        ("3 * 8 = 24." + " 1 + 1 = 2." * 5000, 0.0),  # 55 KB of padding: more equations than a worked answer
    ],
)
def test_gaming_earns_nothing(task, thought, expected):
    row = {"steps": ["3 * 8 = 24.", "7 + 24 = 31."], "answer": 31}
    assert make_reward("steps", task)(f"<think>{thought}</think><answer>31</answer>", row) == expected


def test_digits_touching_an_equation_are_not_read_as_a_shorter_one(task):
    row = {"steps": ["4 * 8 = 32."], "answer": 32}
    # `34 * 8 = 272` is true and not this step; read as `4 * 8 = 272` it would zero a right thought
    assert make_reward("steps", task)("<think>34 * 8 = 272. 4 * 8 = 32.</think><answer>32</answer>", row) == 1.0


def test_a_task_without_worked_steps_is_refused():
    with pytest.raises(ValueError, match="worked steps"):
        make_reward("steps", build_task("countdown"))


@pytest.mark.parametrize("split_sums", ["none", "carries", "all", "columns", "every_column"])
def test_listing_true_equations_until_one_is_a_step_earns_nothing(split_sums):
    """Every `a + p` for p up to 100 holds the real sum step; every `u + a` holds a split sum's units step."""
    task = build_task("arithmetic", {"split_sums": split_sums})
    reward = make_reward("steps", task)
    split = (lambda n: n == 2) if split_sums == "none" else (lambda n: n >= 3)  # columns: 3 or 4 steps
    row = next(r for r in task.dataset("test", 100) if split(len(r["steps"])))
    product = int(row["steps"][0].split("=")[1].rstrip("."))
    a = row["answer"] - product
    listed = [f"{a} + {p} = {a + p}." for p in range(101)] + [f"{u} + {a} = {u + a}." for u in range(10)]
    assert reward(worked(row, steps=listed), row) == 0.0
    assert reward(worked(row, steps=row["steps"] + listed[:2]), row) == 1.0  # a few extra true equations: fine


@pytest.mark.parametrize(
    ("thought", "expected"),
    [
        ("7 + 3 * 8 = 7 + 24 = 31", 1.0),  # the problem kept whole and worked down: both steps
        ("7 + 3*8 = 7 + 24", 0.5),  # the product done in the line, the sum not written
        ("7 + 3 * 8 = 31", 0.0),  # true, but no step shown (read before as `3 * 8 = 31`, false: also 0)
        ("7 + 3 * 8 = 7 + 25 = 32", 0.0),  # a line whose sides differ is a false equation
        ("7 + 3 * 8 = 10 * 8 = 80", 0.0),  # the sum done first: the sides differ
        ("7 + 3 * 8 = 7 + 24. 7 + 24 = 31.", 1.0),
    ],
)
def test_a_line_that_works_the_problem_down_is_read_as_its_steps(task, thought, expected):
    """`7 + 3 * 8 = 7 + 24` holds the step `3 * 8 = 24`; read link by link it held `3 * 8 = 7`, a false
    equation that zeroed the untouched model's best thoughts (`4 + 1 * 5 = 4 + 5 = 9` scored 0)."""
    row = {"steps": ["3 * 8 = 24.", "7 + 24 = 31."], "answer": 31}
    assert make_reward("steps", task)(f"<think>{thought}</think><answer>31</answer>", row) == expected


@pytest.mark.parametrize(
    ("thought", "expected"),
    [
        ("3 * 8 = 24. 7 + 24 = 31.", 1.0),
        ("8 x 3 = 25. 7 + 25 = 32.", 0.5),  # the product set out (wrong); the sum of a wrong product is not a step
        ("7 + 3 * 8 = 7 + 24 = 30", 1.0),  # both set out in a worked line, the last result wrong
        ("7 + 3 * 8 = 31", 0.0),  # a guess: nothing set out
        ("I will multiply 3 and 8 first.", 0.0),  # words are not an equation
        ("3 * 8 = 1. 3 * 8 = 2. 3 * 8 = 3. 3 * 8 = 4. 3 * 8 = 5. 3 * 8 = 6. 3 * 8 = 7.", 0.0),  # padding
    ],
)
def test_steps_attempted_pays_for_setting_out_a_step_right_or_wrong(task, thought, expected):
    row = {"steps": ["3 * 8 = 24.", "7 + 24 = 31."], "answer": 31}
    assert make_reward("steps_attempted", task)(f"<think>{thought}</think><answer>0</answer>", row) == expected


def test_steps_attempted_needs_worked_steps():
    with pytest.raises(ValueError, match="steps_attempted.*worked steps"):
        make_reward("steps_attempted", build_task("countdown"))


@pytest.mark.parametrize(
    "thought",
    [
        "0.5 * 8 = 40.",  # a decimal operand
        "-5 * 8 = 40.",  # a signed operand: -40, a false equation
        "−5 * 8 = 40.",  # ... with the unicode minus
        "5 * 8 = 40.5.",  # a decimal result
        "5 * 8 = 40/3.",  # a fraction
        "5 * 8 = 40^2.",  # a power
        "5 * 8 = 40 ** 2.",
        "5 * 8 = 40%.",  # a percent
        "5 * 8 = 40 - 1.",  # a result that goes on: 39
    ],
)
def test_a_step_counts_only_when_its_numbers_are_the_whole_numbers_written(task, thought):
    """Each thought shows `5 * 8 = 40` inside other arithmetic: it is not that step, and it scores as a
    false equation does (0), beside the true sum."""
    row = {"steps": ["5 * 8 = 40.", "7 + 40 = 47."], "answer": 47}
    reward = make_reward("steps", task)
    assert reward("<think>5 * 8 = 40. 7 + 40 = 47.</think><answer>47</answer>", row) == 1.0
    assert reward(f"<think>{thought} 7 + 40 = 47.</think><answer>47</answer>", row) == 0.0


def test_a_chain_and_a_sentence_end_still_read_as_whole_steps(task):
    row = {"steps": ["5 * 8 = 40.", "7 + 40 = 47."], "answer": 47}
    reward = make_reward("steps", task)
    assert reward("<think>5 * 8 = 40 + 7 = 47</think><answer>47</answer>", row) == 1.0
    assert reward("<think>5*8=40, 7+40=47.</think><answer>47</answer>", row) == 1.0


NEGATIVE_CONFIGS = [
    {"min_value": -10, "max_value": 10},
    {"min_value": -100, "max_value": 100, "operands": 4, "operators": ["+", "-", "*"]},
    {"min_value": -100, "max_value": -1, "operators": ["-", "*"]},
    {"min_value": -1000000, "max_value": 1000000, "operands": 8, "operators": ["*", "-"], "all_operators": False},
    {"min_value": -3, "max_value": 3, "operands": 5, "operators": ["+", "-", "*"]},
    {"min_value": -50, "max_value": 50, "operands": 2, "operators": ["-"]},
]


@pytest.mark.parametrize("split_sums", ["none", "carries", "all", "any", "columns", "every_column"])
@pytest.mark.parametrize("config", NEGATIVE_CONFIGS, ids=lambda c: f"{c['min_value']}..{c['max_value']}")
def test_every_demonstration_scores_one_with_negative_operands(config, split_sums):
    """`-10 - (-72) = 62` is read with its sign: the task's own worked steps earn the whole reward."""
    task = build_task("arithmetic", {**config, "split_sums": split_sums})
    reward = make_reward("steps", task)
    rows = task.dataset("train", 60, distinct=False)
    assert any(step.startswith("-") for row in rows for step in row["steps"])  # a bare sign is exercised
    assert [reward(task.demonstration(row), row) for row in rows] == [1.0] * len(rows)


COLUMNS = {"steps": ["3 * 8 = 24.", "7 + 4 = 11.", "4 + 2 + 1 = 7.", "47 + 24 = 71."], "answer": 71}  # 47 + 3 * 8


@pytest.mark.parametrize(
    ("thought", "steps", "attempted"),
    [
        ("3 * 8 = 24. 7 + 4 = 11. 4 + 2 + 1 = 7. 47 + 24 = 71.", 1.0, 1.0),  # the demonstrated steps
        ("8 * 3 = 24. 4 + 7 = 11. 1 + 2 + 4 = 7. 24 + 47 = 71.", 1.0, 1.0),  # the terms in another order
        ("3 * 8 = 24. 7 + 4 = 11. 4 + 2 + 1 = 8. 47 + 24 = 81.", 0.0, 1.0),  # a wrong column: false
        ("3 * 8 = 24. 7 + 4 = 11. 4 + 2 + 1 = 7. 47 + 24 = 61.", 0.0, 1.0),  # a wrong whole sum: false
        ("3 * 8 = 24. 7 + 4 = 11. 4 + 2 = 6. 47 + 24 = 71.", 0.5, 0.5),  # the carry dropped: credit stops there
        ("3 * 8 = 24. 47 + 24 = 71.", 0.25, 0.25),  # the sum in one step: the columns, and what follows, unpaid
        ("3 * 8 = 24. 7 + 4 = 11.", 0.5, 0.5),
        ("4 + 2 + 1 = 7.", 0.0, 0.0),  # a column alone: not after the steps it follows
        ("3 * 8 = 24. 4 + 7 = 11. 2 + 4 = 7 - 1.", 0.0, 0.5),  # not a whole number: scored as false
    ],
)
def test_column_steps_are_paid_column_by_column(task, thought, steps, attempted):
    """`split_sums: columns` writes `47 + 24` as its units, its tens with the carry (`4 + 2 + 1 = 7`, three
    terms: one step) and the whole sum; `steps` pays each in turn from the first, and a false column zeroes the
    thought."""
    completion = f"<think>{thought}</think><answer>71</answer>"
    assert make_reward("steps", task)(completion, COLUMNS) == steps
    assert make_reward("steps_attempted", task)(completion, COLUMNS) == attempted


def test_a_column_of_three_terms_is_read_as_one_sum():
    from grpokit.tasks.equations import equations, sums

    text = "7 + 4 = 11. 4 + 2 + 1 = 7. 47 + 24 = 71."
    assert equations(text) == [(7, "+", 4, 11), (47, "+", 24, 71)]  # `2 + 1 = 7` is not read out of it
    assert sums(text) == [((4, 2, 1), 7)]
    assert sums("4 + 2 * 1 = 6. 4 + 2 + 1 = 6 + 1.") == []  # a product, or a right side still to work


@pytest.mark.parametrize("split_sums", ["columns", "every_column"])
def test_listing_every_column_sum_earns_nothing(split_sums):
    """Every digit sum with and without a carry holds each column step: more equations than a worked
    answer, so padding, not paid; the demonstration with two extra true equations is paid in full."""
    task = build_task("arithmetic", {"split_sums": split_sums, "addend_min": 11, "addend_max": 99})
    rows = [row for row in task.dataset("test", 20) if len(row["steps"]) >= 4]
    assert rows
    listed = [f"{u} + {v} = {u + v}." for u in range(10) for v in range(10)]
    listed += [f"{u} + {v} + {c} = {u + v + c}." for c in (0, 1) for u in range(10) for v in range(10)]
    for name in ("steps", "steps_attempted"):
        reward = make_reward(name, task)
        for row in rows:
            assert reward(worked(row), row) == 1.0
            assert reward(worked(row, steps=row["steps"] + listed[:2]), row) == 1.0
            assert reward(worked(row, steps=row["steps"] + listed), row) == 0.0


DIVISION = {"steps": ["13 - 3 = 10. 10 / 2 = 5."], "answer": 5}  # a custom task's worked solution, one line


@pytest.mark.parametrize(
    ("thought", "expected"),
    [
        ("13 - 3 = 10. 10 / 2 = 5.", 1.0),
        ("13 - 3 = 10. 10 ÷ 2 = 5.", 1.0),  # the division sign
        ("13 - 3 = 10, so each gets 5.", 0.5),
        ("13 - 3 = 10. 2 / 10 = 5.", 0.0),  # operands swapped: a false division (it does not commute)
        ("13 - 3 = 10. 10 / 2 = 4.", 0.0),  # a false quotient
        ("13 - 3 = 10. 11 / 2 = 5.", 0.0),  # not exact: 5.5 is no whole number
        ("13 - 3 = 10. 10 / 0 = 5.", 0.0),  # by zero
        ("13 - 3 = 10. 10 / 2 = 5/1.", 0.0),  # a fraction after the result: not a whole number
        ("13 - 3 = 10 / 2 = 5", 1.0),  # a chain through a division
        ("13 - 3 / 2 = 5. 13 - 3 = 10.", 0.0),  # a division inside a longer line: not a step, scored as false
    ],
)
def test_exact_division_is_a_step(task, thought, expected):
    """Divisions are read only as `x / y = z` equations, true only when exact; the text is never evaluated."""
    assert make_reward("steps", task)(f"<think>{thought}</think><answer>5</answer>", DIVISION) == expected


def test_worked_says_whether_a_solution_reads_as_steps():
    from grpokit.tasks.equations import worked

    assert worked("7 * 11 = 77. 77 + 20 = 97.") and worked("152 / 8 = 19.") and worked("3 * 60 = 180 + 11 = 191")
    assert not worked("Multiply 7 by 11, then add 20.")  # no equation
    assert not worked("7 * 11 = 78. 78 + 20 = 98.")  # a false one
    assert not worked("9 / 2 = 4.5")  # not whole numbers


@pytest.mark.parametrize("split_sums", ["any", "columns", "every_column"])
def test_one_fixed_equation_is_paid_only_where_a_solution_starts_with_it(split_sums):
    """A thought that is one fixed equation for every problem: a column (`2 + 1 = 3`, `0 + 0 + 1 = 1`) or a
    units sum is a step of many problems, and paying it wherever it is a step paid a constant thought on up
    to a fifth of the training problems. Credit runs from a solution's first step, so each fixed equation
    earns only on problems that start with it."""
    task = build_task("arithmetic", {"split_sums": split_sums, "addend_max": 50})
    rows = task.dataset("train", 200, distinct=False)
    reward = make_reward("steps", task)
    fixed = {line for row in rows for line in row["steps"]}
    assert len(fixed) > 80
    firsts = [_key(row["steps"][0]) for row in rows]
    for line in fixed:
        completion = f"<think>{line}</think><answer>0</answer>"
        paid = [first for row, first in zip(rows, firsts, strict=True) if reward(completion, row) > 0]
        assert all(first == _key(line) for first in paid)
    later = Counter(line for row in rows for line in row["steps"][1:])
    assert later.most_common(1)[0][1] >= 5  # some later step recurs across problems: the case is exercised


def _key(line):
    """The step a one-step line writes: its equation, or its sum of three or more terms."""
    return step_key((equations(line) + sums(line))[0])
