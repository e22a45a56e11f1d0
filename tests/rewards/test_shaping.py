import math

import pytest

from grpokit.rewards import REWARDS, make_reward
from grpokit.tasks import build_task

ROW = {"question": "What is 3 + 4 * 5?", "answer": 23}
RIGHT, WRONG = "<answer>23</answer>", "<answer>22</answer>"


@pytest.fixture(scope="module")
def task():
    return build_task("arithmetic")


def cosine(task, **params):
    return make_reward("length_cosine", task, {"max_chars": 200, **params})


def test_length_cosine_orders_lengths_by_correctness(task):
    reward = cosine(task)
    pad = lambda n, tail: "<think>" + "x" * n + "</think>" + tail  # noqa: E731
    assert reward(pad(0, RIGHT), ROW) > reward(pad(100, RIGHT), ROW) > reward(pad(180, WRONG), ROW)
    assert reward(pad(180, WRONG), ROW) > reward(pad(0, WRONG), ROW)  # unsure: thinking longer is better
    assert reward(pad(10_000, RIGHT), ROW) == pytest.approx(0.5)  # past max_chars: the floor, not below
    assert reward(pad(10_000, WRONG), ROW) == pytest.approx(-0.5)


def test_length_cosine_cannot_be_farmed_by_a_wrong_long_answer(task):
    reward = cosine(task)
    assert reward("<think>" + "x" * 5000 + "</think>" + WRONG, ROW) < reward("<think>x</think>" + RIGHT, ROW)


@pytest.mark.parametrize(("length", "expected"), [(0, 0.0), (50, 0.0), (75, -0.5), (100, -1.0), (10**6, -1.0)])
def test_overlong_penalty(length, expected):
    reward = make_reward("overlong_penalty", None, {"max_chars": 100, "buffer_chars": 50})
    assert reward("x" * length, {}) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0.0),
        ("one two", 0.0),
        ("the quick brown fox jumps over", 0.0),
        ("a b c a b c", -0.25),  # 4 trigrams, 3 distinct
        ("go go go go go go go go go go", -0.875),
    ],
)
def test_repetition_penalty(text, expected):
    assert make_reward("repetition_penalty", None)(text, {}) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("length_cosine", {"max_chars": 0}),
        ("overlong_penalty", {"buffer_chars": 0}),
        ("repetition_penalty", {"ngram": 0}),
        ("repetition_penalty", {"max_penalty": 1.0}),
    ],
)
def test_bad_parameters_are_rejected(task, name, params):
    with pytest.raises(ValueError):
        make_reward(name, task, params)


ADVERSARIAL = [
    "",
    "<think>" * 500,
    "</answer>" * 500 + "<answer>",
    "<think>x</think><answer>" + "9" * 10_000 + "</answer>",
    "<think>x</think><answer>__import__('os').system('true')</answer>",
    "<think>x</think><answer>9**9**9</answer>",
    "<think>x</think><answer>２３</answer>",
    "x" * 1_000_000,
    "\x00\uffff\ud7ff" * 100,
    "<think>x</think><answer>23</answer>" * 50,
    "<think>" + "3 + 4 = 7, " * 100_000 + "</think>",
]


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_every_reward_is_finite_and_bounded_on_adversarial_text(task, name):
    # countdown's `closeness` and `true_steps` refuse other tasks; their row gets the numbers they read
    countdown = name in ("closeness", "true_steps")
    reward = make_reward(name, build_task("countdown") if countdown else task)
    row = {**ROW, "nums": [3, 4, 5], "target": 23} if countdown else ROW
    for text in ADVERSARIAL:
        value = reward(text, row)
        assert isinstance(value, float) and math.isfinite(value), (name, text[:40])
        assert -1.0 <= value <= 1.0, (name, text[:40], value)
        if name == "correctness":
            assert value == (1.0 if text.endswith("<answer>23</answer>") else 0.0), text[:40]
