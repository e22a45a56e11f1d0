import json
import re
import threading
from collections import Counter
from fractions import Fraction

import pytest

from grpokit.errors import RecipeError
from grpokit.rewards import make_reward, to_trl
from grpokit.rewards.redteam import check
from grpokit.sandbox.client import shared_sandbox
from grpokit.tasks import build_task
from grpokit.tasks.base import normalise_question
from grpokit.tasks.math_problems import boxed_answer, gsm8k_answer, math_score, math_scores
from tests.data_files import GSM8K, NUMINA, write_hub_folder, write_jsonl


@pytest.fixture(scope="module")
def numina_task(tmp_path_factory):
    path = write_jsonl(tmp_path_factory.mktemp("numina") / "numina.jsonl", NUMINA)
    return build_task("math", {"source": str(path), "validation_fraction": 0.1, "test_fraction": 0.3})


TABLE = [
    ("42", "42", 1.0),
    ("$42$ apples", "42", 1.0),
    ("\\frac{84}{2}", "42", 1.0),
    ("0.5", "\\frac{1}{2}", 1.0),
    ("1/2", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", 1.0),
    ("x = 2", "x = 2", 1.0),
    ("2", "x = 2", 1.0),
    ("43", "42", 0.0),
    ("0.50001", "\\frac{1}{2}", 0.0),
    ("42, 43", "42", 0.0),
    ("43 or 42", "42", 0.0),
    ("4 2", "42", 0.0),
    ("４２", "42", 0.0),
    ("", "42", 0.0),
    (None, "42", 0.0),
    ("9**9**9**9", "42", 0.0),
    ("__import__('os').system('touch pwned.txt')", "42", 0.0),
    ("x" * 5000, "42", 0.0),
]


@pytest.mark.parametrize(("answer", "gold", "score"), TABLE)
def test_math_verify_equivalence_is_strict(answer, gold, score):
    assert math_score(answer, gold) == score


def test_a_batch_gives_the_tables_verdicts_in_one_round_trip():
    box = shared_sandbox()
    before = box.requests
    assert math_scores([a for a, _, _ in TABLE], [g for _, g, _ in TABLE]) == [s for _, _, s in TABLE]
    assert box.requests - before == 1  # one per check before batching (the screen refuses the rest unsent)


def test_batched_task_scores_equal_one_by_one_on_right_wrong_and_adversarial_completions(numina_task):
    task = numina_task
    completions, examples = [], []
    for row in task.dataset("train", 6) + task.dataset("test", 2):
        gold = row["answer"]
        answers = [gold, f"\\boxed{{{gold}}}", f"${gold}$", f"{gold} + 1", "7/3", "", "<answer>1</answer>"]
        texts = [f"<think>x</think><answer>{a}</answer>" for a in answers] + [c for _, c in task.adversarial(row)]
        texts += [task.demonstration(row), "no tags at all " + gold]
        completions += texts
        examples += [row] * len(texts)
    batched = task.score_many(completions, examples)
    assert batched == [task.score(c, e) for c, e in zip(completions, examples, strict=True)]
    assert 0 < sum(batched) < len(batched) / 2
    reward = make_reward("correctness", task)
    trl_reward = to_trl("correctness", reward)
    before = shared_sandbox().requests
    assert trl_reward([""] * len(completions), completions, answer=[e["answer"] for e in examples]) == batched
    assert shared_sandbox().requests - before <= 2, "TRL's batch goes to the sandbox whole"


def test_gold_extraction():
    assert boxed_answer("a $\\boxed{1}$ then $\\boxed{\\frac{3}{4}}$") == "\\frac{3}{4}"
    assert boxed_answer("\\boxed {x^{2}}") == "x^{2}"
    assert boxed_answer("no box") is None and boxed_answer("\\boxed{unclosed") is None
    assert gsm8k_answer("so <<2*3=6>>6\n#### 1,234") == "1234"
    assert gsm8k_answer("no marker") is None


def test_numina_file_split_score_and_unparsable_gold_reported(numina_task):
    task = numina_task
    train = task.dataset("train", 20)
    held_out = task.dataset("test", 5)
    assert not {r["question"] for r in train} & {r["question"] for r in held_out}
    row = (
        next(r for r in train + held_out if r["answer"] == "\\frac{1}{2}")
        if any(r["answer"] == "\\frac{1}{2}" for r in train + held_out)
        else train[0]
    )
    assert task.score(f"<think>...</think><answer>{row['answer']}</answer>", row) == 1.0
    assert task.score("<think>...</think><answer>-1000</answer>", row) == 0.0
    assert task.score(task.demonstration(row), row) == 1.0
    # Read every row once: the two rows without a readable gold are skipped and reported, not scored.
    for split in ("train", "validation", "test"):
        task.dataset(split, len(task.checked.rows[split]), distinct=False)
    (note,) = task.notes()
    assert "skipped 2 of 43 checked rows" in note
    every = task.checked.rows["train"] + task.checked.rows["validation"] + task.checked.rows["test"]
    assert sum(r["answer"] is None for r in every) == 1  # the row with no \boxed at all


def test_gsm8k_csv_and_parquet_files(tmp_path):
    import csv

    import pyarrow as pa
    import pyarrow.parquet as pq

    csv_path = tmp_path / "gsm8k.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["question", "answer"])
        writer.writeheader()
        writer.writerows(GSM8K)
    parquet_path = tmp_path / "gsm8k.parquet"
    pq.write_table(pa.Table.from_pylist(GSM8K), parquet_path)
    for path in (csv_path, parquet_path):
        task = build_task("math", {"source": str(path), "schema": "gsm8k"})
        row = task.example("train", 0)
        assert row["answer"].isdigit() and "<<" not in task.demonstration(row)
        assert task.score(f"<think>x</think><answer>{int(row['answer']):,}</answer>", row) == 1.0
        assert task.score(task.demonstration(row), row) == 1.0


def test_hub_path_reads_named_splits(tmp_path):
    """The hub code path (`datasets.load_dataset`), on a local folder laid out like a hub repo."""
    folder = write_hub_folder(tmp_path / "numina_repo", NUMINA[:30])
    task = build_task("math", {"source": str(folder), "train_split": "train", "test_split": "test"})
    assert [r["question"] for r in task.dataset("test", 8)] == [r["problem"] for r in NUMINA[:8]]
    assert task.example("train", 0)["question"] == NUMINA[8]["problem"]
    limited = build_task("math", {"source": str(folder), "limit": 5})
    assert len(limited.checked.rows["train"]) == 5


def test_scoring_from_other_threads_keeps_its_timeout():
    """TRL may call rewards off the main thread, where signal-based timeouts are off: ours still hold."""
    results = []
    threads = [threading.Thread(target=lambda: results.append(math_score("0.5", "\\frac{1}{2}"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [1.0] * 4


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "source is required"),
        ({"source": "missing.jsonl"}, "dataset file not found: missing.jsonl"),
        ({"source": "x.jsonl", "schema": "mmlu"}, "schema='mmlu'"),
    ],
)
def test_bad_sources_fail_clearly(params, message):
    with pytest.raises(RecipeError, match=message):
        build_task("math", params)


def test_a_hub_source_loads_on_first_use_and_fails_clearly_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = build_task("math", {"source": "no/such-dataset-offline"})  # validating a recipe downloads nothing
    with pytest.raises(ValueError, match="data set 'no/such-dataset-offline' is not in the local cache"):
        task.example("test", 0)


def test_wrong_schema_names_row_and_column(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"question": "q", "text": "a"}])
    with pytest.raises(RecipeError, match="cannot tell the schema from the columns question, text"):
        build_task("math", {"source": str(path)})
    with pytest.raises(RecipeError, match=r"x.jsonl line 1 has no column 'problem' .*this is the numina schema"):
        build_task("math", {"source": str(path), "schema": "numina"})


def test_rewards_check_finds_nothing(numina_task):
    rewards = [(n, 1.0, make_reward(n, numina_task)) for n in ("format", "tag_count", "correctness")]
    findings = check(numina_task, rewards, numina_task.dataset("test", 3), slow_seconds=None)  # time: a load guess
    assert findings == [], "\n".join(map(str, findings))


def test_shipped_word_problems_are_reproducible_and_all_golds_parse():
    from tests.conftest import ROOT as root
    from tests.conftest import load_script

    module = load_script("scripts/make_word_problems.py")
    shipped = (root / "data" / "word_problems.jsonl").read_text(encoding="utf-8")
    assert shipped == module.render(module.rows()), (
        "data/word_problems.jsonl is stale: run scripts/make_word_problems.py"
    )
    task = build_task("math", {"source": str(root / "data" / "word_problems.jsonl"), "schema": "numina"})
    for split in ("train", "validation", "test"):
        rows = task.dataset(split, 100)
        assert all(task.score(task.demonstration(r), r) == 1.0 for r in rows)
    assert task.notes() == []


def _number(text: str) -> Fraction:
    """`7`, `2.5` or `\\frac{3}{4}`, read exactly; anything else fails the test."""
    frac = re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", text)
    if frac:
        return Fraction(int(frac[1]), int(frac[2]))
    assert re.fullmatch(r"\d+(\.\d+)?", text), f"not a number: {text!r}"
    return Fraction(text)


def _value(text: str) -> Fraction:
    """One side of a worked step: a number, or two numbers joined by +, -, \\times or /."""
    parts = re.split(r" (\+|-|\\times|/) ", text.strip())
    if len(parts) == 1:
        return _number(parts[0])
    assert len(parts) == 3, f"more than one operation in {text!r}"
    a, op, b = _number(parts[0]), parts[1], _number(parts[2])
    return {"+": a + b, "-": a - b, "\\times": a * b, "/": a / b}[op]


def test_every_step_of_the_shipped_word_problems_is_one_true_operation_and_ends_at_the_answer():
    from tests.conftest import ROOT as root

    rows = [
        json.loads(line) for line in (root / "data" / "word_problems.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert len(rows) == 3000
    assert len({normalise_question(r["problem"]) for r in rows}) == len(rows), "a question appears twice"
    forms = Counter()
    for row in rows:
        *steps, boxed = re.findall(r"\$([^$]*)\$", row["solution"])
        gold = re.fullmatch(r"\\boxed\{(.*)\}", boxed)[1]
        assert steps, row
        for step in steps:
            sides = [side for side in step.split(" = ") if side.strip() != "x"]
            if len(sides) == 1:  # a division that is its own value: `\\frac{9}{7}`, already in lowest terms
                frac = re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", sides[0])
                assert frac and _number(sides[0]).denominator == int(frac[2]) > 1, f"a bare {step!r} in {row}"
                continue
            assert len({_value(side) for side in sides}) == 1, f"false step {step!r} in {row}"
        last = _value(steps[-1].split(" = ")[-1])
        assert last == _number(gold.removesuffix("\\%")), row
        forms[
            "percent"
            if gold.endswith("\\%")
            else "fraction"
            if "frac" in gold
            else "decimal"
            if "." in gold
            else "integer"
        ] += 1
    # The answer forms GSM8K and NuminaMath use, each a real share of the file.
    assert min(forms.values()) >= 150 and set(forms) == {"integer", "fraction", "decimal", "percent"}, forms
