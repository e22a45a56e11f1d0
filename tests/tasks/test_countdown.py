from collections import Counter

import pytest

from grpokit.config import RecipeError
from grpokit.expressions import evaluate_expression
from grpokit.parsing import extract_answer
from grpokit.tasks import build_task
from grpokit.tasks.countdown import load_rows


@pytest.fixture(scope="module")
def task():
    return build_task("countdown")


def test_generated_instances_are_solvable_and_in_range(task):
    for row in task.dataset("train", 200, distinct=False):
        assert 3 <= len(row["nums"]) <= 4 and all(1 <= n <= 99 for n in row["nums"])
        assert 1 <= row["target"] <= 100
        solved = evaluate_expression(row["solution"])
        assert solved is not None and solved.value == row["target"]
        assert Counter(solved.numbers) == Counter(row["nums"])
        assert task.score(task.demonstration(row), row) == 1.0


@pytest.mark.parametrize("attempts", [0, 2])
def test_search_demonstrations_check_their_tries_and_end_on_the_solution(attempts):
    params = {"min_numbers": 3, "max_numbers": 3, "max_value": 20, "max_target": 50}
    search = build_task("countdown", {**params, "demonstration": "search", "search_attempts": attempts})
    tries_seen = Counter()
    for row in search.dataset("train", 100, distinct=False):
        demonstration = search.demonstration(row)
        assert search.score(demonstration, row) == 1.0
        assert demonstration == search.demonstration(row)  # the same problem, the same tries
        thought = demonstration.removeprefix("<think>").split("</think>")[0]
        *tries, solution = thought.removesuffix(".").split(". ")
        tries_seen[len(tries)] += 1
        for attempt in tries:
            steps, miss = attempt.rsplit(", not ", 1)
            assert int(miss) == row["target"]
            assert steps.rsplit(" = ", 1)[1] != str(row["target"])  # a try is a real miss
        for attempt in [*(t.rsplit(", not ", 1)[0] for t in tries), solution]:
            for step in attempt.split(", "):
                left, right = step.split(" = ")
                assert evaluate_expression(left, allow_unary_minus=True).value == int(right), step  # every step true
        assert solution.endswith(f"= {row['target']}")
    assert set(tries_seen) == set(range(attempts + 1))  # 0..attempts wrong tries, each count seen


def test_search_keeps_the_problems():
    params = {"min_numbers": 3, "max_numbers": 3, "max_value": 20, "max_target": 50}
    search = build_task("countdown", {**params, "demonstration": "search"})
    assert search.dataset("eval", 50) == build_task("countdown", params).dataset("eval", 50)


def test_deterministic_and_split_apart(task):
    assert task.example("train", 5) == build_task("countdown").example("train", 5)
    train = {(tuple(sorted(r["nums"])), r["target"]) for r in task.dataset("train", 500, distinct=False)}
    held_out = {(tuple(sorted(r["nums"])), r["target"]) for r in task.dataset("eval", 100)}
    assert not train & held_out


ROW = {"nums": [25, 5, 75, 2], "target": 20, "question": "q"}


@pytest.mark.parametrize(
    ("answer", "score"),
    [
        ("(75 - 25) / 5 * 2", 1.0),
        ("2 * (75 - 25) / 5", 1.0),
        ("(75 - 25) / 5 * 2 = 20", 1.0),  # a trailing "= target" is tolerated
        ("(75 - 25) / 5 * 2 = 21", 0.0),
        ("(75 - 25) / 5 * 2 = 120", 0.0),  # a wrong claim that merely ends in the target's digits
        ("(75 - 25) / 5 * 2 = 20 = 20", 0.0),
        ("75 - 25 - 5 * 2", 0.0),  # wrong value
        ("(75 - 25) / 5 * 2 + 0", 0.0),  # a number that was not given
        ("(75 - 25) / 5", 0.0),  # a number left unused
        ("(75 - 25) / 5 * 2 * 5 / 5", 0.0),  # numbers reused
        ("20", 0.0),  # the target echoed as the "equation"
        ("75 / 2 + 25 / 5 - 2", 0.0),
        ("__import__('os').system('touch pwned.txt')", 0.0),
        ("75**50**25**2", 0.0),
        ("(７５ - ２５) / ５ * ２", 0.0),
        ("", 0.0),
    ],
)
def test_score(task, answer, score):
    assert task.score(f"<think>working</think><answer>{answer}</answer>", ROW) == score


def test_answer_inside_think_does_not_count(task):
    assert task.score("<think><answer>(75 - 25) / 5 * 2</answer></think>", ROW) == 0.0
    assert extract_answer("<think>x</think><answer>(75 - 25) / 5 * 2</answer>") is not None


def test_loads_the_countdown_tasks_schema(task):
    rows = load_rows([{"nums": [44, 19, 35], "target": 98}, {"nums": ["3", "7"], "target": "21"}])
    assert rows[0]["target"] == 98 and rows[1]["nums"] == [3, 7]
    assert task.score("<think>x</think><answer>44 + 19 + 35</answer>", rows[0]) == 1.0
    with pytest.raises(ValueError, match="row 0 lacks 'nums'"):
        load_rows([{"numbers": [1], "target": 1}])


def test_bad_config(task):
    with pytest.raises(RecipeError, match="task.params"):
        build_task("countdown", {"min_numbers": 5, "max_numbers": 3})
    with pytest.raises(RecipeError, match="demonstration='trace'; use 'solution' or 'search'"):
        build_task("countdown", {"demonstration": "trace"})


def test_loads_the_hub_schema_from_a_file_and_a_hub_style_folder(tmp_path):
    from tests.data_files import write_hub_folder, write_jsonl

    rows = [{"nums": [i, i + 1, 2], "target": 2 * i + 3} for i in range(1, 60)]
    path = write_jsonl(tmp_path / "countdown.jsonl", rows)
    folder = write_hub_folder(tmp_path / "repo", rows, eval_rows=0)
    for source in (str(path), str(folder)):
        task = build_task("countdown", {"source": source, "limit": 50})
        seen = task.dataset("train", 10) + task.dataset("eval", 2)
        assert {(tuple(r["nums"]), r["target"]) for r in seen} <= {(tuple(r["nums"]), r["target"]) for r in rows}
        row = seen[0]
        assert task.score(f"<think>x</think><answer>{row['nums'][0]} + {row['nums'][1]} + 2</answer>", row) == 1.0
    (tmp_path / "bad.jsonl").write_text('{"numbers": [1, 2], "target": 3}\n', encoding="utf-8")
    with pytest.raises(RecipeError, match=r"bad.jsonl line 1 has no column 'nums'"):
        build_task("countdown", {"source": str(tmp_path / "bad.jsonl")})
