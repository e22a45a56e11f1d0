import pytest

from grpokit.rewards import make_reward
from grpokit.tasks import build_task

ROW = {"nums": [3, 5, 2], "target": 20, "answer": 20}


@pytest.fixture(scope="module")
def reward():
    return make_reward("closeness", build_task("countdown"))


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("(5 - 3) * 2 * 5", 0.0),  # 5 used twice
        ("5 * 2 * 2", 0.0),  # 2 used twice, 3 left out
        ("(3 + 5 + 2) * 2", 0.0),  # 2 used twice
        ("5 * (3 + 2) - 5", 0.0),
        ("5 * 2 * 3", 0.5),  # 30: 10 away from 20
        ("(5 + 3) * 2", 0.8),  # 16
        ("(3 - 5) * 2", 0.0),  # -4: floored at 0
        ("5 * 2 * 3 = 20", 0.0),  # a false claim of the target earns nothing, as for correctness
        ("5 * (2 + 3) - 5", 0.0),
        ("5 * 2 - 3", 0.35),  # 7: 13 away
        ("(5 + 3) / 2", 0.2),  # 4: exact division, 16 away
        ("20", 0.0),  # the target echoed: no number of the problem used
        ("__import__('os').system('true')", 0.0),
    ],
)
def test_closeness_pays_a_valid_equation_by_how_near_it_lands(reward, answer, expected):
    assert reward(f"<think>x</think><answer>{answer}</answer>", ROW) == pytest.approx(expected)


def test_the_right_equation_earns_what_correctness_does(reward):
    task = build_task("countdown")
    row = task.example("train", 0)
    completion = task.demonstration(row)
    assert reward(completion, row) == task.score(completion, row) == 1.0


def test_a_task_without_values_is_refused():
    with pytest.raises(ValueError, match="closeness.*countdown"):
        make_reward("closeness", build_task("arithmetic"))
