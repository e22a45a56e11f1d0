import subprocess
import sys
import textwrap

import pytest

from grpokit.config import RecipeError
from grpokit.tasks import build_task

PAYLOAD = "__import__('os').system('touch pwned.txt')"


@pytest.fixture(scope="module")
def countdown():
    return build_task("reasoning_gym", {"dataset": "countdown", "config": {"min_numbers": 3, "max_numbers": 4}})


def test_splits_are_disjoint_and_scores_strict(countdown):
    train = countdown.dataset("train", 100, distinct=False)
    held_out = countdown.dataset("eval", 5)
    assert not {r["question"] for r in train} & {r["question"] for r in held_out}
    row = held_out[0]
    assert countdown.score(countdown.demonstration(row), row) == 1.0
    # reasoning-gym pays 0.05 for a wrong expression and 0.01 for junk: grpokit pays nothing.
    assert countdown.score("<think>x</think><answer>1 + 1</answer>", row) == 0.0
    assert countdown.score(f"<think><answer>{row['answer']}</answer></think>", row) == 0.0


def test_config_reaches_reasoning_gym():
    task = build_task("reasoning_gym", {"dataset": "basic_arithmetic", "config": {"min_terms": 2, "max_terms": 2}})
    row = task.example("train", 0)
    assert task.data.config.max_terms == 2
    assert task.score(f"<think>x</think><answer>{row['answer']}</answer>", row) == 1.0


def test_the_python_payload_runs_in_reasoning_gym_but_not_through_grpokit(countdown, tmp_path, monkeypatch):
    """The danger is real: reasoning-gym's own scorer runs the payload. grpokit's path does not."""
    script = textwrap.dedent(
        f"""
        import reasoning_gym
        data = reasoning_gym.create_dataset("countdown", size=1, seed=0)
        data.score_answer({PAYLOAD!r}, data[0])
        """
    )
    direct = tmp_path / "direct"
    direct.mkdir()
    subprocess.run([sys.executable, "-c", script], cwd=direct, check=True, capture_output=True, timeout=120)
    assert (direct / "pwned.txt").exists()

    monkeypatch.chdir(tmp_path)
    row = countdown.example("eval", 0)
    for answer in (PAYLOAD, "exec('imp'+'ort os; os.sys'+'tem(\"touch pwned.txt\")')", "open('pwned.txt', 'w')"):
        assert countdown.score(f"<think>x</think><answer>{answer}</answer>", row) == 0.0
    assert not (tmp_path / "pwned.txt").exists()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "dataset is required"),
        ({"dataset": "countdwn"}, "unknown reasoning-gym dataset 'countdwn'; known: .*countdown"),
        ({"dataset": "countdown", "config": {"max_number": 4}}, "unknown setting 'max_number' .*max_numbers"),
        ({"dataset": "countdown", "config": {"min_numbers": 5, "max_numbers": 2}}, "reasoning-gym rejected the config"),
        ({"dataset": "countdown", "threshold": 0}, "threshold=0"),
    ],
)
def test_bad_params_fail_clearly(params, message):
    with pytest.raises(RecipeError, match=message):
        build_task("reasoning_gym", params)
