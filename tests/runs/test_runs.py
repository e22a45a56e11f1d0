"""Run folders say what they hold: status, the list of runs, newest-run pickers that skip failed runs."""

import json
import os
import subprocess
import sys

import pytest

from grpokit.recipe.load import build_recipe, load_recipe
from grpokit.runs import records as runs
from grpokit.runs.checkpoints import mark_complete
from grpokit.runs.records import latest_resumable_run
from grpokit.stages import pipeline as train
from tests.conftest import tiny_recipe
from tests.fake_runs import make_run


def test_same_file_name_in_two_folders_never_shares_a_run_folder(tmp_path):
    names = set()
    for folder in ("smollm2", "qwen2.5-0.5b"):
        path = tmp_path / "recipes" / folder / "arithmetic_grpo.yaml"
        path.parent.mkdir(parents=True)
        path.write_text("rewards: [{name: format}]\ngrpo: {bf16: false}\n")
        names.add(load_recipe(path).output.name)
    assert names == {"smollm2/arithmetic_grpo", "qwen2.5-0.5b/arithmetic_grpo"}


def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_list_shows_status_recipe_model_and_headline(tmp_path, capsys):
    base = tmp_path / "runs"
    make_run(base, "a", "20260101-100000", before=0.0, after=0.935)
    make_run(
        base,
        "b",
        "20260101-110000",
        finished=False,
        status={"status": "failed", "recipe": "recipes/b.yaml", "model": "org/x", "error": "ModelNotFoundError: gone"},
    )
    make_run(
        base,
        "c",
        "20260101-120000",
        finished=False,
        status={"status": "running", "recipe": "c.yaml", "pid": dead_pid(), "host": os.uname().nodename},
    )
    infos = runs.list_runs(base)
    assert [(i.path.parent.name, i.status) for i in infos] == [("a", "finished"), ("b", "failed"), ("c", "stopped")]
    assert infos[0].headline.startswith("accuracy 0.0% -> 93.5% (")
    table = runs.format_runs(infos)
    assert "ModelNotFoundError: gone" in table and "org/x" in table and "embedded" in table

    from grpokit.cli.commands import main

    assert main(["runs", str(base)]) == 0
    assert "93.5%" in capsys.readouterr().out
    assert main(["report", "--runs-dir", str(base)]) == 0
    out = capsys.readouterr().out
    assert "which run?" in out and "failed" in out


def test_a_stages_list_gives_the_headline(tmp_path):
    stages = [
        {"name": "before", "kind": "eval", "accuracy": 0.0, "format_rate": 0.0, "n": 10, "minutes": 0.5},
        {"name": "sft", "kind": "sft", "accuracy": 0.8, "format_rate": 1.0, "n": 10, "minutes": 4.0},
        {"name": "grpo", "kind": "grpo", "accuracy": 0.9, "format_rate": 1.0, "n": 10, "minutes": 5.5},
    ]
    run = make_run(tmp_path, stages=stages)
    assert runs.headline(run) == "accuracy 0.0% -> 90.0% (10.0 min)"


def test_newest_run_pickers_skip_failed_runs(tmp_path):
    base = tmp_path / "tiny"
    good = make_run(tmp_path, "tiny", "20260101-100000", finished=False, status={"status": "interrupted"})
    bad = make_run(tmp_path, "tiny", "20260101-110000", finished=False, status={"status": "failed"})
    for run in (good, bad):
        (run / "grpo" / "checkpoint-2").mkdir(parents=True)
        mark_complete(run / "grpo" / "checkpoint-2", 2)
    assert latest_resumable_run(base) == good
    assert runs.newest(base) == good


def test_a_run_stopped_in_any_stage_is_interrupted_with_that_stages_checkpoint(tmp_path):
    """The default recipe's SIGTERM in its warm-up: warmup/checkpoint-6, no grpo folder yet."""
    from grpokit.errors import TrainingInterrupted
    from grpokit.runs import checkpoints

    base = tmp_path / "tiny"
    run = make_run(tmp_path, "tiny", "20260101-100000", finished=False, status={"status": "running"})
    (run / "stages.json").write_text(json.dumps([{"name": "before", "kind": "eval"}]))
    for step in (3, 6):
        (run / "warmup" / f"checkpoint-{step}").mkdir(parents=True)
        mark_complete(run / "warmup" / f"checkpoint-{step}", step)
    runs.mark_stopped(run, TrainingInterrupted("SIGTERM: stopped after step 6 of stage warmup"))
    status = runs.read_status(run)
    assert status["status"] == "interrupted" and status["checkpoint"] == str(run / "warmup" / "checkpoint-6")
    assert latest_resumable_run(base) == run  # what `grpokit train RECIPE --resume` continues

    # Once the warm-up finished, its checkpoints are not a place to resume: a stop in the next stage,
    # before that stage saved, has nothing to continue from.
    (run / "stages.json").write_text(json.dumps([{"name": "before"}, {"name": "warmup"}]))
    assert checkpoints.resume_checkpoint(run) is None and latest_resumable_run(base) is None
    (run / "answers" / "checkpoint-2").mkdir(parents=True)
    mark_complete(run / "answers" / "checkpoint-2", 2)
    runs.mark_stopped(run, KeyboardInterrupt())
    assert runs.read_status(run)["checkpoint"] == str(run / "answers" / "checkpoint-2")
    runs.mark_stopped(run, RuntimeError("out of memory"))  # an error, not a stop: failed, the checkpoint named
    assert runs.read_status(run)["status"] == "failed"


def test_a_start_that_fails_before_training_is_recorded_as_failed(tiny_model_dir, tmp_path, monkeypatch):
    def unreachable(*args, **kwargs):
        raise OSError("the hub cannot be reached")

    monkeypatch.setattr(train, "load_model", unreachable)
    with pytest.raises(OSError, match="cannot be reached"):
        train.main(build_recipe(tiny_recipe(tiny_model_dir, tmp_path)))
    (run_dir,) = (tmp_path / "tiny").iterdir()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and status["error"] == "OSError: the hub cannot be reached"
    assert status["model"] == str(tiny_model_dir) and status["checkpoint"] is None
    assert runs.newest(tmp_path / "tiny") is None
