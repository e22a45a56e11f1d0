"""The trainer wiring on a tiny random model: two GRPO steps move the LoRA weights, never the base."""

import json

import pytest
import torch

from grpokit.eval import evaluate
from grpokit.recipe.load import build_recipe
from grpokit.recipe.trl_args import build_grpo_config
from grpokit.rewards import REWARDS
from tests.conftest import tiny_recipe


@pytest.fixture
def length_reward(monkeypatch):
    """A reward that differs between completions of a random model, so advantages are non-zero."""

    def make_length(task):
        return lambda completion, example: min(len(completion), 40) / 40

    monkeypatch.setitem(REWARDS, "test_length", make_length)
    return "test_length"


def test_two_grpo_steps_change_lora_and_not_base(tiny_model_dir, tmp_path, length_reward):
    from trl import GRPOTrainer

    from grpokit.models.load import load_model
    from grpokit.rewards import make_reward, to_trl
    from grpokit.stages import pipeline as train
    from grpokit.tasks import build_task

    recipe = build_recipe(tiny_recipe(tiny_model_dir, tmp_path, rewards=[{"name": length_reward}]))
    model, tokenizer = load_model(recipe.model.name)
    model = train.attach_lora(model, recipe)
    task = build_task("arithmetic")
    data = train.build_train_dataset(task, tokenizer, recipe)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = GRPOTrainer(
        model=model,
        args=build_grpo_config(recipe, tmp_path / "grpo"),
        train_dataset=data,
        reward_funcs=[to_trl(length_reward, make_reward(length_reward, task))],
        processing_class=tokenizer,
    )
    trainer.train()

    after = dict(trainer.model.named_parameters())
    lora = [n for n in before if "lora_" in n]
    base = [n for n in before if "lora_" not in n]
    assert lora and base
    assert all(not torch.equal(before[n], after[n]) for n in lora if "lora_B" in n), "every LoRA B moved"
    assert any(not torch.equal(before[n], after[n]) for n in lora if "lora_A" in n)
    assert all(torch.equal(before[n], after[n]) for n in base), "base weights stay frozen"
    assert trainer.state.log_history[0]["rewards/test_length/mean"] > 0


def test_run_directory_holds_what_it_promises(tiny_model_dir, tmp_path, length_reward):
    from grpokit.stages import pipeline as train

    raw = tiny_recipe(
        tiny_model_dir,
        tmp_path,
        rewards=[{"name": "format", "weight": 0.5}, {"name": length_reward}],
        cold_start={"enabled": True},
    )
    run_dir = train.main(build_recipe(raw))

    for name in [
        "recipe.yaml",
        "train.log",
        "metrics.jsonl",
        "trainer_state.json",
        "eval_before.json",
        "eval_cold_start.json",
        "eval_grpo.json",
        "eval_after.json",
        "stages.json",
        "summary.json",
        "adapter/adapter_config.json",
        "cold_start/adapter/adapter_config.json",
        "curves.png",
        "report.html",
        "status.json",
    ]:
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    # TensorBoard by default, both stages.
    for stage in ("grpo", "cold_start"):
        assert list((run_dir / stage).glob("runs/*/events.out.tfevents.*")), stage
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in rows} == {"cold_start", "grpo"}
    assert [r["step"] for r in rows if r["stage"] == "grpo" and "reward" in r] == [1, 2]
    after = json.loads((run_dir / "eval_after.json").read_text())
    assert after["n"] == 6 and 0.0 <= after["accuracy"] <= 1.0 and len(after["samples"]) == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    stages = summary["stages"]
    assert [(s["name"], s["kind"]) for s in stages] == [("before", "eval"), ("cold_start", "sft"), ("grpo", "grpo")]
    assert all(s["n"] == 6 and 0.0 <= s["accuracy"] <= 1.0 and s["minutes"] >= 0 for s in stages)
    assert stages[2]["gain"] == stages[2]["accuracy"] - stages[1]["accuracy"] == summary["grpo_gain"]
    assert set(summary["evals"]) == {"before", "cold_start", "grpo", "after"}
    assert json.loads((run_dir / "stages.json").read_text()) == stages
    assert "grpo step 2/2" in (run_dir / "train.log").read_text()
    # The resolved recipe reloads as the same recipe.
    import yaml

    assert build_recipe(yaml.safe_load((run_dir / "recipe.yaml").read_text())).to_dict()["grpo"] == raw["grpo"]


def test_runs_never_overwrite_each_other(tmp_path, tiny_model_dir):
    from grpokit.stages import pipeline as train

    recipe = build_recipe(tiny_recipe(tiny_model_dir, tmp_path))
    first, second = train.make_run_dir(recipe), train.make_run_dir(recipe)
    assert first != second and first.is_dir() and second.is_dir()


def test_eval_command_reads_a_run_directory(tiny_model_dir, tmp_path, capsys):
    import yaml

    from grpokit.cli.commands import main
    from grpokit.stages import pipeline as train

    raw = tiny_recipe(tiny_model_dir, tmp_path)
    run_dir = train.main(build_recipe(raw))
    recipe_path = tmp_path / "recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(raw))
    assert main(["eval", str(recipe_path), "--model", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "eval/accuracy" in out and "eval/format_rate" in out


def test_eval_every_n_steps_is_logged_with_the_training_metrics(tiny_model_dir, tmp_path):
    from grpokit.stages import pipeline as train

    raw = tiny_recipe(tiny_model_dir, tmp_path, grpo={"max_steps": 3}, eval={"every": 1, "every_n": 2})
    run_dir = train.main(build_recipe(raw))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [1, 2]  # the final step is the "after" eval
    assert all(r["stage"] == "grpo" and 0.0 <= r["eval/format_rate"] <= 1.0 for r in evals)
    saved = json.loads((run_dir / "evals" / "step_00002.json").read_text())
    assert saved["n"] == 2 and len(saved["samples"]) == 2


def make_boom(task):
    """A reward factory (used by dotted path below) whose reward raises on every other call."""
    calls = []

    def boom(completion, example):
        calls.append(1)
        if len(calls) % 2:
            raise RuntimeError("verifier crashed")
        return 0.5

    return boom


def test_a_raising_reward_does_not_end_the_run(tiny_model_dir, tmp_path):
    from grpokit.stages import pipeline as train

    rewards = [{"name": "format"}, {"name": "tests.stages.test_pipeline.make_boom"}]
    run_dir = train.main(build_recipe(tiny_recipe(tiny_model_dir, tmp_path, rewards=rewards)))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    errors = [
        r["rewards/tests.stages.test_pipeline.make_boom/errors"] for r in rows if r["stage"] == "grpo" and "reward" in r
    ]
    assert errors and all(e == 4 for e in errors)  # 8 completions per step, every other one raised
    assert "verifier crashed" in (run_dir / "reward_errors.jsonl").read_text()
    warnings = (run_dir / "warnings.jsonl").read_text()
    assert "reward_errors:tests.stages.test_pipeline.make_boom" in warnings


def test_stages_report_the_test_split_watch_validation_and_evaluate_each_suite(tiny_model_dir, tmp_path, length_reward):
    """The stage table reads the test split, in-training evaluations the validation split (no computation
    in both), and each eval suite is evaluated before and after every stage, in its own column."""
    from grpokit.stages import pipeline as train
    from grpokit.tasks import build_task

    suite = {"name": "addend_11_99", "params": {"addend_min": 11, "addend_max": 99}, "n": 4}
    raw = tiny_recipe(
        tiny_model_dir,
        tmp_path,
        rewards=[{"name": length_reward}],
        eval={"every": 1, "every_n": 3, "suites": [suite]},
    )
    run_dir = train.main(build_recipe(raw))

    task = build_task("arithmetic")
    for stage in ("before", "grpo"):
        shifted = json.loads((run_dir / f"eval_{stage}.addend_11_99.json").read_text())
        assert shifted["n"] == 4
    summary = json.loads((run_dir / "summary.json").read_text())
    for row in summary["stages"]:
        assert row["split"] == "test" and row["suites"]["addend_11_99"]["n"] == 4
        assert row["stderr"] == train.standard_error(row["accuracy"], row["n"])
    assert summary["evals"]["after"]["suites"] == summary["stages"][-1]["suites"]
    test_questions = {row["question"] for row in task.dataset("test", 6)}
    watched = json.loads((run_dir / "evals" / "step_00001.json").read_text())
    assert watched["n"] == 3
    validation = {row["question"]: row for row in task.dataset("validation", 3)}
    assert {s["question"] for s in watched["samples"]} <= set(validation)
    assert not {s["question"] for s in watched["samples"]} & test_questions
    table = train.format_table(summary["stages"])
    assert "addend_11_99" in table.splitlines()[0] and "±" in table.splitlines()[1]
    # Every stage after the first says what it fixed and broke on the same problems, from the saved files.
    before, grpo = (json.loads((run_dir / f"eval_{stage}.json").read_text()) for stage in ("before", "grpo"))
    assert len(before["correct"]) == before["n"] and sum(grpo["correct"]) == round(grpo["accuracy"] * grpo["n"])
    change, keys = evaluate.paired(before, grpo), ("fixed", "broke", "z")
    assert {k: summary["stages"][1][k] for k in keys} == {k: change[k] for k in keys}
    assert "fixed" not in summary["stages"][0] and "fixed " in table.splitlines()[2]
    assert "addend_11_99" in (run_dir / "report.html").read_text()


def test_a_split_too_small_for_the_recipe_fails_before_the_run_directory_exists(tiny_model_dir, tmp_path):
    from grpokit.errors import RecipeError
    from grpokit.stages import pipeline as train

    recipe = build_recipe(tiny_recipe(tiny_model_dir, tmp_path, eval={"n": 500}))
    with pytest.raises(RecipeError, match="only 114 distinct test problems"):
        train.main(recipe)
    assert not (tmp_path / "tiny").exists()
