import pytest

from grpokit.rewards import make_reward
from grpokit.tasks import build_task

ROW = {"nums": [16, 20, 1], "target": 15, "answer": 15}


@pytest.fixture(scope="module")
def reward():
    return make_reward("true_steps", build_task("countdown"))


@pytest.mark.parametrize(
    ("thought", "expected"),
    [
        ("16 + 20 = 36, 36 + 1 = 37, 36 - 1 = 35.", 1.0),
        ("20 - 16 = 4, 4 * 1 = 4, 4 / 1 = 4.", 1.0),
        ("20 / 16 = 1.", 0.0),  # 5/4, not 1
        ("16 + 20 = 36, 36 + 1 = 4.", 0.0),  # a false step
        ("21 + 7 = 28.", 0.0),  # numbers of another problem
        ("16 + 20 = 36, 36 + 2 = 38.", 0.0),  # 2 is neither a number nor a result
        ("2 + 2 = 4.", 0.0),
        ("I add them.", 0.0),  # no equation
        ("16 + 20 = 36, " * 21, 0.0),  # past the 20 steps a backtracking thought may write: padding
        ("16 + 20 = 36, " * 20, 1.0),
        ("16 × 1 = 16, 20 − 16 = 4.", 1.0),
        ("16 + 20 = 36.0", 0.0),  # not a whole-number step
        ("16 + 20 = 36, 20 / 16 = 1.5.", 0.0),  # a false step hidden behind a decimal result
        ("16 + 20 = 36, 1.5 * 20 = 36.", 0.0),  # ... or a decimal operand
        ("16 + 20 = 36, 36 - 1 = 35. 1.", 1.0),  # a number ending a sentence is not a decimal step
        ("16 + 20 = 36/2, 36 - 1 = 35.", 0.0),  # the result goes on: 18, not 36
        ("16 + 20 = 36 - 1, 36 - 1 = 35.", 0.0),  # ... 35
        ("16 + 20 = 36^2, 36 - 1 = 35.", 0.0),
        ("16 + 20 = 36%, 36 - 1 = 35.", 0.0),
        ("-16 + 20 = 36, 36 - 1 = 35.", 0.0),  # read with its sign: 4, and -16 is not a number of the problem
        ("1 - 16 + 20 = 36, 36 - 1 = 35.", 0.0),  # a step inside a longer expression: 5, not 36
        ("16 + 20 = 36 - 1 = 35.", 1.0),  # a chain: both links read, both true
    ],
)
def test_true_steps_pays_only_true_equations_on_the_problems_numbers(reward, thought, expected):
    assert reward(f"<think>{thought}</think><answer>(16 + 20) - 1</answer>", ROW) == expected


def test_true_steps_reads_only_the_thought(reward):
    assert reward("<answer>16 + 20 = 36</answer>", ROW) == 0.0
    assert reward("16 + 20 = 36, 36 - 1 = 35. <answer>(16 + 20) - 1</answer>", ROW) == 0.0  # no </think>
    assert reward("<think>16 + 20 = 36.</think><answer>36 + 1 = 4</answer>", ROW) == 1.0


@pytest.mark.parametrize("demonstration", ["worked", "tries", "backtrack"])
def test_every_demonstration_of_the_task_earns_it(demonstration):
    task = build_task(
        "countdown", {"max_numbers": 3, "max_value": 20, "max_target": 50, "demonstration": demonstration}
    )
    reward = make_reward("true_steps", task)
    rows = [task.example("train", i) for i in range(150)]
    assert [reward(task.demonstration(row), row) for row in rows] == [1.0] * len(rows)


def test_true_steps_needs_countdown():
    with pytest.raises(ValueError, match="true_steps.*needs a task.*countdown.*for arithmetic use steps"):
        make_reward("true_steps", build_task("arithmetic"))
