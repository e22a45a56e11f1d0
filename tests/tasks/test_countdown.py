from collections import Counter
from itertools import permutations, product

import pytest

from grpokit.errors import RecipeError
from grpokit.sandbox.expressions import evaluate_expression
from grpokit.tasks import build_task
from grpokit.tasks.countdown import _worked, backtrack_steps, landing_chains, last_step_tries, load_rows, simplest_chain
from grpokit.tasks.parsing import extract_answer


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


def test_worked_demonstrations_fold_the_numbers_in_one_true_step_at_a_time():
    params = {"min_numbers": 3, "max_numbers": 4, "max_value": 20, "max_target": 50}
    worked = build_task("countdown", {**params, "demonstration": "worked"})
    chains = 0
    for row in worked.dataset("train", 150, distinct=False):
        demonstration = worked.demonstration(row)
        assert worked.score(demonstration, row) == 1.0
        steps = demonstration.removeprefix("<think>").split("</think>")[0].removesuffix(".").split(", ")
        assert steps[-1].endswith(f"= {row['target']}")
        for step in steps:
            left, right = step.split(" = ")
            assert evaluate_expression(left, allow_unary_minus=True).value == int(right), step  # every step true
        chain = simplest_chain(row["nums"], row["target"])
        assert (chain and chain[1]) == _brute_force_chain(row["nums"], row["target"])
        if chain is not None:
            chains += 1
            assert steps == chain[1] and extract_answer(demonstration) == chain[0]
            for step in steps:
                high, _, low, _, result = step.split(" ")
                assert int(high) >= int(low) >= 0 and int(result) >= 0, step  # larger first, whole numbers >= 0
        else:  # two pairs joined: the generator's own solution, worked
            assert steps == _worked(row["solution"])
    assert 140 <= chains < 150  # most problems fold in a chain; some 4-number ones only in pairs


def _beside_worked(demonstration, problems=150):
    """Each problem's `demonstration` thought and its `worked` one (3 numbers), both ending on the same right
    answer: (row, its steps, worked's steps)."""
    params = {"min_numbers": 3, "max_numbers": 3, "max_value": 20, "max_target": 50}
    task = build_task("countdown", {**params, "demonstration": demonstration})
    worked = build_task("countdown", {**params, "demonstration": "worked"})
    for row in task.dataset("train", problems, distinct=False):
        text, plain = task.demonstration(row), worked.demonstration(row)
        assert task.score(text, row) == 1.0
        assert extract_answer(text) == extract_answer(plain)  # the same solution, the same answer
        yield row, _thought_steps(text), _thought_steps(plain)


def _thought_steps(demonstration):
    return demonstration.removeprefix("<think>").split("</think>")[0].removesuffix(".").split(", ")


def test_tries_demonstrations_find_the_last_step_by_trying_each_operator_in_turn():
    tried = Counter()
    for row, steps, chain in _beside_worked("tries"):
        assert steps[: len(chain) - 1] == chain[:-1] and steps[-1] == chain[-1]
        last = chain[-1].split(" ")
        ops = []
        for step in steps[len(chain) - 1 :]:
            high, op, low, _, result = step.split(" ")
            assert (high, low) == (last[0], last[2])  # the same two values each try
            assert evaluate_expression(f"{high} {op} {low}").value == int(result), step  # every try true
            ops.append(op)
            if step != steps[-1]:
                assert int(result) != row["target"], step  # no try before the last lands
        assert ops == sorted(ops, key="+-*/".index) and len(set(ops)) == len(ops)  # + - * / in turn
        tried[len(ops) - 1] += 1
    assert tried[0] and tried[1] and tried[2]  # landed at once, after one try, after two


def test_backtrack_demonstrations_try_every_first_step_in_turn_until_one_lands():
    first_steps_tried = Counter()
    for row, steps, chain in _beside_worked("backtrack"):
        # The same search written as two loops: the simplest chain's first two numbers with + - * / in
        # turn, each whole result tried with the third number until a try lands on the target.
        a, b = (int(x) for x in chain[0].split(" ")[:3:2])
        (c,) = (Counter(row["nums"]) - Counter([a, b])).elements()
        expected, landed = [], False
        for first in "+-*/":
            if landed or (first == "/" and a % b):
                continue
            value = int(evaluate_expression(f"{a} {first} {b}").value)
            expected.append(f"{a} {first} {b} = {value}")
            high, low = max(value, c), min(value, c)
            for last in "+-*/":
                if landed or (last == "/" and (low == 0 or high % low)):
                    continue
                result = int(evaluate_expression(f"{high} {last} {low}").value)
                expected.append(f"{high} {last} {low} = {result}")
                landed = result == row["target"]
        assert steps == expected and steps[-1] == chain[-1]
        first_steps_tried[sum(step.split(" ")[:3:2] == chain[0].split(" ")[:3:2] for step in steps)] += 1
    assert first_steps_tried[1] and first_steps_tried[2] and first_steps_tried[3]


def test_backtrack_falls_back_to_the_last_step_tries_when_the_search_is_long():
    params = {"min_numbers": 4, "max_numbers": 4, "max_value": 20, "max_target": 50}
    backtrack = build_task("countdown", {**params, "demonstration": "backtrack"})
    tries = build_task("countdown", {**params, "demonstration": "tries"})
    long_searches = 0
    for row in backtrack.dataset("train", 40, distinct=False):
        if simplest_chain(row["nums"], row["target"]) is None:
            continue
        searched = backtrack_steps(row["nums"], row["target"])
        if searched is None:
            long_searches += 1
            assert backtrack.demonstration(row) == tries.demonstration(row)
        else:
            assert len(searched) <= 20 and _thought_steps(backtrack.demonstration(row)) == searched
    assert long_searches


def _brute_force_chains(nums, target):
    """Every order and every operator sequence that lands, each distinct list of steps once, by its earliest
    order, then the operators in the order + - * /."""
    found = {}
    for order in permutations(range(len(nums))):
        for ops in product("+-*/", repeat=len(nums) - 1):
            value, steps = nums[order[0]], []
            for op, i in zip(ops, order[1:], strict=True):
                high, low = max(value, nums[i]), min(value, nums[i])
                if op == "/" and (low == 0 or high % low):
                    break
                value = {"+": high + low, "-": high - low, "*": high * low, "/": high // max(low, 1)}[op]
                steps.append(f"{high} {op} {low} = {value}")
            else:
                key = (order, ["+-*/".index(op) for op in ops])
                if value == target and (tuple(steps) not in found or key < found[tuple(steps)]):
                    found[tuple(steps)] = key
    return [list(steps) for steps, _ in sorted(found.items(), key=lambda item: item[1])]


def _brute_force_chain(nums, target):
    chains = _brute_force_chains(nums, target)
    return chains[0] if chains else None


def test_landing_chains_are_every_chain_that_reaches_the_target():
    params = {"min_numbers": 3, "max_numbers": 4, "max_value": 20, "max_target": 50}
    task = build_task("countdown", params)
    several = 0
    for row in task.dataset("train", 60, distinct=False):
        chains = landing_chains(row["nums"], row["target"])
        assert [steps for _, steps in chains] == _brute_force_chains(row["nums"], row["target"])
        for expression, steps in chains:
            assert evaluate_expression(expression).value == row["target"] and steps[-1].endswith(f"= {row['target']}")
        several += len(chains) > 1
    assert several > 20


def test_tries_on_any_chain_vary_the_first_step_across_problems():
    params = {"min_numbers": 3, "max_numbers": 3, "max_value": 20, "max_target": 50, "demonstration": "tries"}
    simplest, varied = build_task("countdown", params), build_task("countdown", {**params, "chain": "any"})
    differ = 0
    for row in varied.dataset("train", 150, distinct=False):
        demonstration = varied.demonstration(row)
        assert demonstration == varied.demonstration(row) and varied.score(demonstration, row) == 1.0
        steps = _thought_steps(demonstration)
        (drawn,) = [c for c in landing_chains(row["nums"], row["target"]) if c[1] == [steps[0], steps[-1]]]
        assert extract_answer(demonstration) == drawn[0]
        assert steps[1:] == last_step_tries(drawn[1][1])  # the drawn chain's last step, tried as in "tries"
        differ += demonstration != simplest.demonstration(row)
    assert 30 < differ < 150  # a problem with one landing chain writes it either way


def test_search_keeps_the_problems():
    params = {"min_numbers": 3, "max_numbers": 3, "max_value": 20, "max_target": 50}
    search = build_task("countdown", {**params, "demonstration": "search"})
    assert search.dataset("test", 50) == build_task("countdown", params).dataset("test", 50)


def test_deterministic_and_split_apart(task):
    assert task.example("train", 5) == build_task("countdown").example("train", 5)
    train = {(tuple(sorted(r["nums"])), r["target"]) for r in task.dataset("train", 500, distinct=False)}
    held_out = {(tuple(sorted(r["nums"])), r["target"]) for r in task.dataset("test", 100)}
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
    with pytest.raises(
        RecipeError, match="demonstration='trace'; use one of solution, worked, tries, backtrack, search"
    ):
        build_task("countdown", {"demonstration": "trace"})
    with pytest.raises(RecipeError, match="chain='any' with demonstration='solution'; it applies to worked and tries"):
        build_task("countdown", {"chain": "any"})


def test_loads_the_hub_schema_from_a_file_and_a_hub_style_folder(tmp_path):
    from tests.data_files import write_hub_folder, write_jsonl

    rows = [{"nums": [i, i + 1, 2], "target": 2 * i + 3} for i in range(1, 60)]
    path = write_jsonl(tmp_path / "countdown.jsonl", rows)
    folder = write_hub_folder(tmp_path / "repo", rows, eval_rows=0)
    for source in (str(path), str(folder)):
        task = build_task("countdown", {"source": source, "limit": 50})
        seen = task.dataset("train", 10) + task.dataset("test", 2)
        assert {(tuple(r["nums"]), r["target"]) for r in seen} <= {(tuple(r["nums"]), r["target"]) for r in rows}
        row = seen[0]
        assert task.score(f"<think>x</think><answer>{row['nums'][0]} + {row['nums'][1]} + 2</answer>", row) == 1.0
    (tmp_path / "bad.jsonl").write_text('{"numbers": [1, 2], "target": 3}\n', encoding="utf-8")
    with pytest.raises(RecipeError, match=r"bad.jsonl line 1 has no column 'nums'"):
        build_task("countdown", {"source": str(tmp_path / "bad.jsonl")})


def test_answer_operators_counts_products_and_quotients_in_a_runs_answers(tmp_path, capsys):
    """scripts/answer_operators.py: the share of (right) answers that use `*` or `/` (issue 56's figure)."""
    import json

    from tests.conftest import load_script

    script = load_script("scripts/answer_operators.py")
    samples = [
        {"completion": "<think>t</think><answer>(3 + 4) * 2</answer>", "correct": True},
        {"completion": "<think>t</think><answer>12 / 4 + 1</answer>", "correct": True},
        {"completion": "<think>t</think><answer>(12 + 4) - 1</answer>", "correct": True},
        {"completion": "<think>t</think><answer>3 × 4 ÷ 2</answer>", "correct": False},
        {"completion": "no answer at all", "correct": False},
    ]
    table = script.count(samples)
    assert table["right"] == {"answers": 3, "product": 1, "quotient": 1, "either": 2}
    assert table["all"] == {"answers": 4, "product": 2, "quotient": 2, "either": 3}
    (tmp_path / "eval_after.json").write_text(json.dumps({"samples": samples}), encoding="utf-8")
    assert script.main([str(tmp_path)]) == 0
    assert "| right | 3 | 1 (33%) | 1 (33%) | 2 (67%) | 1 (33%) |" in capsys.readouterr().out
    assert script.main([str(tmp_path), "--stage", "warmup"]) == 2
