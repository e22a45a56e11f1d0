"""Checkpoints, exact resume, and a clean stop on a signal."""

import json
import os
import signal

import pytest
from transformers import TrainerCallback

from grpokit.errors import RecipeError, TrainingInterrupted
from grpokit.recipe.load import build_recipe
from grpokit.runs.checkpoints import MARKER, complete_checkpoints
from grpokit.runs.records import read_status
from grpokit.stages import pipeline as train
from tests.conftest import tiny_recipe


class SignalAt(TrainerCallback):
    """Sends a real SIGINT (or SIGTERM) to this process as step `step` begins, like Ctrl-C mid-run."""

    def __init__(self, step, signum=signal.SIGINT):
        self.step, self.signum = step, signum

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step - 1:
            os.kill(os.getpid(), self.signum)


def adapter_weights(run_dir):
    from safetensors.torch import load_file

    return load_file(str(run_dir / "adapter" / "adapter_model.safetensors"))


def recipe(tiny_model_dir, out, **output):
    raw = tiny_recipe(
        tiny_model_dir,
        out,
        grpo={"max_steps": 4},
        output={"dir": str(out), "name": "tiny", "save_every": 2, "keep": 2, **output},
    )
    return build_recipe(raw)


def test_resume_reproduces_the_straight_run(tiny_model_dir, tmp_path):
    import torch

    straight = train.main(recipe(tiny_model_dir, tmp_path / "straight"))
    assert [p.name for p in complete_checkpoints(straight / "grpo")] == ["checkpoint-2", "checkpoint-4"]

    halted = recipe(tiny_model_dir, tmp_path / "halted")
    with pytest.raises(TrainingInterrupted, match=r"SIGINT: stopped after step 2 .* --resume"):
        train.main(halted, callbacks=[SignalAt(2)])
    (run_dir,) = (tmp_path / "halted" / "tiny").iterdir()
    assert [p.name for p in complete_checkpoints(run_dir / "grpo")] == ["checkpoint-2"]
    assert not (run_dir / "adapter").exists()
    status = read_status(run_dir)
    assert status["status"] == "interrupted" and status["checkpoint"].endswith("checkpoint-2")

    resumed = train.main(halted, resume=run_dir)
    assert resumed == run_dir
    assert read_status(run_dir)["status"] == "finished" and read_status(run_dir)["resumed"] is True
    a, b = adapter_weights(straight), adapter_weights(resumed)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6), name
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["stage"] == "grpo" and "reward" in r] == [1, 2, 3, 4]
    assert json.loads((run_dir / "summary.json").read_text())["evals"]["before"]["n"] == 6


def test_sigterm_also_saves_and_an_unfinished_checkpoint_is_ignored(tiny_model_dir, tmp_path):
    halted = recipe(tiny_model_dir, tmp_path, save_every=0)
    with pytest.raises(TrainingInterrupted, match="SIGTERM"):
        train.main(halted, callbacks=[SignalAt(1, signal.SIGTERM)])
    (run_dir,) = (tmp_path / "tiny").iterdir()
    (checkpoint,) = complete_checkpoints(run_dir / "grpo")
    # A crash while writing checkpoint-3: the folder exists, the marker does not.
    broken = run_dir / "grpo" / "checkpoint-3"
    broken.mkdir()
    (broken / "adapter_model.safetensors").write_bytes(b"half a file")
    assert complete_checkpoints(run_dir / "grpo") == [checkpoint]
    assert (checkpoint / MARKER).is_file()


def test_resume_refuses_a_changed_recipe_or_a_run_without_checkpoints(tiny_model_dir, tmp_path):
    first = recipe(tiny_model_dir, tmp_path)
    with pytest.raises(TrainingInterrupted):
        train.main(first, callbacks=[SignalAt(1)])
    (run_dir,) = (tmp_path / "tiny").iterdir()
    changed = build_recipe({**tiny_recipe(tiny_model_dir, tmp_path), "grpo": {**first.grpo, "learning_rate": 0.5}})
    with pytest.raises(RecipeError, match="the recipe's grpo section changed"):
        train.main(changed, resume=run_dir)
    # How a step is computed may change (what an out-of-memory error advises), what it computes may not.
    memory_only = {
        **tiny_recipe(tiny_model_dir, tmp_path),
        "grpo": {**first.grpo, "gradient_checkpointing": True},
        "train_pass": {"micro_batch_rows": 2, "shared_prefix": False},
    }
    assert train.prepare_resume(build_recipe(memory_only), run_dir, truncate=False)[0] == run_dir
    memory_only["train_pass"]["sampler_logprobs"] = True  # the loss's ratio: what is computed
    with pytest.raises(RecipeError, match="the recipe's train_pass section changed"):
        train.prepare_resume(build_recipe(memory_only), run_dir, truncate=False)
    with pytest.raises(RecipeError, match="no recipe.yaml"):
        train.main(first, resume=tmp_path)


def test_cli_resume_finds_the_newest_resumable_run(tiny_model_dir, tmp_path, capsys):
    import yaml

    from grpokit.cli.commands import main

    raw = tiny_recipe(tiny_model_dir, tmp_path, grpo={"max_steps": 2}, output={"dir": str(tmp_path), "name": "tiny"})
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["train", str(path), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_a_run_stopped_in_its_warm_up_resumes_from_there_to_the_end(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """The default recipe's shape (an sft stage named `warmup`, then grpo), stopped by SIGTERM in the warm-up:
    interrupted with the warm-up's checkpoint, found by `--resume`, continued inside the warm-up."""
    import torch
    import yaml

    from grpokit.cli.commands import main
    from grpokit.stages import sft as cold_start

    raw = tiny_recipe(tiny_model_dir, tmp_path, output={"dir": str(tmp_path), "name": "tiny", "save_every": 0})
    raw["stages"] = [{"name": "warmup", "kind": "sft", "steps": 4}, {"name": "grpo", "steps": 2}]
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    build, started_at = cold_start.build_trainer, []

    class StartedAt(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            started_at.append(state.global_step)

    def with_callbacks(*callbacks):
        def build_trainer(*args, **kwargs):
            trainer = build(*args, **kwargs)
            for callback in callbacks:
                trainer.add_callback(callback)
            return trainer

        return build_trainer

    monkeypatch.setattr(cold_start, "build_trainer", with_callbacks(SignalAt(3, signal.SIGTERM)))
    assert main(["train", str(path)]) == 130
    assert "SIGTERM: stopped after step 3 of stage warmup" in capsys.readouterr().err
    (run_dir,) = (tmp_path / "tiny").iterdir()
    status = read_status(run_dir)
    assert status["status"] == "interrupted" and status["checkpoint"] == str(run_dir / "warmup" / "checkpoint-3")
    assert [row["name"] for row in json.loads((run_dir / "stages.json").read_text())] == ["before"]

    monkeypatch.setattr(cold_start, "build_trainer", with_callbacks(StartedAt()))
    assert main(["train", str(path), "--resume"]) == 0  # the newest resumable run: this one
    assert started_at == [3]  # the warm-up went on from its checkpoint: step 4 only
    rows = json.loads((run_dir / "stages.json").read_text())
    assert [(row["name"], row["kind"]) for row in rows] == [("before", "eval"), ("warmup", "sft"), ("grpo", "grpo")]
    status = read_status(run_dir)
    assert status["status"] == "finished" and status["resumed"] is True and (run_dir / "adapter").is_dir()
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics if r["stage"] == "warmup" and "loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in metrics if r["stage"] == "grpo" and "reward" in r] == [1, 2]
    # The same weights as a run never stopped.
    monkeypatch.setattr(cold_start, "build_trainer", build)
    straight = train.main(build_recipe({**raw, "output": {**raw["output"], "dir": str(tmp_path / "straight")}}))
    a, b = adapter_weights(straight), adapter_weights(run_dir)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6), name
