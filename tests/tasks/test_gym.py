import functools
import re
import subprocess
import sys
import textwrap

import pytest

from grpokit.errors import RecipeError
from grpokit.tasks import build_task

PAYLOAD = "__import__('os').system('touch pwned.txt')"


@pytest.fixture(scope="module")
def countdown():
    return build_task("reasoning_gym", {"dataset": "countdown", "config": {"min_numbers": 3, "max_numbers": 4}})


def test_splits_are_disjoint_and_scores_strict(countdown):
    train = countdown.dataset("train", 100, distinct=False)
    held_out = countdown.dataset("test", 5)
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
    row = countdown.example("test", 0)
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


def test_countdown_is_decided_by_the_ast_evaluator_and_agrees_with_reasoning_gym(countdown, monkeypatch):
    """grpokit's verdict equals reasoning-gym's on plain arithmetic, and parse_expr is never called."""
    import random

    import reasoning_gym.games.countdown as gym_countdown

    from grpokit.tasks.gym_verifiers import countdown as countdown_score

    rng = random.Random(0)
    checked = 0
    for index in range(15):
        entry = countdown.entry(index)
        solution, numbers = entry["answer"], entry["metadata"]["numbers"]
        shuffled = rng.sample(numbers, len(numbers))
        answers = [solution, f"({solution}) * 1", f"{solution} + {numbers[0]}", f"-({solution}) + 0"]
        answers += [solution.replace("+", "-", 1), solution.replace("*", "/", 1), " + ".join(map(str, numbers))]
        answers += [" * ".join(map(str, shuffled)), " - ".join(map(str, shuffled))]
        for answer in answers:
            assert countdown_score(answer, entry) == float(countdown.data.score_answer(answer, entry) == 1.0), answer
            checked += 1
    assert checked >= 100

    def no_parse_expr(*args, **kwargs):
        raise AssertionError("reasoning-gym's parse_expr was called on model text")

    monkeypatch.setattr(gym_countdown, "parse_expr", no_parse_expr)
    row = countdown.example("test", 0)
    assert countdown.score(countdown.demonstration(row), row) == 1.0
    assert not countdown.uses_sandbox


@pytest.mark.parametrize(
    ("dataset", "answer", "refused"),
    [
        ("puzzle24", "(3 + 5) * 3 * 1", False),
        ("puzzle24", "exec(bytes([111, 115]))", True),
        ("puzzle24", "x.func", True),
        ("puzzle24", "lambda: 1", True),
        ("puzzle24", "9**9**9", True),
        ("polynomial_multiplication", "6*x**3 - 2*x + 1", False),
        ("simple_integration", "x**2/2 + sin(x) + C", False),
        ("simple_integration", "getattr(x, chr(95))", True),
        ("n_queens", "[['Q', '_'], ['_', 'Q']]", False),
        ("n_queens", "_ Q\nQ _", False),  # not Python: eval raises before running anything
        ("n_queens", "[__import__('os').system('true')]", True),
        ("spiral_matrix", "list(map(int, '12'))", True),
        ("basic_arithmetic", "anything at all", False),  # this scorer reads the answer as data
    ],
)
def test_each_scoring_path_screens_its_language(dataset, answer, refused):
    from grpokit.sandbox.scorers import gym_refusal

    assert (gym_refusal(dataset, answer) is not None) == refused


def test_tasks_command_lists_the_scoring_paths(capsys):
    from grpokit.cli.commands import main

    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for path in ("ast:", "sympy:", "literal:", "confined:"):
        assert path in out
    assert "countdown" in out.split("ast:")[1].split("sympy:")[0]


# The five datasets whose reasoning-gym scorer paid universal answers (issue 53): grpokit's verifiers pay none.
FIVE = ["puzzle24", "complex_arithmetic", "number_sorting", "game_of_life_halting", "coin_flip"]


@pytest.mark.parametrize("dataset", FIVE)
def test_the_probe_audit_finds_the_hole_and_grpokit_pays_no_probe(dataset):
    """The full audit (every probe on 32 problems) of each of the five: reasoning-gym's own scorer pays a
    universal answer on more than one problem, grpokit's path pays none, and the shipped audit says so."""
    from grpokit.tasks.gym_audit import audit_dataset, load_audit

    result = audit_dataset(dataset)
    assert result["raw"], "reasoning-gym's scorer no longer pays any probe: re-check this dataset"
    assert result["grpokit"] == {} and result["slow"] == {}
    shipped = load_audit()["datasets"][dataset]
    assert (shipped["raw"], shipped["grpokit"]) == (result["raw"], result["grpokit"])


@functools.cache
def gym_task(dataset):
    """The task and 8 held-out rows (half the problems held out: puzzle24's generator is slow)."""
    task = build_task("reasoning_gym", {"dataset": dataset, "validation_fraction": 0.1, "test_fraction": 0.5})
    return task, task.dataset("test", 8)


@pytest.mark.parametrize(
    ("dataset", "probe"),
    [
        ("puzzle24", "1*2*3*4"),
        ("puzzle24", "(1+1+1)*8"),
        ("complex_arithmetic", "nan"),
        ("number_sorting", "[NaN, NaN, NaN, NaN, NaN, NaN, NaN, NaN, NaN, NaN]"),
        ("game_of_life_halting", "banana"),
        ("coin_flip", "0"),
    ],
)
def test_the_issue_s_universal_answers_score_nothing_through_the_task(dataset, probe):
    task, rows = gym_task(dataset)
    assert [task.score(f"<think>x</think><answer>{probe}</answer>", row) for row in rows] == [0.0] * 8
    assert all(task.score(task.demonstration(row), row) == 1.0 for row in rows)  # the gold still scores


def test_grpokit_s_verifiers_agree_with_reasoning_gym_on_right_answers():
    """Each verifier pays the gold and the forms reasoning-gym's scorer fully pays that are exact."""
    import reasoning_gym

    from grpokit.tasks.gym_verifiers import verify

    rewrites = {
        "puzzle24": lambda gold: [gold, f"({gold})", gold.replace(" ", "")],
        "complex_arithmetic": lambda gold: [gold, f"({gold})", re.sub(r"\.0+(?![0-9])", "", gold).replace(" ", "")],
        "number_sorting": lambda gold: [gold, gold.replace("'", "")],
        "game_of_life_halting": lambda gold: [gold, gold.lower(), f" {gold.upper()} "],
        "coin_flip": lambda gold: [gold],
    }
    for dataset, forms in rewrites.items():
        data = reasoning_gym.create_dataset(dataset, seed=1, size=40)
        for index in range(40):
            entry = data[index]
            for answer in forms(str(entry["answer"])):
                assert data.score_answer(answer, entry) == 1.0, (dataset, answer)
                assert verify(dataset, answer, entry) == 1.0, (dataset, answer)


def test_a_dataset_the_audit_finds_paying_a_probe_is_refused_naming_it(monkeypatch):
    from grpokit.tasks import gym_audit

    audited = {"problems": 32, "datasets": {"basic_arithmetic": {"raw": {"nan": 5}, "grpokit": {"nan": 5}}}}
    monkeypatch.setattr(gym_audit, "load_audit", lambda: audited)
    with pytest.raises(RecipeError, match="'basic_arithmetic' is refused: .*universal answer 'nan' on 5 of 32"):
        build_task("reasoning_gym", {"dataset": "basic_arithmetic"})
    with pytest.raises(RecipeError, match="'composite' is refused: .*past grpokit's verifiers"):
        build_task("reasoning_gym", {"dataset": "composite"})


def test_the_shipped_audit_covers_every_dataset():
    from reasoning_gym.factory import DATASETS

    from grpokit.tasks.gym_audit import load_audit, refusal

    audited = load_audit()["datasets"]
    assert set(audited) == set(DATASETS)
    # nothing grpokit scores pays a probe: a dataset whose path does is refused
    assert [name for name, result in audited.items() if result.get("grpokit") and refusal(name) is None] == []


def test_tasks_command_shows_the_probe_audit_per_dataset(capsys):
    from grpokit.cli.commands import main

    assert main(["tasks"]) == 0
    out = capsys.readouterr().out.split("probe audit")[1]
    assert "complex_arithmetic: grpokit verifier (reasoning-gym's scorer pays 'nan' on 32)" in out
    assert "composite: refused" in out
    assert "basic_arithmetic" in out.split("pays no probe")[1].splitlines()[0]
