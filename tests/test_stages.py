"""Multi-stage recipes: stages run in order on the policy the last one left, each evaluated; resume inside any."""

import json

import pytest

from grpokit import train
from grpokit.checkpoints import TrainingInterrupted
from grpokit.config import RecipeError, build_recipe
from tests.conftest import tiny_recipe
from tests.test_resume import SignalAt


def staged(tiny_model_dir, out, **extra):
    raw = tiny_recipe(tiny_model_dir, out, **extra)
    raw["stages"] = [
        {"name": "warmup", "kind": "sft", "steps": 2},
        # A format stage on an easier task, then correctness with a KL term to the policy as it starts.
        {"name": "format", "steps": 2, "rewards": [{"name": "tag_count"}], "task_params": {"max_value": 5}},
        {"name": "answers", "steps": 2, "learning_rate": 5e-3, "grpo": {"beta": 0.5}},
    ]
    return raw


def rows_of(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_stages_run_in_order_each_with_its_own_rewards_and_evaluation(tiny_model_dir, tmp_path):
    run_dir = train.main(build_recipe(staged(tiny_model_dir, tmp_path)))
    stages = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert [(s["name"], s["kind"]) for s in stages] == [
        ("before", "eval"),
        ("warmup", "sft"),
        ("format", "grpo"),
        ("answers", "grpo"),
    ]
    assert stages[3]["gain"] == stages[3]["accuracy"] - stages[2]["accuracy"]
    for name in ("warmup", "format", "answers"):
        assert (run_dir / name / "adapter" / "adapter_config.json").is_file(), name
        assert (run_dir / f"eval_{name}.json").is_file(), name
    rows = rows_of(run_dir)
    logged = {r["stage"] for r in rows}
    assert logged == {"warmup", "format", "answers"}
    assert all("rewards/tag_count/mean" in r for r in rows if r["stage"] == "format" and "reward" in r)
    answers = [r for r in rows if r["stage"] == "answers" and "reward" in r]
    assert answers and all("rewards/correctness/mean" in r for r in answers)
    # The KL reference of a stage is the policy as it starts: KL is 0 at its first step.
    assert answers[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    recipe = json.loads(json.dumps(build_recipe(staged(tiny_model_dir, tmp_path)).to_dict()))
    assert recipe["stages"][1]["task_params"] == {"max_value": 5}
    assert not (run_dir / "adapter" / "ref").exists()  # TRL's reference copy is not part of the result
    # The report lays the stages on one axis: GRPO steps count on across the two GRPO stages.
    from grpokit.report import timeline

    assert [(x, label) for x, label, _ in timeline(run_dir)] == [
        (0, "before"),
        (0, "warmup"),
        (2, "format"),
        (4, "answers"),
    ]
    page = (run_dir / "report.html").read_text()
    assert all(f"<td>{name}</td>" in page for name in ("warmup", "format", "answers")) and "GRPO added" in page


@pytest.mark.parametrize("at", [1, 2])  # mid-stage, and after its last step before its evaluation
def test_resume_continues_inside_a_later_stage(tiny_model_dir, tmp_path, at):
    import torch

    from tests.test_resume import adapter_weights

    straight = train.main(build_recipe(staged(tiny_model_dir, tmp_path / "straight", output={"save_every": 1})))
    recipe = build_recipe(staged(tiny_model_dir, tmp_path / "halted", output={"save_every": 1}))

    class SecondGrpoStage(SignalAt):
        def on_step_begin(self, args, state, control, **kwargs):
            if "answers" in args.output_dir:
                super().on_step_begin(args, state, control, **kwargs)

    with pytest.raises(TrainingInterrupted, match="stage answers"):
        train.main(recipe, callbacks=[SecondGrpoStage(at)])
    (run_dir,) = (tmp_path / "halted" / "tiny").iterdir()
    before = (run_dir / "eval_before.json").stat().st_mtime
    assert [s["name"] for s in json.loads((run_dir / "stages.json").read_text())] == ["before", "warmup", "format"]
    resumed = train.main(recipe, resume=run_dir)
    assert (run_dir / "eval_before.json").stat().st_mtime == before  # finished stages are not redone
    stages = json.loads((resumed / "summary.json").read_text())["stages"]
    assert [s["name"] for s in stages] == ["before", "warmup", "format", "answers"]
    a, b = adapter_weights(straight), adapter_weights(resumed)
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6), name
    steps = [r["step"] for r in rows_of(run_dir) if r["stage"] == "answers" and "reward" in r]
    assert steps == [1, 2], [(r["step"], sorted(r)[:3]) for r in rows_of(run_dir) if r["stage"] == "answers"]


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([{"name": "a", "kind": "sft"}], "no grpo stage"),
        ([{"name": "a"}, {"name": "a"}], "stage names must differ"),
        ([{"name": "a", "kind": "ppo"}], "kind='ppo'"),
        ([{"name": "before"}], "stage name 'before'"),
        ([{"name": "a", "task_params": {"max_value": -99}}], "stage 'a'"),
        ([{"name": "a", "rewards": [{"name": "nope"}]}], "unknown reward 'nope'"),
        ([{"name": "a", "kind": "sft", "rewards": [{"name": "format"}]}, {"name": "b"}], "sft stage"),
        ([{"name": "a", "grpo": {"learnin_rate": 1}}], "grpo.learnin_rate"),
    ],
)
def test_bad_stages_fail_when_the_recipe_loads(tiny_model_dir, tmp_path, stages, message):
    raw = tiny_recipe(tiny_model_dir, tmp_path)
    raw["stages"] = stages
    with pytest.raises(RecipeError, match=message):
        build_recipe(raw)
