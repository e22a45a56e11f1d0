"""`grpokit init DATA`: a recipe sized to the user's data that loads, validates and trains."""

import csv
import json

import pytest

from grpokit.cli.commands import main
from grpokit.recipe.load import load_recipe
from grpokit.tasks import task_of


def write_csv(path, rows):
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def problems(n, solutions=True):
    rows = []
    for i in range(1, n + 1):
        row = {"Problem": f"A box holds {i} rows of 7 eggs. How many eggs?", "final_answer": str(7 * i)}
        if solutions:
            row["rationale"] = f"{i} * 7 = {7 * i}."
        rows.append(row)
    return rows


def held_out_counts(recipe):
    """Distinct questions per split of the recipe's task."""
    task = task_of(recipe)
    return {split: len({task.key(r) for r in rows}) for split, rows in task.splits.items()}


def test_init_guesses_columns_and_checker_and_writes_a_recipe_that_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "eggs.csv", problems(300))
    assert main(["init", "eggs.csv"]) == 0
    out = capsys.readouterr().out
    assert "Problem  (guessed)" in out and "final_answer  (guessed)" in out and "rationale  (guessed)" in out
    assert "numeric  (guessed: 100% of the answers are numbers)" in out
    assert "grpokit train eggs_grpo.yaml" in out
    text = (tmp_path / "eggs_grpo.yaml").read_text(encoding="utf-8")
    assert text.startswith("#") and "grpokit train eggs_grpo.yaml" in text.splitlines()[2]
    recipe = load_recipe(tmp_path / "eggs_grpo.yaml")
    params = recipe.task.params
    assert (params["question_column"], params["answer_column"], params["solution_column"]) == (
        "Problem",
        "final_answer",
        "rationale",
    )
    assert params["checker"] == "numeric" and recipe.model.name == "embedded" and recipe.lora.enabled
    assert [(s.name, s.kind) for s in recipe.stages] == [("warmup", "sft"), ("grpo", "grpo")]
    assert recipe.dynamic_sampling.guide
    assert [r.name for r in recipe.rewards] == ["format", "correctness"]
    assert "\n  # - {name: steps, weight: 0.5}\n" in text  # the solutions are equations: per-step credit offered
    uncommented = text.replace("  # - {name: steps, weight: 0.5}", "  - {name: steps, weight: 0.5}")
    (tmp_path / "steps.yaml").write_text(uncommented, encoding="utf-8")
    assert [r.name for r in load_recipe(tmp_path / "steps.yaml").rewards] == ["format", "correctness", "steps"]
    counts = held_out_counts(recipe)
    assert counts["validation"] >= 30 and counts["test"] >= 30  # min(50, 10% of 300)
    assert recipe.eval.n <= counts["test"] and recipe.eval.every_n <= counts["validation"]
    warmup, grpo = recipe.stages
    assert warmup.examples <= 3 * counts["train"] and warmup.steps == warmup.examples // 16
    assert 10 <= grpo.steps <= 55
    task = task_of(recipe)
    row = task.example("train", 0)
    assert task.score(task.demonstration(row), row) == 1.0


def test_without_solutions_text_answers_get_the_exact_checker_and_no_warmup(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rows = [{"question": f"Name of city {i}?", "answer": f"City {i}"} for i in range(80)]
    (tmp_path / "cities.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["init", "cities.jsonl", "--out", "sub/r.yaml"]) == 0
    assert "no warm-up (no worked solutions)" in capsys.readouterr().out
    recipe = load_recipe(tmp_path / "sub" / "r.yaml")
    assert recipe.task.params["checker"] == "exact" and "solution_column" not in recipe.task.params
    assert [s.kind for s in recipe.stages] == ["grpo"] and not recipe.dynamic_sampling.guide
    assert [r.name for r in recipe.rewards] == ["format", "correctness"]
    assert "name: steps" not in (tmp_path / "sub" / "r.yaml").read_text(encoding="utf-8")
    counts = held_out_counts(recipe)
    assert counts["validation"] >= 8 and counts["test"] >= 8  # min(50, 10% of 80)


def test_named_columns_and_checker_win_over_guesses(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rows = [{"q": f"Half of {2 * i}?", "a": str(i), "answer": "decoy", "how": f"{2 * i} / 2 = {i}."} for i in range(60)]
    write_csv(tmp_path / "half.csv", rows)
    args = ["init", "half.csv", "--question-column", "q", "--answer-column", "a", "--solution-column", "how"]
    assert main([*args, "--checker", "exact", "--out", "h.yaml"]) == 0  # numeric would be the guess
    out = capsys.readouterr().out
    assert "(guessed" not in out
    params = load_recipe(tmp_path / "h.yaml").task.params
    assert (params["question_column"], params["answer_column"], params["solution_column"]) == ("q", "a", "how")
    assert params["checker"] == "exact"


def test_conversations_give_a_recipe_that_reads_their_turns(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} * 4?"},
                {"role": "assistant", "content": f"<think>{i} * 4 = {4 * i}.</think><answer>{4 * i}</answer>"},
            ]
        }
        for i in range(100)
    ]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["init", "chat.jsonl"]) == 0
    recipe = load_recipe(tmp_path / "chat_grpo.yaml")
    assert recipe.task.params["question_column"] is None and recipe.task.params["answer_column"] is None
    assert [s.kind for s in recipe.stages] == ["sft", "grpo"] and recipe.task.params["checker"] == "numeric"


def test_init_refuses_to_overwrite_without_force(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "eggs.csv", problems(60))
    (tmp_path / "eggs_grpo.yaml").write_text("# mine\n", encoding="utf-8")
    assert main(["init", "eggs.csv"]) == 2
    err = capsys.readouterr().err
    assert "eggs_grpo.yaml exists" in err and "--force" in err
    assert (tmp_path / "eggs_grpo.yaml").read_text(encoding="utf-8") == "# mine\n"
    assert main(["init", "eggs.csv", "--force"]) == 0
    assert load_recipe(tmp_path / "eggs_grpo.yaml").task.name == "custom"


@pytest.mark.parametrize(
    ("rows", "args", "message"),
    [
        ([{"text": "q", "value": "1"}] * 30, [], "no question column among text, value; name it: --question-column"),
        (
            [{"question": "q", "value": "1"}] * 30,
            [],
            "no answer column among question, value; name it: --answer-column",
        ),
        ([{"question": f"q{i}", "answer": "1"} for i in range(19)], [], "19 distinct questions are too few"),
        ([{"question": "q", "answer": "1"}] * 30, ["--solution-column", "steps"], "line 1 has no column 'steps'"),
    ],
)
def test_init_errors_name_the_data_and_the_fix(tmp_path, monkeypatch, capsys, rows, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["init", "d.jsonl", *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "d_grpo.yaml").exists()


def test_init_then_one_sft_and_one_grpo_step_on_the_tiny_model(tiny_model_dir, tmp_path, monkeypatch):
    """The whole path a user takes, on 20 rows: init, then train (both stages) on the tiny random model."""
    from transformers import AutoTokenizer

    from grpokit.recipe.stages import plan_stages, stage_recipe
    from grpokit.stages import pipeline as train
    from grpokit.stages.sft import build_demonstrations

    monkeypatch.chdir(tmp_path)
    rows = [
        {"question": f"What is {i} + {i + 2}?", "answer": str(2 * i + 2), "solution": f"{i} + {i + 2} = {2 * i + 2}."}
        for i in range(1, 21)
    ]
    write_csv(tmp_path / "sums.csv", rows)
    assert main(["init", "sums.csv"]) == 0
    shrunk = [
        f"model.name={tiny_model_dir}",
        "lora.r=4",  # small rank: fewer parameters, same code path
        "stages.0.steps=1",  # one sft step and one GRPO step prove the wiring
        "stages.0.examples=4",
        "cold_start.batch_size=4",
        "cold_start.micro_batch=2",
        "stages.1.steps=1",
        "grpo.num_generations=4",  # 2 prompts x 4 completions, 2 of each trained
        "grpo.per_device_train_batch_size=8",
        "dynamic_sampling.downsample_to=2",
        "grpo.max_completion_length=12",  # short completions: the model is random anyway
        "grpo.bf16=false",
        "eval.n=2",  # a smoke-sized evaluation
        "eval.max_new_tokens=8",
        "eval.batch_size=2",
        f"output.dir={tmp_path / 'runs'}",
    ]
    recipe = load_recipe(tmp_path / "sums_grpo.yaml", shrunk)
    # The warm-up trains on the file's worked solutions, in the tags, after the prompt.
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    warmup = stage_recipe(recipe, plan_stages(recipe)[0])
    task = task_of(warmup)
    demo = build_demonstrations(task, tokenizer, warmup)[0]
    taught = tokenizer.decode([t for t, m in zip(demo["input_ids"], demo["completion_mask"], strict=True) if m])
    example = task.example("train", 1_000_000)
    assert taught == f"<think>{example['solution']}</think><answer>{example['answer']}</answer><|im_end|>"
    assert example["solution"] in {r["solution"] for r in rows}

    run_dir = train.main(recipe)
    stages = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert [(s["name"], s["kind"]) for s in stages] == [("before", "eval"), ("warmup", "sft"), ("grpo", "grpo")]
    assert (run_dir / "warmup" / "adapter" / "adapter_config.json").is_file()
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in logged} == {"warmup", "grpo"}
    assert [r["step"] for r in logged if r["stage"] == "grpo" and "reward" in r] == [1]


def test_solutions_in_words_warm_up_but_are_offered_no_steps_reward(tmp_path, monkeypatch):
    """The `steps` reward is offered only when the solutions are `x op y = z` equations it can read."""
    monkeypatch.chdir(tmp_path)
    rows = problems(120)
    for i, row in enumerate(rows, 1):
        row["rationale"] = f"There are {i} rows of seven eggs, so multiply."
    write_csv(tmp_path / "eggs.csv", rows)
    assert main(["init", "eggs.csv"]) == 0
    recipe = load_recipe(tmp_path / "eggs_grpo.yaml")
    assert [s.kind for s in recipe.stages] == ["sft", "grpo"]
    assert "name: steps" not in (tmp_path / "eggs_grpo.yaml").read_text(encoding="utf-8")
