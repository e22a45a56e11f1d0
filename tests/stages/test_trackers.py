"""Experiment trackers (grpo.report_to) get TRL's metrics and grpokit's own beside them: the stage
evaluations on the test split, the in-training evaluations and the health warnings."""

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from grpokit.recipe.load import build_recipe
from tests.conftest import tiny_recipe
from tests.stages.test_pipeline import make_boom  # noqa: F401  (named by dotted path below)

# make_boom (test_pipeline's, named here by this module's path) raises on every other call: a health warning at step 1
REWARDS = [{"name": "format"}, {"name": "tests.stages.test_trackers.make_boom"}]


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in a TensorBoard folder's event files, by tag, in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        events = EventAccumulator(str(path), size_guidance={"scalars": 0})
        events.Reload()
        for tag in events.Tags()["scalars"]:
            out.setdefault(tag, []).extend((event.step, event.value) for event in events.Scalars(tag))
    return {tag: sorted(points) for tag, points in out.items()}


def test_tensorboard_holds_trl_losses_and_grpokit_metrics(tiny_model_dir, tmp_path):
    from grpokit.stages import pipeline as train

    raw = tiny_recipe(
        tiny_model_dir, tmp_path, rewards=REWARDS, grpo={"report_to": "tensorboard"}, eval={"every": 1, "every_n": 2}
    )
    run_dir = train.main(build_recipe(raw))
    [folder] = (run_dir / "grpo").glob("runs/*")
    scalars = tensorboard_scalars(folder)
    assert [step for step, _ in scalars["train/loss"]] == [1, 2]  # TRL's
    assert "train/reward" in scalars
    assert [step for step, _ in scalars["train/eval/accuracy"]] == [1]  # in-training evaluation, validation split
    assert [step for step, _ in scalars["train/health/reward_errors/tests.stages.test_trackers.make_boom"]] == [1]
    stages = json.loads((run_dir / "stages.json").read_text())
    # The evaluation before the stage at its first step, the stage's own at its last: stages.json's numbers.
    assert [step for step, _ in scalars["test/accuracy"]] == [0, 2]
    assert [value for _, value in scalars["test/accuracy"]] == pytest.approx([row["accuracy"] for row in stages])
    assert [value for _, value in scalars["test/format_rate"]] == pytest.approx([row["format_rate"] for row in stages])


def wandb_records(path: Path) -> list[Any]:
    """The protobuf Records of an offline W&B run's .wandb file: leveldb's log format (a 7-byte file header, then
    32 KiB blocks of records, each a 7-byte header (crc32, length, type) and its piece of a Record)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a .wandb file"
    block, index, pending, records = 32768, 7, b"", []
    while index + 7 <= len(data):
        left = block - index % block
        if left < 7:  # a block's zero trailer
            index += left
            continue
        _, length, kind = struct.unpack("<IHB", data[index : index + 7])
        piece, index = data[index + 7 : index + 7 + length], index + 7 + length
        pending = piece if kind in (1, 2) else pending + piece  # FULL, FIRST; MIDDLE, LAST continue one
        if kind not in (1, 4):
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending)
        records.append(record)
    return records


def wandb_history(records: list[Any]) -> list[dict[str, Any]]:
    """The history rows among `records`, as dicts."""
    return [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        for record in records
        if record.WhichOneof("record_type") == "history"
    ]


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """W&B offline, quiet, its files under tmp_path/wandb."""
    wandb = pytest.importorskip("wandb")
    quiet = {"WANDB_SILENT": "true", "WANDB_CONSOLE": "off", "WANDB_X_DISABLE_STATS": "true"}
    for key, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), **quiet}.items():
        monkeypatch.setenv(key, value)
    return wandb


def exit_code(records: list[Any]) -> int:
    [code] = [record.exit.exit_code for record in records if record.WhichOneof("record_type") == "exit"]
    return code


def test_wandb_offline_run_holds_the_train_loss_and_grpokit_metrics(tiny_model_dir, tmp_path, offline_wandb):
    from grpokit.stages import pipeline as train

    raw = tiny_recipe(tiny_model_dir, tmp_path / "runs", grpo={"report_to": ["wandb"]})
    run_dir = train.main(build_recipe(raw))
    assert offline_wandb.run is None  # grpokit ended the W&B run it opened: its files are complete
    [log_file] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    records = wandb_records(log_file)
    history = wandb_history(records)
    losses = [row["train/loss"] for row in history if "train/loss" in row]
    assert len(losses) == 2  # TRL's, both steps
    stages = json.loads((run_dir / "stages.json").read_text())
    tested = [row["test/accuracy"] for row in history if "test/accuracy" in row]
    assert tested == pytest.approx([row["accuracy"] for row in stages])
    [run] = [record.run for record in records if record.WhichOneof("record_type") == "run"]
    assert run.display_name == f"tiny/{run_dir.name}"  # the run folder's name
    assert exit_code(records) == 0


def test_a_run_that_fails_ends_its_wandb_run_marked_failed(tiny_model_dir, tmp_path, offline_wandb):
    from transformers import TrainerCallback

    from grpokit.stages import pipeline as train

    class Crash(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            raise RuntimeError("crashed on purpose")

    raw = tiny_recipe(tiny_model_dir, tmp_path / "runs", grpo={"report_to": "wandb"})
    with pytest.raises(RuntimeError, match="crashed on purpose"):
        train.main(build_recipe(raw), callbacks=[Crash()])
    assert offline_wandb.run is None
    [log_file] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    assert exit_code(wandb_records(log_file)) == 1
