"""Bad input fails with one clear paragraph, before any model loads, and loses nothing saved.

Recipe-level cases (YAML, unknown keys, types, ranges, names) are in test_config.py; data files in
tests/tasks/. These are the cases that need the command line or the file system.
"""

import errno
from pathlib import Path

import pytest
import yaml

from grpokit.cli.commands import main
from tests.conftest import tiny_recipe


@pytest.fixture
def no_model_loads(monkeypatch):
    import grpokit.models.load
    import grpokit.stages.pipeline

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was caught")

    monkeypatch.setattr(grpokit.models.load, "load_model", refuse)
    monkeypatch.setattr(grpokit.stages.pipeline, "load_model", refuse)


def write_recipe(path: Path, raw: dict) -> Path:
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def run(args, capsys):
    code = main(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("./models/not-here", "no such folder"),
        ("/nonexistent/model", "no such folder"),
        ("{empty}", "has no config.json"),
    ],
)
def test_missing_model(tmp_path, capsys, no_model_loads, tiny_model_dir, model, message):
    (tmp_path / "empty").mkdir()
    raw = tiny_recipe(tiny_model_dir, tmp_path)
    raw["model"]["name"] = model.format(empty=tmp_path / "empty")
    code, err = run(["train", str(write_recipe(tmp_path / "r.yaml", raw))], capsys)
    assert code == 2 and message in err and "model.name" in err


def test_bad_dataset_rows_name_file_row_and_column(tmp_path, capsys, no_model_loads, tiny_model_dir):
    data = tmp_path / "qa.csv"
    data.write_text("question,answer\nWhat is 1+1?,2\nWhat is 2+2?,\n", encoding="utf-8")
    raw = tiny_recipe(tiny_model_dir, tmp_path, task={"name": "custom", "params": {"path": str(data)}})
    code, err = run(["train", str(write_recipe(tmp_path / "r.yaml", raw))], capsys)
    assert code == 2 and "qa.csv row 3 column 'answer' is empty" in err


def test_missing_dataset_file(tmp_path, capsys, no_model_loads, tiny_model_dir):
    raw = tiny_recipe(tiny_model_dir, tmp_path, task={"name": "math", "params": {"source": "gone.jsonl"}})
    code, err = run(["train", str(write_recipe(tmp_path / "r.yaml", raw))], capsys)
    assert code == 2 and "dataset file not found: gone.jsonl" in err


@pytest.mark.parametrize("where", ["/sys/grpokit-runs", "{file}/runs"])
def test_unwritable_output_dir(tmp_path, capsys, no_model_loads, tiny_model_dir, where):
    (tmp_path / "a-file").write_text("x")
    raw = tiny_recipe(tiny_model_dir, tmp_path, output={"dir": where.format(file=tmp_path / "a-file")})
    code, err = run(["train", str(write_recipe(tmp_path / "r.yaml", raw))], capsys)
    assert code == 2 and "cannot create the run directory" in err and "set output.dir to a writable folder" in err


def test_full_disk_says_what_is_safe(tmp_path, capsys, no_model_loads, tiny_model_dir, monkeypatch):
    earlier = tmp_path / "runs" / "tiny" / "20260101-000000"
    earlier.mkdir(parents=True)
    (earlier / "summary.json").write_text("{}")
    original = Path.write_text

    def full(self, *args, **kwargs):
        if self.name == "recipe.yaml" and "runs" in self.parts:
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    raw = tiny_recipe(tiny_model_dir, tmp_path, output={"dir": str(tmp_path / "runs")})
    code, err = run(["train", str(write_recipe(tmp_path / "r.yaml", raw))], capsys)
    assert code == 2 and "the disk is full" in err and "--resume" in err
    assert (earlier / "summary.json").read_text() == "{}"  # an earlier run is untouched


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("grpo.num_generations=eight", "grpo.num_generations='eight': TRL declares it int"),
        ("grpo.max_completion_length=abc", "grpo.max_completion_length='abc': TRL declares it int"),
        ("grpo.beta=high", "grpo.beta='high': TRL declares it float"),
        ("grpo.temperature=-1", "grpo.temperature=-1; it must be > 0"),
        ("grpo.beta=-0.1", "grpo.beta=-0.1; it must be >= 0"),
        ("grpo.num_generations=1", "grpo.num_generations=1; it must be at least 2 generations"),
        ("grpo.lr_scheduler_type=cosinus", "TRL accepts one of linear, cosine"),
        ("grpo.per_device_train_batch_size=63", "must be divisible by num_generations"),
        ("grpo.learnin_rate=1e-5", "did you mean 'learning_rate'?"),
        ("evl.n=3", "train_pass; did you mean 'eval'?"),
        ("task.name=arithmetc", "did you mean 'arithmetic'?"),
        ("rewards.0.name=formt", "dotted import path); did you mean 'format'?"),
        ("task.params.min_valu=2", "validation_fraction; did you mean 'min_value'?"),
    ],
)
def test_bad_values_fail_before_a_model_loads_or_a_run_folder_exists(
    tmp_path, capsys, no_model_loads, tiny_model_dir, override, message
):
    """Every value is checked when the recipe loads: grpo values by the types and choices TRL declares
    and the ranges GRPO needs, and a misspelt key, task or reward suggests the one that was meant."""
    raw = tiny_recipe(tiny_model_dir, tmp_path)
    code, err = run(["train", str(write_recipe(tmp_path / "r.yaml", raw)), override], capsys)
    assert code == 2 and message in err
    assert "Traceback" not in err
    assert not (tmp_path / "tiny").exists()


def test_a_gym_dataset_name_suggests_the_one_meant():
    from grpokit.errors import RecipeError
    from grpokit.tasks import build_task

    pytest.importorskip("reasoning_gym")
    with pytest.raises(
        RecipeError,
        match=r"unknown reasoning-gym dataset 'basic_arithmetc'; known: .*; did you mean 'basic_arithmetic'\?",
    ):
        build_task("reasoning_gym", {"dataset": "basic_arithmetc"})
