"""bench/time_to_skill.py on run directories written here: the training-time axis, the SFT control's
recipe, and the verdict. Nothing is trained."""

import json

import pytest
import yaml

from grpokit.recipe.load import build_recipe, load_recipe
from tests.conftest import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/time_to_skill.py")


def write_run(run_dir, stages, recipe=None):
    """A finished run: `stages` is [(name, kind, accuracy, rows)], rows [(step, train_seconds, eval accuracy
    or None)] as MetricsLog logs them, the last one the stage's end."""
    (run_dir / "evals").mkdir(parents=True)
    records = [{"name": "before", "kind": "eval", "accuracy": 0.0, "format_rate": 0.0, "n": 200, "minutes": 0.0}]
    lines = []
    for name, kind, accuracy, rows in stages:
        for step, seconds, step_accuracy in rows:
            row = {"stage": name, "step": step, "time": 1_700_000_000.0, "train_seconds": seconds, "loss": 1.0}
            if step_accuracy is not None:
                row["eval/accuracy"] = step_accuracy
                prefix = "" if name == "grpo" else f"{name}-"
                saved = {"n": 200, "accuracy": step_accuracy}
                (run_dir / "evals" / f"{prefix}step_{step:05d}.json").write_text(json.dumps(saved))
            lines.append(json.dumps(row) + "\n")
        # The stage's minutes include its evaluations and building its trainer: not training time.
        minutes = rows[-1][1] / 60 + 1.5
        records.append(
            {"name": name, "kind": kind, "accuracy": accuracy, "format_rate": 1.0, "n": 200, "minutes": minutes}
        )
    (run_dir / "stages.json").write_text(json.dumps(records))
    (run_dir / "metrics.jsonl").write_text("".join(lines))
    (run_dir / "summary.json").write_text(json.dumps({"stages": records, "grpo_gain": None}))
    (run_dir / "recipe.yaml").write_text(yaml.safe_dump(recipe or {}))
    return run_dir


WARMUP = ("warmup", "sft", 0.6, [(1, 10.0, None), (15, 120.0, None)])  # 2 minutes


def default_run(base, grpo_rows=None):
    # GRPO: 5 minutes of training, evaluated at steps 10 and 20.
    rows = grpo_rows or [(1, 10.0, None), (10, 100.0, 0.70), (10, 100.0, None), (20, 200.0, 0.75), (30, 300.0, None)]
    return write_run(base / "default", [WARMUP, ("grpo", "grpo", 0.8, rows)])


def control_run(base, accuracy):
    # The same warm-up, then SFT: also 5 minutes, evaluated at steps 10, 20 and 30.
    rows = [(10, 60.0, 0.62), (20, 120.0, 0.66), (30, 180.0, 0.68), (42, 300.0, None)]
    return write_run(base / "control", [WARMUP, ("sft_more", "sft", accuracy, rows)])


def test_the_curve_counts_training_minutes_without_the_evaluations(bench, tmp_path):
    points, bounds = bench.curve(default_run(tmp_path))
    expected = [
        (0.0, "before", 0.0, 200),
        (2.0, "warmup", 0.6, 200),
        (2.0 + 100 / 60, "grpo step 10", 0.70, 200),
        (2.0 + 200 / 60, "grpo step 20", 0.75, 200),
        (7.0, "grpo", 0.8, 200),
    ]
    assert [(round(m, 6), label, a, n) for m, label, a, n in points] == [(round(m, 6), *rest) for m, *rest in expected]
    assert bounds == [(2.0, "warmup"), (7.0, "grpo")]
    assert bench.warmup_end(tmp_path / "default") == ("warmup", 2.0)
    assert bench.grpo_minutes(tmp_path / "default") == pytest.approx(5.0)
    # Interrupted after step 14 and resumed from the checkpoint of step 10 (rows after it were dropped):
    # the resumed part's clock starts at 0 again, and the parts add up to the same curve.
    resumed = [(1, 10.0, None), (10, 100.0, 0.70), (11, 10.0, None), (20, 100.0, 0.75), (30, 200.0, None)]
    assert bench.curve(default_run(tmp_path / "resumed", resumed)) == (points, bounds)


@pytest.mark.parametrize(
    ("sft", "verdict", "winner"),
    [
        (0.70, "GRPO 80.0% vs SFT 70.0% (n=200): GRPO wins by 10.0 points (two standard errors: 8.6 points)", "GRPO"),
        (0.76, "GRPO 80.0% vs SFT 76.0% (n=200): neither wins (two standard errors: 8.3 points)", None),
        (0.92, "GRPO 80.0% vs SFT 92.0% (n=200): SFT wins by 12.0 points", "SFT"),
    ],
)
def test_the_verdict_compares_the_same_minutes_past_the_warm_up(bench, tmp_path, sft, verdict, winner):
    result = bench.compare(default_run(tmp_path), control_run(tmp_path, sft))
    assert result["verdict"].startswith("after the same 5.0 minutes past the warm-up: " + verdict)
    assert result["winner"] == winner
    assert result["minutes_past_warmup"] == {"grpo": 5.0, "sft": 5.0}
    assert [label for _, label, _, _ in result["curves"]["sft"]][2:] == [
        "sft_more step 10",
        "sft_more step 20",
        "sft_more step 30",
        "sft_more",
    ]
    assert [round(m, 6) for m, *_ in result["curves"]["sft"]] == [0.0, 2.0, 3.0, 4.0, 5.0, 7.0]


def test_the_control_is_the_recipe_with_its_grpo_stage_replaced_by_a_budgeted_sft_stage(bench):
    raw = load_recipe(bench.RECIPE).to_dict()
    control = build_recipe(bench.control_recipe(raw, 36.4, 10))  # it loads: an sft-only recipe is valid
    warmup, more = control.stages
    recipe_warmup = raw["stages"][0]  # the warm-up is the recipe's own, unchanged
    assert (warmup.name, warmup.kind, warmup.steps, warmup.examples) == (
        "warmup",
        "sft",
        recipe_warmup["steps"],
        recipe_warmup["examples"],
    )
    assert (more.name, more.kind, more.max_minutes, more.eval_every) == ("sft_more", "sft", 36.4, 10)
    assert more.examples == bench.CONTROL_EXAMPLES and more.steps == bench.CONTROL_STEPS
    assert (more.batch_size, more.learning_rate) == (warmup.batch_size, warmup.learning_rate)
    assert control.output.name == "smollm2/arithmetic_grpo_sft_control"
    assert raw["stages"][1]["name"] == "grpo"  # the default recipe is not changed
    assert "&id" not in yaml.safe_dump(bench.control_recipe(raw, 36.4, 10))  # written out plainly, no anchors


def test_main_reads_both_runs_draws_both_curves_and_writes_the_numbers(bench, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "OUT", tmp_path / "out")
    run, control = default_run(tmp_path), control_run(tmp_path, 0.70)
    assert bench.main(["--run", str(run), "--control-run", str(control)]) == 0
    out = capsys.readouterr().out
    assert "after the same 5.0 minutes past the warm-up: GRPO 80.0% vs SFT 70.0% (n=200)" in out
    assert "first >= 80%: 7.0 min (grpo)" in out
    saved = json.loads((tmp_path / "out" / "time_to_skill.json").read_text())
    assert saved["comparison"]["winner"] == "GRPO" and saved["comparison"]["accuracy"] == {"grpo": 0.8, "sft": 0.7}
    assert (tmp_path / "out" / "time_to_skill.png").stat().st_size > 10_000


def test_the_picture_names_both_evaluation_sizes(bench):
    stage_only = {"grpo": [(0.0, "before", 0.0, 200), (9.0, "grpo", 0.9, 200)]}
    assert bench.problems(stage_only) == "200 test problems"
    mixed = {**stage_only, "sft": [(3.0, "sft_more step 15", 0.8, 50), (9.0, "sft_more", 0.95, 200)]}
    assert bench.problems(mixed) == "200 test problems; step evaluations: 50 validation problems"


def test_the_control_branches_from_the_runs_own_warm_up(bench, tmp_path, monkeypatch):
    """The control's run directory starts with the run's finished stages before GRPO, and the pipeline
    accepts it as a run to resume at `sft_more` from the warm-up's saved adapter."""
    from grpokit.stages import pipeline

    monkeypatch.chdir(tmp_path)
    raw = load_recipe(bench.RECIPE).to_dict()
    raw["output"]["dir"] = str(tmp_path / "runs")
    run = write_run(tmp_path / "run", [WARMUP, ("grpo", "grpo", 0.8, [(1, 10.0, None), (30, 300.0, None)])], raw)
    (run / "warmup" / "adapter").mkdir(parents=True)
    (run / "warmup" / "adapter" / "adapter_model.safetensors").write_bytes(b"weights")
    (run / "eval_warmup.json").write_text('{"accuracy": 0.6}')
    control = build_recipe(bench.control_recipe(raw, 5.0, 10))

    start = bench.branch(run, control)

    assert start.parent == tmp_path / "runs" / "smollm2" / "arithmetic_grpo_sft_control"
    assert [r["name"] for r in json.loads((start / "stages.json").read_text())] == ["before", "warmup"]
    rows = [json.loads(line) for line in (start / "metrics.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in rows} == {"warmup"} and len(rows) == 2  # GRPO's rows stay behind
    assert (start / "warmup" / "adapter" / "adapter_model.safetensors").read_bytes() == b"weights"
    assert (start / "eval_warmup.json").is_file() and not (start / "grpo").exists()
    resumed, records, checkpoint = pipeline.prepare_resume(control, start)
    assert (resumed, [r["name"] for r in records], checkpoint) == (start, ["before", "warmup"], None)
    assert pipeline.resume_point(control.stages, records, checkpoint) == "stage sft_more from its start"
    # The control's training minutes past the warm-up are counted from the same point as the run's.
    assert bench.warmup_end(start) == bench.warmup_end(run) == ("warmup", 2.0)


def test_a_run_without_a_warm_up_has_nothing_to_branch_from(bench, tmp_path):
    raw = load_recipe(bench.RECIPE).to_dict()
    run = write_run(tmp_path / "run", [("grpo", "grpo", 0.8, [(30, 300.0, None)])], raw)
    assert bench.branch(run, build_recipe(bench.control_recipe(raw, 5.0, 10))) is None


def test_another_recipes_numbers_are_kept_apart_from_the_default_ones(bench, tmp_path):
    default, other = tmp_path / "a", tmp_path / "b"
    for folder, name in ((default, "smollm2/arithmetic_grpo"), (other, "smollm2/math_grpo")):
        folder.mkdir()
        (folder / "recipe.yaml").write_text(yaml.safe_dump({"output": {"name": name}}))
    assert (bench.out_name(default), bench.out_name(other)) == ("time_to_skill", "time_to_skill_math_grpo")


def test_the_verdict_pairs_the_two_final_evaluations_when_both_saved_every_problem(bench, tmp_path):
    run, control = default_run(tmp_path), control_run(tmp_path, 0.70)
    questions = [{"question": f"q{i}"} for i in range(2)]
    grpo = [True] * 8 + [False] * 2  # 80%
    sft = [True] * 5 + [False] * 3 + [True, True]  # 70%: three problems only GRPO got, two only SFT
    (run / "eval_grpo.json").write_text(json.dumps({"correct": grpo, "samples": questions}))
    (control / "eval_sft_more.json").write_text(json.dumps({"correct": sft, "samples": questions}))
    result = bench.compare(run, control)
    assert result["paired"] == {"n": 10, "fixed": 2, "broke": 3, "z": -0.45}
    assert result["verdict"].endswith(
        "; on the same 10 problems GRPO alone was right on 3, SFT alone on 2 (McNemar z 0.45)"
    )
    (control / "eval_sft_more.json").write_text(json.dumps({"correct": sft[:9], "samples": questions}))
    assert bench.compare(run, control)["paired"] is None  # not the same problems: no pairing


def test_training_started_here_prints_grpokits_progress_lines(bench, monkeypatch):
    """The run and the control this script trains show `grpokit train`'s progress lines: a console is set
    up when none is, and one already set up is kept."""
    from grpokit.stages import console

    calls = []
    monkeypatch.setattr(console, "setup", lambda *args, **kwargs: calls.append(args))
    monkeypatch.setattr(console, "_active", None)
    bench.show_progress()
    assert calls == [()]
    monkeypatch.setattr(console, "_active", object())
    bench.show_progress()
    assert calls == [()]
