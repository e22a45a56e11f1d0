"""bench/bench_memory.py: a run's resident memory labelled by phase, on a tiny run (seconds)."""

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import load_script, tiny_recipe


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/bench_memory.py")


def test_every_phase_of_a_run_gets_its_peak_and_the_patches_go_afterwards(bench, tiny_model_dir, tmp_path):
    import grpokit.stages.callbacks as callbacks
    import grpokit.stages.pipeline as train
    import grpokit.stages.trainer as trainer

    originals = (train.run_stage, callbacks.evaluate_recipe, trainer.GrpoTrainer.compute_loss, trainer.sample)
    raw = tiny_recipe(
        tiny_model_dir,
        tmp_path / "runs",
        cold_start={"enabled": True},
        eval={"every": 1, "every_n": 2},
    )
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert bench.main([str(path), "grpo.max_steps=2", "--out", str(tmp_path / "out")]) == 0
    result = json.loads((tmp_path / "out" / "results_memory.json").read_text())
    labels = list(result["peaks_gb"])
    for phase in ("sft stage", "grpo stage", "training pass", "rollout and scoring", "step evaluation", "report"):
        assert any(phase in label for label in labels), (phase, labels)
    assert any(label.startswith("evaluation") for label in labels)  # before and after, outside any stage
    assert any(label.endswith("> decoding") for label in labels)
    assert result["peak_gb"] == max(result["peaks_gb"].values()) > 0.1
    assert list(result["peaks_gb"].values()) == sorted(result["peaks_gb"].values(), reverse=True)
    assert Path(result["run_dir"], "summary.json").is_file()
    assert (train.run_stage, callbacks.evaluate_recipe, trainer.GrpoTrainer.compute_loss, trainer.sample) == originals
