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


def solved_rows(n=60):
    return [
        {
            "question": f"Ann buys {i} pens at 3 dollars each. How much?",
            "answer": str(3 * i),
            "solution": f"{i} * 3 = {3 * i}.",
        }
        for i in range(1, n + 1)
    ]


def test_a_solution_column_gives_demonstrations_in_the_recipes_tags(tmp_path):
    from grpokit.tasks.parsing import Tags

    path = write_jsonl(tmp_path / "qa.jsonl", solved_rows())
    params = {"path": str(path), "solution_column": "solution", "checker": "numeric"}
    task = build_task("custom", params)
    row = task.example("train", 0)
    i = int(row["answer"]) // 3
    assert task.demonstration(row) == f"<think>{i} * 3 = {3 * i}.</think><answer>{3 * i}</answer>"
    assert task.score(task.demonstration(row), row) == 1.0
    reasoning = build_task("custom", params, Tags(think="reasoning"))
    assert reasoning.demonstration(row) == f"<reasoning>{i} * 3 = {3 * i}.</reasoning><answer>{3 * i}</answer>"
    # Without the column: no demonstrations, unless the bare answers are asked for.
    assert build_task("custom", {"path": str(path)}).demonstration(row) is None
    bare = build_task("custom", {"path": str(path), "demonstrate_answers": True})
    assert (
        bare.demonstration(bare.example("train", 0))
        == f"<think></think><answer>{bare.example('train', 0)['answer']}</answer>"
    )


def test_worked_solutions_are_the_steps_the_steps_reward_pays(tmp_path):
    """Solutions written as `x op y = z` equations are each row's `steps`: a thought earns a share per step
    written right, 0 with a false equation; the row's own demonstration earns it all."""
    rows = [
        {
            "question": f"Ann buys {i} pens at 3 dollars and pays with 100. Change?",
            "answer": str(100 - 3 * i),
            "solution": f"{i} * 3 = {3 * i}. 100 - {3 * i} = {100 - 3 * i}.",
        }
        for i in range(1, 31)
    ] + [
        {"question": f"{4 * i} sweets shared by 4. Each?", "answer": str(i), "solution": f"{4 * i} / 4 = {i}."}
        for i in range(1, 31)
    ]
    task = build_task("custom", {"path": str(write_jsonl(tmp_path / "qa.jsonl", rows)), "solution_column": "solution"})
    assert task.worked_steps
    reward = make_reward("steps", task)
    assert all(reward(task.demonstration(row), row) == 1.0 for row in task.rows)
    row = next(r for r in task.rows if r["question"].startswith("Ann buys 7 "))
    assert row["steps"] == ["7 * 3 = 21. 100 - 21 = 79."]
    assert reward("<think>7 * 3 = 21. So 79.</think><answer>79</answer>", row) == 0.5
    assert reward("<think>7 * 3 = 21. 100 - 21 = 89.</think><answer>89</answer>", row) == 0.0
    share = next(r for r in task.rows if r["question"].startswith("28 sweets"))
    assert reward("<think>28 / 4 = 7.</think><answer>7</answer>", share) == 1.0
    assert reward("<think>28 / 4 = 6.</think><answer>6</answer>", share) == 0.0
    weights = [(n, 1.0, make_reward(n, task)) for n in ("format", "steps", "correctness")]
    assert check(task, weights, task.rows[:8]) == []  # the gaming battery finds nothing with steps added


@pytest.mark.parametrize(
    ("solution", "message"),
    [
        (None, "set task.params.solution_column"),
        (lambda i: f"Multiply {i} by 3.", r"60 of 60 rows have no worked solution written as `x op y = z`.*line 1"),
        (lambda i: f"{i} * 3 = {3 * i}." if i > 3 else f"{i} * 3 = {3 * i + 1}.", None),  # 3 false of 60: allowed
    ],
)
def test_the_steps_reward_needs_solutions_written_as_equations(tmp_path, solution, message):
    rows = [{"question": f"{i} pens at 3 each?", "answer": str(3 * i)} for i in range(1, 61)]
    params = {"path": str(tmp_path / "qa.jsonl")}
    if solution is not None:
        for i, row in enumerate(rows, 1):
            row["solution"] = solution(i)
        params["solution_column"] = "solution"
    task = build_task("custom", {**params, "path": str(write_jsonl(tmp_path / "qa.jsonl", rows))})
    if message is None:
        assert task.worked_steps and sum(not row["steps"] for row in task.rows) == 3
        make_reward("steps", task)
        return
    assert not task.worked_steps
    with pytest.raises(ValueError, match=f"reward 'steps' needs .*{message}"):
        make_reward("steps", task)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda rows: rows[4].pop("solution"),
            r"qa.jsonl line 5 has no column 'solution' .*set task.params.solution_column",
        ),
        (lambda rows: rows[6].update(solution="  "), r"qa.jsonl line 7 column 'solution' is empty"),
        (
            lambda rows: rows[2].update(solution="1 * 3 = 3.</think><answer>999"),
            r"qa.jsonl line 3 column 'solution': the worked solution holds the tag </think>",
        ),
    ],
)
def test_a_bad_solution_names_file_row_and_column(tmp_path, change, message):
    rows = solved_rows()
    change(rows)
    path = write_jsonl(tmp_path / "qa.jsonl", rows)
    with pytest.raises(RecipeError, match=message):
        build_task("custom", {"path": str(path), "solution_column": "solution"})


def recipe_on(path, stages, **params):
    return {
        "task": {"name": "custom", "params": {"path": str(path), **params}},
        "rewards": [{"name": "format"}, {"name": "correctness"}],
        "grpo": {"num_generations": 4, "per_device_train_batch_size": 8, "bf16": False},
        "stages": stages,
    }


def test_an_sft_stage_without_solutions_is_refused_naming_the_fix(tmp_path):
    from grpokit.recipe.load import build_recipe

    stages = [{"name": "warmup", "kind": "sft"}, {"name": "grpo"}]
    path = write_jsonl(tmp_path / "qa.jsonl", solved_rows())
    with pytest.raises(
        RecipeError, match=r"cannot write demonstrations, so it has no sft stage; set task.params.solution_column"
    ):
        build_recipe(recipe_on(path, stages))
    assert build_recipe(recipe_on(path, stages, solution_column="solution")).stages[0].kind == "sft"
    assert build_recipe(recipe_on(path, stages, demonstrate_answers=True)).stages[0].kind == "sft"
    # The demonstrations open with the thought tag, so they follow a prompt that prefills it (R1-zero style).
    prefilled = recipe_on(path, stages, solution_column="solution")
    prefilled["task"]["prefill_think"] = True
    assert build_recipe(prefilled).task.prefill_think
    # Conversations where one reply lacks a worked solution: the message says which.
    chats = [
        {
            "messages": [
                {"role": "user", "content": r["question"]},
                {"role": "assistant", "content": f"<think>{r['solution']}</think><answer>{r['answer']}</answer>"},
            ]
        }
        for r in solved_rows()
    ]
    chats[9]["messages"][1]["content"] = "27"
    chat_path = write_jsonl(tmp_path / "chat.jsonl", chats)
    with pytest.raises(RecipeError, match=r"1 of 60 rows have no worked solution \(first: .*chat.jsonl line 10\)"):
        build_recipe(recipe_on(chat_path, stages))


def test_messages_rows_give_the_last_user_turn_and_the_reply(tmp_path):
    rows = [
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": f"What is {i} * 3?"},
                {"role": "assistant", "content": f"<think>\n{i} * 3 = {3 * i}.\n</think>\n<answer> {3 * i} </answer>"},
            ]
        }
        for i in range(1, 41)
    ]
    task = build_task("custom", {"path": str(write_jsonl(tmp_path / "chat.jsonl", rows)), "checker": "numeric"})
    row = task.example("train", 0)
    i = int(row["question"].split()[2])
    assert row["question"] == f"What is {i} * 3?" and row["answer"] == str(3 * i)
    assert row["solution"] == f"{i} * 3 = {3 * i}."
    assert task.demonstration(row) == f"<think>{i} * 3 = {3 * i}.</think><answer>{3 * i}</answer>"
    assert task.score(task.demonstration(row), row) == 1.0
    # A reply without answer tags is the answer itself, and gives no worked solution.
    plain = [
        {
            "messages": [
                {"role": "user", "content": f"Capital number {i}?"},
                {"role": "assistant", "content": f" City {i} "},
            ]
        }
        for i in range(40)
    ]
    task = build_task("custom", {"path": str(write_jsonl(tmp_path / "plain.jsonl", plain))})
    row = task.example("test", 0)
    assert row["answer"] == f"City {row['question'].split()[2].rstrip('?')}" and row["solution"] == ""
    assert task.demonstration(row) is None


def user(content):
    return {"role": "user", "content": content}


def assistant(content):
    return {"role": "assistant", "content": content}


def test_prompt_rows_as_text_or_messages_with_an_answer_or_a_completion(tmp_path):
    rows = []
    for i in range(60):
        question, tagged = f"What is {i} + 1?", f"<answer>{i + 1}</answer>"
        if i % 3 == 0:
            rows.append({"prompt": question, "answer": str(i + 1)})
        elif i % 3 == 1:
            rows.append({"prompt": [user(question)], "completion": [assistant(tagged)]})
        else:
            rows.append({"prompt": question, "completion": f"{i} + 1 = {i + 1}. {tagged}"})
    path = write_jsonl(tmp_path / "prompts.jsonl", rows)
    task = build_task("custom", {"path": str(path), "demonstrate_answers": True})
    by_question = {row["question"]: row for row in task.rows}
    assert len(by_question) == 60
    assert all(by_question[f"What is {i} + 1?"]["answer"] == str(i + 1) for i in range(60))
    assert by_question["What is 2 + 1?"]["solution"] == "2 + 1 = 3."
    assert by_question["What is 1 + 1?"]["solution"] == "" and by_question["What is 0 + 1?"]["solution"] == ""
    assert task.demonstration(by_question["What is 2 + 1?"]) == "<think>2 + 1 = 3.</think><answer>3</answer>"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"messages": "hello"}, r"line 1 column 'messages' is neither text nor a list of \{role, content\} turns"),
        ({"messages": [user("q")]}, r"line 1 column 'messages' has no assistant turn after the last user turn"),
        ({"messages": [assistant("a")]}, r"line 1 column 'messages' has no user turn"),
        (
            {"messages": [user("q"), assistant("x <answer> </answer>")]},
            r"line 1 column 'messages': the reply's last answer block is empty",
        ),
        ({"prompt": [{"role": "user", "content": 3}], "answer": "1"}, r"line 1 column 'prompt' is neither text"),
        ({"prompt": "q"}, r"line 1 has no column 'answer' .*answer_column, or give conversational rows"),
        ({"text": "q", "answer": "1"}, r"line 1 has no column 'question' .*question_column, or give conversational"),
    ],
)
def test_bad_conversational_rows_name_file_row_and_column(tmp_path, row, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [row])
    with pytest.raises(RecipeError, match=message):
        build_task("custom", {"path": str(path)})


def test_a_saved_dataset_folder_is_read_by_split(tmp_path):
    import datasets

    rows = solved_rows(40)
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    saved = {"path": str(tmp_path / "saved"), "solution_column": "solution", "test_fraction": 0.3}
    task = build_task("custom", saved)
    assert sorted(r["question"] for r in task.rows) == sorted(r["question"] for r in rows)
    assert task.rows[0]["where"] == f"{tmp_path / 'saved'} row 0"
    assert task.score(task.demonstration(task.example("test", 0)), task.example("test", 0)) == 1.0
    splits = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows[:5]), "extra": datasets.Dataset.from_list(rows[5:])}
    )
    splits.save_to_disk(str(tmp_path / "dict"))
    task = build_task("custom", {"path": str(tmp_path / "dict"), "split": "extra", "test_fraction": 0.3})
    assert {r["question"] for r in task.rows} == {r["question"] for r in rows[5:]}
    with pytest.raises(RecipeError, match=r"dict has no split 'test' \(it has: train, extra\)"):
        build_task("custom", {"path": str(tmp_path / "dict"), "split": "test"})
    # A folder laid out like a hub repo goes through datasets.load_dataset, its split by name.
    from tests.data_files import write_hub_folder

    hub_like = write_hub_folder(tmp_path / "repo", rows, eval_rows=30)
    task = build_task("custom", {"path": str(hub_like), "split": "test", "test_fraction": 0.3})
    assert {r["question"] for r in task.rows} == {r["question"] for r in rows[:30]}
    with pytest.raises(RecipeError, match="dataset folder not found"):
        build_task("custom", {"path": str(tmp_path / "gone" / "folder")})


def test_a_hub_id_is_read_on_first_use_and_fails_clearly_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = build_task("custom", {"path": "no/such-dataset-offline", "solution_column": "solution"})  # reads nothing
    with pytest.raises(ValueError, match="data set 'no/such-dataset-offline' is not in the local cache"):
        task.example("test", 0)


def test_the_shipped_shop_math_file_is_reproducible_and_every_answer_is_its_solutions_result(monkeypatch):
    import re

    from grpokit.recipe.load import load_recipe
    from grpokit.tasks import task_of
    from grpokit.tasks.base import normalise_question
    from tests.conftest import ROOT as root
    from tests.conftest import load_script

    module = load_script("scripts/make_shop_math.py")
    path = root / "data" / "shop_math.jsonl"
    shipped = path.read_text(encoding="utf-8")
    assert shipped == module.render(module.rows()), "data/shop_math.jsonl is stale: run scripts/make_shop_math.py"
    rows = [json.loads(line) for line in shipped.splitlines()]
    assert len(rows) == 800
    assert len({normalise_question(r["question"]) for r in rows}) == len(rows), "a question appears twice"
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}
    for row in rows:
        steps = re.findall(r"(-?\d+) ([-+*/]) (-?\d+) = (-?\d+)\.", row["solution"])
        assert steps and " ".join(f"{a} {op} {b} = {c}." for a, op, b, c in steps) == row["solution"], row
        assert all(ops[op](int(a), int(b)) == int(c) for a, op, b, c in steps), row
        assert re.findall(r"-?\d+", row["solution"])[-1] == row["answer"], row
    assert len({tuple(r["question"].split()[:2]) for r in rows}) > 50  # varied wording, not one template
    monkeypatch.chdir(root)  # the recipe's data path starts at the repository root
    recipe = load_recipe(root / "recipes" / "smollm2" / "custom_qa.yaml")
    task = task_of(recipe)
    assert len(task.dataset("test", recipe.eval.n)) == recipe.eval.n
    assert len(task.dataset("validation", recipe.eval.every_n)) == recipe.eval.every_n
    for row in task.dataset("train", 100):
        assert task.score(task.demonstration(row), row) == 1.0
