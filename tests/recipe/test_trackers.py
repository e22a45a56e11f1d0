"""grpo.report_to: transformers' tracker names, a string or a list, checked at load with the fix named."""

import re

import pytest
import yaml

from grpokit.errors import RecipeError
from grpokit.recipe import trackers
from grpokit.recipe.load import build_recipe
from grpokit.recipe.trl_args import build_grpo_config
from tests.conftest import tiny_recipe


def test_every_tracker_transformers_knows_has_its_pip_command():
    assert set(trackers.known_trackers()) <= set(trackers.TRACKER_PACKAGES)
    assert {"tensorboard", "wandb", "trackio", "mlflow"} <= set(trackers.known_trackers())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("wandbb", "unknown tracker 'wandbb' in <memory>; did you mean 'wandb'?"),
        (["tensorboard", "tensorbord"], "unknown tracker 'tensorbord' in <memory>; did you mean 'tensorboard'?"),
        ("zzz", "unknown tracker 'zzz' in <memory> (known: azure_ml, "),
        (["all", "wandb"], "'all' stands alone"),
        (3, "give a tracker name or a list of them"),
    ],
)
def test_an_unknown_tracker_fails_at_load_with_the_names(tiny_model_dir, tmp_path, value, message):
    with pytest.raises(RecipeError, match=re.escape(message)):
        build_recipe(tiny_recipe(tiny_model_dir, tmp_path, grpo={"report_to": value}))


def test_a_tracker_that_is_not_installed_names_its_pip_command(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(trackers.TRACKER_PACKAGES, "mlflow", (("grpokit_no_such_module",), "pip install mlflow"))
    with pytest.raises(RecipeError, match=re.escape("tracker 'mlflow' is not installed")) as caught:
        build_recipe(tiny_recipe(tiny_model_dir, tmp_path, grpo={"report_to": ["tensorboard", "mlflow"]}))
    assert "`pip install mlflow`" in str(caught.value)


def test_the_command_line_refuses_it_before_a_run_folder_or_a_model(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import grpokit.stages.pipeline
    from grpokit.cli.commands import main

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad tracker was caught")

    monkeypatch.setattr(grpokit.stages.pipeline, "load_model", refuse)
    monkeypatch.setitem(trackers.TRACKER_PACKAGES, "trackio", (("grpokit_no_such_module",), "pip install trackio"))
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe(tiny_model_dir, tmp_path / "runs", grpo={"report_to": "trackio"})))
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert "tracker 'trackio' is not installed" in err and "pip install trackio" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("value", "built"),
    [(None, ["tensorboard"]), ("none", []), ([], []), ("wandb", ["wandb"]), (["tensorboard", "wandb"], None)],
)
def test_good_values_reach_trl(tiny_model_dir, tmp_path, value, built):
    pytest.importorskip("wandb")
    recipe = build_recipe(tiny_recipe(tiny_model_dir, tmp_path, grpo={"report_to": value}))
    config = build_grpo_config(recipe, tmp_path / "out", measure_precision=False)
    assert config.report_to == (value if built is None else built)
