"""Several processes on one machine: torchrun with gloo on the CPU, one run directory, same weights."""

import json
import os

import pytest
import yaml

from grpokit.cli.commands import main
from grpokit.stages.launch import command
from tests.conftest import tiny_recipe


def make_crash_on_rank1(task):
    """A reward factory (by dotted path) that fails on rank 1 only, as a bug on one GPU would."""
    if os.environ.get("RANK") == "1":
        raise RuntimeError("rank 1 crashed on purpose")
    from grpokit.rewards import make_reward

    return make_reward("format", task)


def write(tmp_path, raw):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_two_processes_share_one_run_and_end_with_the_same_weights(tiny_model_dir, tmp_path, monkeypatch):
    probe = tmp_path / "probe"
    monkeypatch.setenv("GRPOKIT_RANK_PROBE", str(probe))
    out = tmp_path / "runs"
    raw = tiny_recipe(tiny_model_dir, out, output={"dir": str(out), "name": "tiny", "save_every": 0})
    assert main(["train", str(write(tmp_path, raw)), "--processes", "2"]) == 0

    (run_dir,) = (out / "tiny").iterdir()  # one run directory for both ranks
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]  # DDP kept them in step
    assert ranks[0]["prompts"] and set(ranks[0]["prompts"]) != set(ranks[1]["prompts"])
    assert len(list(run_dir.glob("**/metrics.jsonl"))) == 1
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward" in r] == [1, 2], "rank 0 alone writes the metrics: no step twice"


def test_a_failing_rank_stops_the_others_with_its_error(tiny_model_dir, tmp_path, capfd):
    out = tmp_path / "runs"
    raw = tiny_recipe(
        tiny_model_dir,
        out,
        rewards=[{"name": "tests.stages.test_launch.make_crash_on_rank1"}],
        output={"dir": str(out), "name": "tiny"},
    )
    code = main(["train", str(write(tmp_path, raw)), "--processes", "2"])
    err = capfd.readouterr().err
    assert code != 0
    assert "rank 1 crashed on purpose" in err and "a process failed" in err


def test_launch_commands():
    torchrun = command(["r.yaml", "grpo.max_steps=2"], 4)
    assert torchrun[:2] == ["-m", "torch.distributed.run"] and "--nproc_per_node" in torchrun
    assert torchrun[-4:] == ["grpokit.cli", "train", "r.yaml", "grpo.max_steps=2"]
    accel = command(["r.yaml"], 3, "recipes/accelerate/zero3.yaml")
    assert accel[:2] == ["-m", "accelerate.commands.launch"] and "--module" in accel
    assert accel[accel.index("--num_processes") + 1] == "3"


@pytest.mark.parametrize("bad", [{"processes": 0}, {"config": "recipes/accelerate/nope.yaml"}])
def test_bad_launch_sections(tiny_model_dir, tmp_path, capsys, bad):
    raw = tiny_recipe(tiny_model_dir, tmp_path, launch=bad)
    assert main(["train", str(write(tmp_path, raw))]) == 2
    assert "launch." in capsys.readouterr().err


def test_serve_rollouts_and_env(capsys):
    recipe = "recipes/qwen2.5-3b-instruct/countdown_grpo.yaml"
    assert main(["serve-rollouts", recipe, "--dry-run", "--tensor-parallel", "2"]) == 0
    printed = capsys.readouterr().out
    assert "vllm-serve --model Qwen/Qwen2.5-3B-Instruct --tensor_parallel_size 2" in printed
    assert "--port 8000" in printed
    assert main(["serve-rollouts", "recipes/smollm2/arithmetic_grpo.yaml", "--dry-run"]) == 2
    assert "does not use a rollout server" in capsys.readouterr().err
    assert main(["env"]) == 0
    report = capsys.readouterr().out
    assert "CPU cores" in report and "trl" in report and "recipes/accelerate/zero3.yaml" in report


def make_rank0_noise(task):
    """Rewards that differ within every group on rank 0 and are all equal on rank 1, so the ranks keep
    different numbers of non-zero-advantage rows."""
    import zlib

    rank0 = os.environ.get("RANK") == "0"

    def noise(completion, example):
        return (zlib.crc32(completion.encode()) % 100) / 100 if rank0 else 0.0

    return noise


def test_ranks_that_keep_different_numbers_of_rows_stay_in_step(tiny_model_dir, tmp_path, monkeypatch):
    """Zero-advantage rows are skipped per rank; TRL gathers per-row tensors, so the counts must agree."""
    probe = tmp_path / "probe"
    monkeypatch.setenv("GRPOKIT_RANK_PROBE", str(probe))
    out = tmp_path / "runs"
    raw = tiny_recipe(
        tiny_model_dir,
        out,
        rewards=[{"name": "tests.stages.test_launch.make_rank0_noise"}],
        grpo={"max_steps": 2, "temperature": 1.5},
        output={"dir": str(out), "name": "tiny", "save_every": 0},
    )
    assert main(["train", str(write(tmp_path, raw)), "--processes", "2"]) == 0
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
