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
