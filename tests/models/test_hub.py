"""Hub ids with no network and HF_HUB_OFFLINE unset: the cache, or a plain error within seconds."""

import shutil
import socket
import time

import pytest

from grpokit.errors import ModelNotFoundError
from grpokit.models import hub
from grpokit.models.load import load_model


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """No network to the hub (its endpoint is a closed local port), an empty cache, offline flags unset."""
    import datasets
    from huggingface_hub import constants

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    return tmp_path


def test_the_probe_answers_within_its_timeout(monkeypatch, no_hub):
    from huggingface_hub import constants

    assert "127.0.0.1" in hub.unreachable_reason(timeout=1)
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")  # a name that never resolves
    started = time.perf_counter()
    assert "hub.invalid:443" in hub.unreachable_reason(timeout=1)
    assert time.perf_counter() - started < 2
    with socket.socket() as server:  # a host that answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert hub.unreachable_reason(timeout=1) is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.unreachable_reason() == "HF_HUB_OFFLINE is set"


def test_an_uncached_hub_model_fails_fast_and_plainly(no_hub):
    started = time.perf_counter()
    with pytest.raises(ModelNotFoundError) as err:
        load_model("grpokit-tests/not-cached")
    assert time.perf_counter() - started < 5
    message = str(err.value)
    assert "model 'grpokit-tests/not-cached' is not in the local cache" in message
    assert str(no_hub / "hub") in message and "use `embedded`, a local folder, or connect" in message


def test_a_cached_hub_model_loads_without_the_network(no_hub, tiny_model_dir):
    snapshot = no_hub / "hub" / "models--grpokit-tests--tiny" / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_model_dir, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    started = time.perf_counter()
    model, tokenizer = load_model("grpokit-tests/tiny")
    assert model.config.num_hidden_layers == 2
    assert time.perf_counter() - started < 10 and tokenizer.padding_side == "left"


def test_an_uncached_hub_dataset_fails_fast_and_plainly(no_hub):
    from grpokit.tasks.data import load_split

    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"data set 'grpokit-tests/nothing' is not in the local cache .* connect"):
        load_split("grpokit-tests/nothing", "train")
    assert time.perf_counter() - started < 5


def test_the_cli_names_the_cache_for_an_offline_hub_id(no_hub, capsys):
    from grpokit.cli.commands import main

    recipe = no_hub / "r.yaml"
    recipe.write_text(
        "model: {name: grpokit-tests/not-cached}\nrewards: [{name: format}]\ngrpo: {bf16: false}\n"
        f"output: {{dir: {no_hub / 'runs'}}}\n"
    )
    started = time.perf_counter()
    assert main(["train", str(recipe)]) == 2
    assert time.perf_counter() - started < 30  # the recipe and task load first; the hub is not waited on
    assert "is not in the local cache" in capsys.readouterr().err
