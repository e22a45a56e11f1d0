"""Property-based: random and adversarial text never makes a reward or verifier raise or leave its range."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpokit.rewards import BOUNDS, REWARDS, make_reward
from grpokit.tasks import TASKS
from tests.data_files import build_test_task

EXAMPLES_PER_TASK = 300

PIECES = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "<think><answer>",
        "</answer></think>",
        "7",
        "-3",
        "1/2",
        "0.5",
        "\\frac{1}{2}",
        "\\boxed{",
        "}",
        "(",
        ")",
        "+",
        "-",
        "*",
        "/",
        "**",
        "^",
        "9**9**9",
        "10^{10^{10}}",
        "__import__('os').system('true')",
        "exec('x')",
        "1e400",
        "nan",
        "inf",
        "４２",
        "x = 2",
        " or ",
        ";",
        "=",
        "\\",
        "{",
        "$",
        "\n",
        " ",
        "a" * 5000,
        "<answer>" * 50,
    ]
)
TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(PIECES, st.text(max_size=20)), max_size=40).map("".join),
)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    return {name: build_test_task(name, folder) for name in sorted(TASKS)}


@pytest.mark.parametrize("task_name", sorted(TASKS))
def test_rewards_and_verifiers_take_any_text(tasks, task_name):
    task = tasks[task_name]
    rows = task.dataset("test", 2)
    rewards = {}
    for name in sorted(REWARDS):
        try:
            rewards[name] = make_reward(name, task)
        except ValueError as err:  # a task's own reward (steps, closeness) refuses other tasks when made
            assert "needs a task" in str(err), err
    assert {"format", "correctness"} <= set(rewards)

    @settings(max_examples=EXAMPLES_PER_TASK, deadline=None, suppress_health_check=list(HealthCheck))
    @given(text=TEXT, which=st.integers(0, len(rows) - 1))
    def check(text, which):
        row = rows[which]
        assert task.score(text, row) in (0.0, 1.0)
        for name, reward in rewards.items():
            value = reward(text, row)
            low, high = BOUNDS[name]
            assert math.isfinite(value) and low <= value <= high, (name, value, text[:200])

    check()
