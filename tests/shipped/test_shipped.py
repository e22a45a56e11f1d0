"""Shipped recipes and data: found by name from any directory, listed by `grpokit recipes`, and installed
with the wheel (a fresh virtual environment outside the checkout runs them)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from grpokit import shipped
from grpokit.cli.commands import main
from grpokit.errors import RecipeError
from grpokit.recipe.load import load_recipe
from tests.conftest import tiny_recipe

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkouts_recipes_and_data_folders_are_the_shipped_ones():
    assert (ROOT / "recipes").resolve() == shipped.SHIPPED
    assert (ROOT / "data").resolve() == shipped.SHIPPED / "data"


def test_every_shipped_recipe_is_listed_once_and_no_launch_config_is():
    listed = shipped.names()
    on_disk = sorted(
        f"{p.parent.name}/{p.stem}"
        for p in shipped.SHIPPED.glob("*/*.yaml")
        if "distributed_type" not in (yaml.safe_load(p.read_text(encoding="utf-8")) or {})
    )
    assert listed == on_disk
    assert {"smollm2/arithmetic_grpo", "smollm2/countdown_grpo", "smollm2/math_grpo"} <= set(listed)
    assert all(recipe.summary for recipe in shipped.shipped())  # each says what it is


def test_a_recipe_loads_by_name_from_any_directory_with_its_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no recipes/ or data/ here
    recipe = load_recipe("smollm2/math_grpo")  # reads data/word_problems.jsonl: the shipped copy
    assert Path(recipe.source) == shipped.SHIPPED / "smollm2" / "math_grpo.yaml"
    assert recipe.output.name == "smollm2/math_grpo"  # the same run folder as the path gives
    assert load_recipe("recipes/smollm2/arithmetic_grpo.yaml").output.name == "smollm2/arithmetic_grpo"


def test_a_file_in_the_current_directory_wins_over_the_shipped_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "word_problems.jsonl").write_text("not json\n", encoding="utf-8")
    with pytest.raises(RecipeError, match="line 1 is not valid JSON"):
        load_recipe("smollm2/math_grpo")


def test_an_unknown_name_suggests_the_closest_and_the_listing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecipeError, match=r"did you mean 'smollm2/arithmetic_grpo'\?.*grpokit recipes"):
        load_recipe("smollm2/arithmetic_grp")


def test_grpokit_recipes_lists_them_and_prints_one(capsys):
    assert main(["recipes"]) == 0
    out = capsys.readouterr().out
    for name in shipped.names():
        assert name in out
    assert "accelerate/zero3" not in out
    assert main(["recipes", "smollm2/arithmetic_grpo"]) == 0
    assert capsys.readouterr().out == (shipped.SHIPPED / "smollm2" / "arithmetic_grpo.yaml").read_text()
    assert main(["recipes", "nope/nothing"]) == 2


def test_grpokit_version_names_grpokit_and_its_libraries(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("grpokit ") and "trl " in out and "transformers " in out and "torch " in out


@pytest.mark.slow
def test_the_built_wheel_installs_and_runs_outside_the_checkout(tmp_path, tiny_model_dir):
    """The wheel holds the recipes and data: installed into a fresh virtual environment (its dependencies
    read from this one's site-packages, so nothing downloads), run from a folder outside the checkout."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # no source tree anywhere
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, ROOT],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("grpokit-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
        check=True,
        env=env,
        capture_output=True,
    )
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # This environment's packages as plain paths: its .pth files (the editable grpokit) are not run.
    (Path(purelib) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*command: object) -> str:
        done = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def grpokit(*args: str) -> str:
        return run(venv / "bin" / "grpokit", *args)

    where = run(python, "-c", "import grpokit; print(grpokit.__file__, grpokit.__version__)")
    assert where.startswith(purelib) and "0+unknown" not in where  # the installed copy, with its version
    assert "smollm2/arithmetic_grpo" in grpokit("recipes")
    assert grpokit("--version").startswith("grpokit ")
    loaded = run(python, "-c", "import grpokit; print(grpokit.load_recipe('smollm2/math_grpo').source)")
    assert loaded.startswith(purelib)  # the recipe and its data file came with the wheel
    recipe = elsewhere / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe(tiny_model_dir, elsewhere / "runs")), encoding="utf-8")
    out = grpokit("train", str(recipe), "-q")
    run_dir = Path(out.strip().splitlines()[-1].removeprefix("run directory: "))
    assert (run_dir / "summary.json").is_file()
