"""`grpokit push RUN REPO_ID`: fails in seconds, plainly, without a network or a token; otherwise exports the
run once and hands the folder (weights and model card) to the hub's create_repo and upload_folder."""

import shutil
import time
from pathlib import Path

import pytest
import yaml

from grpokit.cli.commands import main
from grpokit.models import export, push
from grpokit.recipe.load import build_recipe
from tests.conftest import tiny_recipe


@pytest.fixture
def no_export(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("exported before the hub was checked")

    monkeypatch.setattr(export, "main", refuse)


def run_folder(tmp_path, tiny_model_dir):
    """A full fine-tune's run directory (its model/ and recipe.yaml) without the training."""
    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run / "model")
    recipe = build_recipe(tiny_recipe(tiny_model_dir, tmp_path / "runs"))
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe.to_dict()), encoding="utf-8")
    return run


def test_offline_it_fails_in_seconds_naming_the_fix(tmp_path, monkeypatch, capsys, no_export):
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text("model: {name: embedded}\n", encoding="utf-8")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    began = time.perf_counter()
    assert main(["push", str(run), "someone/tiny"]) == 2
    assert time.perf_counter() - began < 5
    err = capsys.readouterr().err
    assert err.startswith("grpokit: error: cannot push") and "HF_HUB_OFFLINE" in err and "Traceback" not in err
    assert not (run / "export").exists()


def test_without_a_token_it_names_hf_token_and_the_login(tmp_path, monkeypatch, capsys, no_export):
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text("model: {name: embedded}\n", encoding="utf-8")
    monkeypatch.setattr(push.hub, "unreachable_reason", lambda: None)
    monkeypatch.setattr(push, "get_token", lambda: None)
    assert main(["push", str(run), "someone/tiny"]) == 2
    err = capsys.readouterr().err
    assert "no Hugging Face token" in err and "HF_TOKEN" in err and "hf auth login" in err


CALLS: list = []


class FakeHub:
    """HfApi's calls that push makes, recorded in CALLS; the folder's files as upload_folder saw them."""

    def whoami(self):
        return {"name": "someone"}

    def create_repo(self, repo_id, **kwargs):
        CALLS.append(("create_repo", repo_id, kwargs))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        files = sorted(path.name for path in Path(folder_path).iterdir())
        card = (Path(folder_path) / "README.md").read_text()
        CALLS.append(("upload_folder", repo_id, folder_path, files, card))


def test_it_exports_once_then_uploads_the_folder_with_card_and_weights(tmp_path, tiny_model_dir, monkeypatch, capsys):
    run = run_folder(tmp_path, tiny_model_dir)
    CALLS.clear()
    monkeypatch.setattr(push, "HfApi", FakeHub)
    monkeypatch.setattr(push, "get_token", lambda: "hf_not_a_real_token")
    monkeypatch.setattr(push.hub, "unreachable_reason", lambda: None)
    assert main(["push", str(run), "someone/tiny", "--private"]) == 0
    assert "pushed: https://huggingface.co/someone/tiny" in capsys.readouterr().out
    (_, repo, options), (_, uploaded_repo, folder, files, card) = CALLS
    assert repo == uploaded_repo == "someone/tiny" and options["private"] and options["exist_ok"]
    assert folder == str(run / "export")
    assert {"README.md", "model.safetensors", "grpokit_export.json", "tokenizer.json"} <= set(files)
    assert "AutoModelForCausalLM.from_pretrained('someone/tiny')" in card and "library_name: transformers" in card

    # Pushed again: the export is there, so nothing is exported; the same folder goes up.
    monkeypatch.setattr(export, "main", lambda *a: pytest.fail("exported twice"))
    CALLS.clear()
    assert main(["push", str(run), "someone/other"]) == 0
    assert CALLS[1][2] == str(run / "export") and "from_pretrained('someone/other')" in CALLS[1][4]


def test_a_folder_that_is_no_export_is_refused_before_the_hub(tmp_path, capsys, no_export):
    run = tmp_path / "run"
    (run / "export").mkdir(parents=True)
    (run / "recipe.yaml").write_text("model: {name: embedded}\n", encoding="utf-8")
    (run / "export" / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["push", str(run), "someone/tiny"]) == 2
    assert "holds no grpokit export" in capsys.readouterr().err


def test_export_without_a_folder_writes_run_export_with_its_card(tmp_path, tiny_model_dir, capsys):
    from huggingface_hub import ModelCard

    run = run_folder(tmp_path, tiny_model_dir)
    assert main(["export", str(run)]) == 0
    out = run / "export"
    assert f"exported: {out}" in capsys.readouterr().out and (out / "model.safetensors").is_file()
    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "transformers" and "base_model" not in card.data.to_dict()  # a local folder
    assert "| grpo | grpo | — | not finished |" in card.text  # the fabricated run trained nothing
