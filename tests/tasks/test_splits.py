"""Every task splits on a canonical form of its problems: no computation, number set or question is in two
of train / validation / test, whatever order or spelling it is written in."""

import itertools
import json
from collections import defaultdict

import pytest

from grpokit.errors import RecipeError
from grpokit.tasks import build_task
from grpokit.tasks.base import SPLITS


def _value_form(nums, ops):
    """An independent canonical form of `a op b op c`: the sum's terms as a sorted tuple of (sign, sorted
    factors), found by evaluating precedence by hand rather than by the task's `computation`."""
    terms, sign, factors = [], 1, [nums[0]]
    for op, num in zip(ops, nums[1:], strict=True):
        if op == "*":
            factors.append(num)
        else:
            terms.append((sign, tuple(sorted(factors))))
            sign, factors = (1 if op == "+" else -1), [num]
    terms.append((sign, tuple(sorted(factors))))
    return tuple(sorted(terms))


def test_every_arithmetic_computation_lies_in_one_split_over_the_whole_space():
    """All 1,100 `a + b * c` / `a * b + c` expressions over 1..10: each computation's written forms
    (`3 + 4 * 5`, `4 * 5 + 3`, `3 + 5 * 4`, `5 * 4 + 3`) share one split, and every split is used."""
    task = build_task("arithmetic")
    splits_of = defaultdict(set)
    for a, b, c in itertools.product(range(1, 11), repeat=3):
        splits_of[_value_form([a, b, c], ["+", "*"])].add(task.split([a, b, c], ["+", "*"]))
        splits_of[_value_form([a, b, c], ["*", "+"])].add(task.split([a, b, c], ["*", "+"]))
    assert len(splits_of) == 550  # 10 addends x 55 unordered products
    assert all(len(found) == 1 for found in splits_of.values())
    sizes = {split: sum(found == {split} for found in splits_of.values()) for split in SPLITS}
    assert sizes["test"] > 80 and sizes["validation"] > 30 and sizes["train"] > 300


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"operators": ["+", "-", "*"], "all_operators": False, "min_value": -5, "max_value": 5},
        {"operands": 4, "operators": ["+", "*"]},
        {"addend_min": 11, "addend_max": 99},
    ],
)
def test_arithmetic_draws_share_no_computation_across_splits(params):
    task = build_task("arithmetic", params)
    forms = {}
    for split in SPLITS:
        rows = task.dataset(split, 600, distinct=False)
        forms[split] = {row["computation"] for row in rows}
        parsed = {
            _value_form([int(t.strip("()")) for t in row["expression"].split()[::2]], row["expression"].split()[1::2])
            for row in rows
        }
        forms[split + "/independent"] = parsed
    for a, b in itertools.combinations(SPLITS, 2):
        assert not forms[a] & forms[b]
        assert not forms[a + "/independent"] & forms[b + "/independent"]


def test_addend_range_moves_only_the_term_outside_the_product():
    task = build_task("arithmetic", {"addend_min": 11, "addend_max": 99})
    for row in task.dataset("test", 50):
        terms = row["expression"].split()
        addend = terms[0] if terms[1] == "+" else terms[4]
        factors = terms[2::2] if terms[1] == "+" else terms[0:3:2]
        assert 11 <= int(addend) <= 99
        assert all(1 <= int(f) <= 10 for f in factors)


def test_countdown_splits_on_the_number_multiset_and_target():
    task = build_task("countdown", {"min_numbers": 3, "max_numbers": 3, "max_value": 6, "max_target": 20})
    keys = {split: {task.key(row) for row in task.dataset(split, 300, distinct=False)} for split in SPLITS}
    for a, b in itertools.combinations(SPLITS, 2):
        assert not keys[a] & keys[b]
    assert task.key({"nums": [3, 1, 2], "target": 6}) == task.key({"nums": [2, 3, 1], "target": 6})


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def test_custom_and_math_split_on_normalised_question_text(tmp_path):
    """Copies of a question differing in case, spacing or a final question mark fall on one side."""
    rows = []
    for i in range(60):
        rows += [
            {"question": f"How many apples are {i} + 2 apples?", "answer": str(i + 2)},
            {"question": f"how many apples are {i}+2   apples", "answer": str(i + 2)},
        ]
    task = build_task("custom", {"path": _write(tmp_path / "qa.jsonl", rows)})
    where = defaultdict(set)
    for split in SPLITS:
        for row in task.splits[split]:
            where[task.key(row)].add(split)
    assert len(where) == 60 and all(len(found) == 1 for found in where.values())
    assert {split for found in where.values() for split in found} == set(SPLITS)

    numina = [{"problem": row["question"], "solution": f"So $\\boxed{{{row['answer']}}}$."} for row in rows]
    math = build_task("math", {"source": _write(tmp_path / "numina.jsonl", numina), "test_fraction": 0.2})
    where = defaultdict(set)
    for split in SPLITS:
        for row in math.checked.rows[split]:
            where[math.key(row)].add(split)
    assert len(where) == 60 and all(len(found) == 1 for found in where.values())


def test_math_drops_training_rows_whose_question_is_a_test_question(tmp_path):
    """A hub data set's test split is the test split; a training row asking a test question, written
    otherwise, is dropped from train and validation."""
    train = [{"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"} for i in range(40)]
    test = [{"question": "what is 3 + 1", "answer": "#### 4"}]  # train's fourth question, written otherwise
    (tmp_path / "repo" / "data").mkdir(parents=True)
    _write(tmp_path / "repo" / "data" / "train.jsonl", train)
    _write(tmp_path / "repo" / "data" / "test.jsonl", test)
    task = build_task("math", {"source": str(tmp_path / "repo"), "schema": "gsm8k"})
    rows = {split: task.checked.rows[split] for split in SPLITS}
    assert [row["question"] for row in rows["test"]] == ["what is 3 + 1"]
    assert len(rows["train"]) + len(rows["validation"]) == 39 and rows["validation"]
    keys = {split: {task.key(row) for row in rows[split]} for split in SPLITS}
    assert all(not keys[a] & keys[b] for a, b in itertools.combinations(SPLITS, 2))


def test_old_split_names_and_keys_fail_with_the_new_ones():
    task, old_name = build_task("arithmetic"), "eval"
    with pytest.raises(ValueError, match="'validation' for tuning and 'test' for reporting"):
        task.dataset(old_name, 5)
    with pytest.raises(RecipeError, match="validation_fraction .* test_fraction"):
        build_task("arithmetic", {"eval_fraction": 0.2})


def test_reasoning_gym_splits_on_normalised_question_text():
    pytest.importorskip("reasoning_gym")
    task = build_task("reasoning_gym", {"dataset": "basic_arithmetic", "size": 300})
    keys = {split: {task.key(task.example(split, i)) for i in range(60)} for split in SPLITS}
    for a, b in itertools.combinations(SPLITS, 2):
        assert not keys[a] & keys[b]
