import json

import pytest

from grpokit.errors import RecipeError
from grpokit.rewards import make_reward
from grpokit.rewards.redteam import check
from grpokit.tasks import build_task


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def qa_file(tmp_path):
    rows = [{"q": f"What is {i} + {i}?", "a": str(2 * i)} for i in range(100)]
    return write_jsonl(tmp_path / "qa.jsonl", rows)


def test_jsonl_with_named_columns_and_numeric_checker(qa_file):
    task = build_task(
        "custom", {"path": str(qa_file), "question_column": "q", "answer_column": "a", "checker": "numeric"}
    )
    train = {r["question"] for r in task.dataset("train", 30, distinct=False)}
    held_out = {r["question"] for r in task.dataset("test", 3)}
    assert not train & held_out
    row = task.example("train", 0)
    assert task.score(f"<think>x</think><answer>{row['answer']}.0</answer>", row) == 1.0
    assert task.score(f"<think>x</think><answer>{int(row['answer']) + 1}</answer>", row) == 0.0
    assert check(task, [(n, 1.0, make_reward(n, task)) for n in ("format", "correctness")], [row]) == []


def test_csv_with_exact_checker(tmp_path):
    path = tmp_path / "caps.csv"
    path.write_text(
        "question,answer\nCapital of France?,Paris\n" + "".join(f"Question {i}?,Answer {i}\n" for i in range(30)),
        encoding="utf-8",
    )
    task = build_task("custom", {"path": str(path), "test_fraction": 0.3})
    row = {"question": "Capital of France?", "answer": "Paris"}
    assert task.score("<think>x</think><answer> Paris </answer>", row) == 1.0
    assert task.score("<think>x</think><answer>paris</answer>", row) == 0.0
    assert task.score("<think>Paris</think>", row) == 0.0


@pytest.mark.parametrize(
    ("answer", "gold", "ok"),
    [
        ("42", "42", True),
        ("1,000", "1000", True),
        ("0.5", "1/2", True),
        ("-3", "-3", True),
        ("42.0000001", "42", False),
        ("4 2", "42", False),
        ("４２", "42", False),
        ("1e400", "1", False),
        ("nan", "nan", False),
        ("1/0", "1/0", False),
        ("9" * 100, "9" * 100, False),
        # the forms a right answer takes: bare decimal points, a unicode minus, spaced and signed fractions
        (".5", "0.5", True),
        ("5.", "5", True),
        ("\u22125", "-5", True),
        ("1 / 2", "0.5", True),
        ("-1/-2", "1/2", True),
        ("\\frac{1}{2}", "0.5", True),
        ("-\\frac{3}{4}", "-0.75", True),
        ("\\frac{1}{2}", "1/3", False),
        ("\\frac{a}{2}", "0.5", False),
        (".", "0", False),
        ("1/2/3", "1/6", False),
    ],
)
def test_numeric_checker(answer, gold, ok):
    from grpokit.tasks.custom import CustomTask

    assert CustomTask.check_numeric(answer, gold) is ok


@pytest.mark.parametrize(
    ("content", "params", "message"),
    [
        ('{"question": "q"}\n', {}, r"line 1 has no column 'answer' .*set task.params.answer_column"),
        ('{"question": "q", "answer": " "}\n', {}, "line 1 column 'answer' is empty"),
        ('{"question": "q", "answer": "1"}\nnot json\n', {}, "line 2 is not valid JSON"),
        ("", {}, "has no rows"),
        ('["a", "b"]\n', {}, "line 1 is not a JSON object"),
    ],
)
def test_bad_jsonl_files_name_file_row_and_column(tmp_path, content, params, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RecipeError, match=message):
        build_task("custom", {"path": str(path), **params})


def test_bad_csv_and_encoding(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("question,solution\nq1,1\n", encoding="utf-8")
    with pytest.raises(RecipeError, match=r"bad.csv row 2 has no column 'answer'"):
        build_task("custom", {"path": str(path)})
    latin = tmp_path / "latin.csv"
    latin.write_bytes("question,answer\ncaf\xe9,1\n".encode("latin-1"))
    with pytest.raises(RecipeError, match="is not UTF-8"):
        build_task("custom", {"path": str(latin)})
    with pytest.raises(RecipeError, match="not found"):
        build_task("custom", {"path": str(tmp_path / "missing.csv")})
    with pytest.raises(RecipeError, match="required"):
        build_task("custom", {})
    with pytest.raises(RecipeError, match="checker="):
        build_task("custom", {"path": str(path), "checker": "fuzzy"})
