import pytest

from grpokit.errors import RecipeError
from grpokit.tasks import build_task
from grpokit.tasks.arithmetic import solve


@pytest.fixture
def task():
    return build_task("arithmetic")


def test_reference_shapes_only(task):
    """3 operands with + and * give exactly `a + b * c` or `a * b + c`, operands 1..10."""
    patterns = set()
    for row in task.dataset("train", 200, distinct=False):
        a, op1, b, op2, c = row["expression"].split()
        patterns.add((op1, op2))
        assert all(1 <= int(x) <= 10 for x in (a, b, c))
    assert patterns == {("+", "*"), ("*", "+")}


def test_deterministic_per_index(task):
    assert task.example("train", 17) == build_task("arithmetic").example("train", 17)
    assert task.example("train", 17) != task.example("train", 18) or task.example("train", 19)


def test_seed_changes_problems():
    a = build_task("arithmetic", {"seed": 1}).dataset("train", 20, distinct=False)
    b = build_task("arithmetic", {"seed": 2}).dataset("train", 20, distinct=False)
    assert [r["question"] for r in a] != [r["question"] for r in b]


def test_held_out_split_never_overlaps_training(task):
    train = {row["question"] for row in task.dataset("train", 3000, distinct=False)}
    held_out = task.dataset("test", 100)
    assert len({row["question"] for row in held_out}) == 100  # distinct
    assert not train & {row["question"] for row in held_out}


@pytest.mark.parametrize(
    ("nums", "ops", "value"),
    [
        ([2, 3, 4], ["+", "*"], 14),
        ([2, 3, 4], ["*", "+"], 10),
        ([10, 10, 10], ["*", "*"], 1000),
        ([5, 7, 2], ["-", "*"], -9),
        ([1, 2, 3, 4], ["*", "+", "*"], 14),
        ([9, 4], ["-"], 5),
    ],
)
def test_ground_truth_follows_precedence(nums, ops, value):
    steps, result = solve(nums, ops)
    assert result == value
    assert steps[-1].endswith(f"= {value}.")


@pytest.mark.parametrize(
    ("nums", "ops", "mode", "steps"),
    [
        ([6, 9, 6], ["*", "+"], "carries", ["6 * 9 = 54.", "4 + 6 = 10.", "50 + 10 = 60."]),
        ([7, 6, 9], ["+", "*"], "carries", ["6 * 9 = 54.", "4 + 7 = 11.", "50 + 11 = 61."]),  # the digit first
        ([3, 6, 9], ["+", "*"], "carries", ["6 * 9 = 54.", "3 + 54 = 57."]),  # no carry: one step
        ([3, 6, 9], ["+", "*"], "all", ["6 * 9 = 54.", "4 + 3 = 7.", "50 + 7 = 57."]),
        ([3, 6, 9], ["+", "*"], "none", ["6 * 9 = 54.", "3 + 54 = 57."]),
        ([6, 9, 6], ["*", "+"], "none", ["6 * 9 = 54.", "54 + 6 = 60."]),
        ([10, 6, 9], ["+", "*"], "all", ["6 * 9 = 54.", "10 + 54 = 64."]),  # no digit: one step
        ([2, 3, 4], ["+", "*"], "all", ["3 * 4 = 12.", "2 + 2 = 4.", "10 + 4 = 14."]),
        ([8, 5, 2], ["-", "*"], "all", ["5 * 2 = 10.", "8 - 10 = -2."]),  # subtraction is never split
        ([10, 6, 9], ["+", "*"], "any", ["6 * 9 = 54.", "4 + 10 = 14.", "50 + 14 = 64."]),  # sums with 10 too
        ([6, 2, 10], ["*", "+"], "any", ["6 * 2 = 12.", "2 + 10 = 12.", "10 + 12 = 22."]),
        ([10, 10, 1], ["+", "*"], "any", ["10 * 1 = 10.", "0 + 10 = 10.", "10 + 10 = 20."]),
        ([3, 6, 9], ["+", "*"], "any", ["6 * 9 = 54.", "4 + 3 = 7.", "50 + 7 = 57."]),  # as all with a digit
        ([2, 1, 3], ["+", "*"], "any", ["1 * 3 = 3.", "2 + 3 = 5."]),  # both terms under 10: one step
    ],
)
def test_split_sums_write_the_units_then_the_tens(nums, ops, mode, steps):
    written, value = solve(nums, ops, split_sums=mode)
    assert written == steps
    assert value == solve(nums, ops)[1]


@pytest.mark.parametrize("mode", ["all", "any"])
def test_every_demonstration_earns_every_step_and_is_right(mode):
    from grpokit.rewards import make_reward

    task = build_task("arithmetic", {"split_sums": mode})
    reward = make_reward("steps", task)
    rows = task.dataset("test", 100)
    tens = [row for row in rows if " 10 " in f" {row['question'].rstrip('?')} "]
    assert tens  # sums with 10 among them: `any` splits them, `all` writes them whole
    for row in rows:
        assert reward(task.demonstration(row), row) == 1.0
        assert task.score(task.demonstration(row), row) == 1.0


def test_split_sum_demonstrations_earn_every_step():
    """With split carries the `steps` reward wants the split: the sum written whole earns only the product."""
    from grpokit.rewards import make_reward

    task = build_task("arithmetic", {"split_sums": "carries"})
    reward = make_reward("steps", task)
    rows = task.dataset("test", 100)
    split = [row for row in rows if len(row["steps"]) == 3]
    assert split and len(split) < len(rows)  # some problems carry, some do not
    for row in rows:
        assert reward(task.demonstration(row), row) == 1.0
        assert task.score(task.demonstration(row), row) == 1.0
    row = split[0]
    product = int(row["steps"][0].split("=")[1].rstrip("."))
    whole = (
        f"<think>{row['steps'][0]} {product} + {row['answer'] - product} = {row['answer']}.</think>"
        f"<answer>{row['answer']}</answer>"
    )
    assert task.score(whole, row) == 1.0
    assert reward(whole, row) == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("nums", "ops", "steps"),
    [
        ([47, 24], ["+"], ["7 + 4 = 11.", "4 + 2 + 1 = 7.", "47 + 24 = 71."]),  # x's digit, y's, the carry
        ([7, 24], ["+"], ["7 + 4 = 11.", "2 + 1 = 3.", "7 + 24 = 31."]),  # x out of digits: y's digit + carry
        ([52, 31], ["+"], ["2 + 1 = 3.", "5 + 3 = 8.", "52 + 31 = 83."]),
        ([100, 47], ["+"], ["0 + 7 = 7.", "0 + 4 = 4.", "100 + 47 = 147."]),  # a lone digit, no carry: copied
        ([57, 48], ["+"], ["7 + 8 = 15.", "5 + 4 + 1 = 10.", "57 + 48 = 105."]),  # the last carry: no step
        ([3, 4], ["+"], ["3 + 4 = 7."]),  # both single digits: one step
        ([999, 1], ["+"], ["9 + 1 = 10.", "9 + 1 = 10.", "9 + 1 = 10.", "999 + 1 = 1000."]),
        ([4096, 57], ["+"], ["6 + 7 = 13.", "9 + 5 + 1 = 15.", "0 + 1 = 1.", "4096 + 57 = 4153."]),
        (
            [1234, 5678],
            ["+"],
            ["4 + 8 = 12.", "3 + 7 + 1 = 11.", "2 + 6 + 1 = 9.", "1 + 5 = 6.", "1234 + 5678 = 6912."],
        ),
        ([47, 3, 8], ["+", "*"], ["3 * 8 = 24.", "7 + 4 = 11.", "4 + 2 + 1 = 7.", "47 + 24 = 71."]),
        ([6, 9, 6], ["*", "+"], ["6 * 9 = 54.", "4 + 6 = 10.", "5 + 1 = 6.", "54 + 6 = 60."]),  # product first
        ([0, 15], ["+"], ["0 + 5 = 5.", "0 + 15 = 15."]),
        ([50, 3, 8], ["-", "*"], ["3 * 8 = 24.", "50 - 24 = 26."]),  # subtraction: one step
        ([-47, 3, 8], ["+", "*"], ["3 * 8 = 24.", "-47 + 24 = -23."]),  # a negative term: one step
    ],
)
def test_columns_write_column_addition_from_the_units(nums, ops, steps):
    """One equation per column that needs work, units first, then the whole sum; a column where one term
    has run out of digits writes the other's digit plus the carry, and nothing without a carry."""
    written, value = solve(nums, ops, split_sums="columns")
    assert written == steps
    assert value == solve(nums, ops)[1]


def _true(step: str) -> bool:
    """`step` (`a + b + c = z.` or `a * b = z.`) holds, read as digits: the check shares no code with `solve`."""
    left, result = step.removesuffix(".").split(" = ")
    if " * " in left:
        x, y = left.split(" * ")
        return int(x) * int(y) == int(result)
    return sum(int(term.strip("()")) for term in left.split(" + ")) == int(result)


def test_every_column_step_holds_and_the_last_is_the_answer_for_addends_to_999():
    """2000 drawn problems with addends 1..999 (up to 3 digits) beside products: every step is a true
    equation, each column adds single digits and at most a carry of 1, and the last step is the whole
    sum, equal to the answer. The `steps` reward pays every demonstration in full, and `score` accepts it."""
    from grpokit.rewards import make_reward

    task = build_task("arithmetic", {"split_sums": "columns", "addend_min": 1, "addend_max": 999})
    reward = make_reward("steps", task)
    rows = task.dataset("train", 2000, distinct=False)
    columns = 0
    for row in rows:
        steps = row["steps"]
        assert all(_true(step) for step in steps), steps
        assert steps[0].count("*") == 1 and steps[-1].endswith(f" = {row['answer']}.")
        x, y = (int(term) for term in steps[-1].split(" = ")[0].split(" + "))
        assert x + y == row["answer"]
        for column in steps[1:-1]:
            terms = column.split(" = ")[0].split(" + ")
            assert 2 <= len(terms) <= 3 and all(len(term) == 1 for term in terms), column
            assert len(terms) == 2 or terms[2] == "1", column  # the third term is the carry
        columns += len(steps) - 2
        assert reward(task.demonstration(row), row) == 1.0
        assert task.score(task.demonstration(row), row) == 1.0
    assert columns > 2 * len(rows)  # most sums have 2-3 columns: the procedure is exercised


@pytest.mark.parametrize(
    ("nums", "ops", "steps"),
    [
        ([47, 3, 8], ["+", "*"], ["3 * 8 = 24.", "7 + 4 + 0 = 11.", "4 + 2 + 1 = 7.", "47 + 24 = 71."]),
        ([7, 3, 8], ["+", "*"], ["3 * 8 = 24.", "7 + 4 + 0 = 11.", "0 + 2 + 1 = 3.", "7 + 24 = 31."]),
        (
            [89, 4, 5],
            ["+", "*"],
            ["4 * 5 = 20.", "9 + 0 + 0 = 9.", "8 + 2 + 0 = 10.", "0 + 0 + 1 = 1.", "89 + 20 = 109."],
        ),
        ([3, 2, 2], ["+", "*"], ["2 * 2 = 4.", "3 + 4 + 0 = 7.", "3 + 4 = 7."]),  # two digits: a column too
        ([7, 1, 5], ["+", "*"], ["1 * 5 = 5.", "7 + 5 + 0 = 12.", "0 + 0 + 1 = 1.", "7 + 5 = 12."]),
        ([50, 3, 8], ["-", "*"], ["3 * 8 = 24.", "50 - 24 = 26."]),  # subtraction: one step
        ([-47, 3, 8], ["+", "*"], ["3 * 8 = 24.", "-47 + 24 = -23."]),  # a negative term: one step
    ],
)
def test_every_column_writes_each_column_with_its_carry(nums, ops, steps):
    """`every_column`: every column as three terms (a run-out digit as 0, the carry in as 0 or 1) and a
    carry out of the last column as a column of its own, whatever the number of digits."""
    written, value = solve(nums, ops, split_sums="every_column")
    assert written == steps
    assert value == solve(nums, ops)[1]


def test_every_column_digits_of_the_sum_are_the_columns_last_digits():
    """2000 problems with addends 0..999: every step holds, every column is three single digits with a
    carry of 0 or 1 that is the one the column before sent, and the sum's digits are the columns' last
    digits read back, so the procedure assembles the answer with no case to learn. The `steps` reward and
    `score` pay each demonstration in full."""
    from grpokit.rewards import make_reward

    task = build_task("arithmetic", {"split_sums": "every_column", "addend_min": 0, "addend_max": 999})
    reward = make_reward("steps", task)
    for row in task.dataset("train", 2000, distinct=False):
        steps = row["steps"]
        assert all(_true(step) for step in steps), steps
        columns, carry = steps[1:-1], 0
        for column in columns:
            terms = column.split(" = ")[0].split(" + ")
            assert len(terms) == 3 and all(len(term) == 1 for term in terms), column
            assert int(terms[2]) == carry, steps
            carry = int(column.split(" = ")[1].rstrip(".")) // 10
        assert carry == 0  # a carry out of the last column has its own column
        digits = "".join(column.split(" = ")[1].rstrip(".")[-1] for column in reversed(columns))
        assert int(digits) == row["answer"], steps
        assert reward(task.demonstration(row), row) == 1.0
        assert task.score(task.demonstration(row), row) == 1.0


def test_demonstration_scores_and_is_strict(task):
    from grpokit.tasks.parsing import is_strict_format

    for row in task.dataset("test", 50):
        demo = task.demonstration(row)
        assert is_strict_format(demo)
        assert task.score(demo, row) == 1.0


ROW = {"question": "What is 3 + 4 * 5?", "answer": 23}


@pytest.mark.parametrize(
    ("completion", "score"),
    [
        ("<think>4 * 5 = 20. 3 + 20 = 23.</think><answer>23</answer>", 1.0),
        ("<think>…</think><answer> 23 </answer>", 1.0),
        ("<think>4 * 5 = 20. 3 + 20 = 23.</think><answer>22</answer>", 0.0),
        # adversarial: the answer only inside the thought, or no answer block
        ("<think>so <answer>23</answer></think>", 0.0),
        ("The answer is 23.", 0.0),
        ("<think>x</think><answer></answer>", 0.0),
        # adversarial: an expression instead of a number is never evaluated
        ("<think>x</think><answer>3 + 4 * 5</answer>", 0.0),
        ("<think>x</think><answer>__import__('os').system('true')</answer>", 0.0),
        ("<think>x</think><answer>9**9**9</answer>", 0.0),
        # adversarial: look-alike digits, decorations, huge numbers
        ("<think>x</think><answer>２３</answer>", 0.0),
        ("<think>x</think><answer>٢٣</answer>", 0.0),
        ("<think>x</think><answer>23.0</answer>", 0.0),
        ("<think>x</think><answer>= 23</answer>", 0.0),
        ("<think>x</think><answer>" + "9" * 5000 + "</answer>", 0.0),
        # hedging: several answers, only the last counts
        ("<think>x</think><answer>23</answer><answer>24</answer>", 0.0),
        ("<think>x</think><answer>24</answer><answer>23</answer>", 1.0),
    ],
)
def test_score(task, completion, score):
    assert task.score(completion, ROW) == score


def test_a_right_answer_of_any_length_scores_one(task):
    """Operands up to a million over eight terms give 48-digit answers; an answer is never too long."""
    big = {"question": "?", "answer": -(7 * 10**47 + 3)}
    right = str(big["answer"])
    assert len(right.lstrip("-")) == 48
    assert task.score(f"<think>x</think><answer>{right}</answer>", big) == 1.0
    assert task.score(f"<think>x</think><answer>-0{right[1:]}</answer>", big) == 1.0  # leading zero, as int() reads
    assert task.score(f"<think>x</think><answer>{right[1:]}</answer>", big) == 0.0
    assert task.score("<think>x</think><answer>" + "7" * 10_000 + "</answer>", big) == 0.0  # read, not raised on


@pytest.mark.parametrize(
    "params",
    [
        {"operands": 1},
        {"min_value": 5, "max_value": 1},
        {"operators": ["/"]},
        {"operators": []},
        {"eval_fraction": 0.2},
        {"test_fraction": 0.0},
        {"validation_fraction": 0.5, "test_fraction": 0.5},
        {"addend_min": 50, "addend_max": 11},
        {"operands": 2, "operators": ["+", "*"]},
        {"split_sums": True},
    ],
)
def test_bad_config_is_rejected(params):
    with pytest.raises(RecipeError, match="task.params"):
        build_task("arithmetic", params)


def test_unknown_param_names_known_ones():
    with pytest.raises(RecipeError, match="unknown key task.params.operand .*known: .*operands"):
        build_task("arithmetic", {"operand": 3})


def test_too_small_problem_space_fails_clearly():
    task = build_task("arithmetic", {"operands": 2, "operators": ["+"], "min_value": 1, "max_value": 2})
    with pytest.raises(ValueError, match="(distinct test problems|no test problem found)"):
        task.dataset("test", 50)
