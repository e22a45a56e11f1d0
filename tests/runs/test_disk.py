"""A full disk: checked before each save, and a write that still fails keeps the last complete checkpoint."""

import contextlib
import errno
import os
import subprocess
import uuid

import pytest
from transformers import TrainerCallback

from grpokit.errors import DiskFullError
from grpokit.recipe.load import build_recipe, load_recipe
from grpokit.runs import disk
from grpokit.runs.checkpoints import complete_checkpoints
from grpokit.stages import pipeline as train
from tests.conftest import tiny_recipe


def test_too_little_space_is_refused_before_writing(tmp_path):
    target = tmp_path / "run" / "adapter"
    refused = pytest.raises(DiskFullError, match=r"needs about 1024\.0 GB, and only .* is free there\. No GRPO")
    with refused as err, disk.saving(target, 1024**4, "the trained adapter"):
        raise AssertionError("nothing may be written")
    assert err.value.errno == errno.ENOSPC and not target.exists()
    assert "nothing to resume" in str(err.value)


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 765952 vs 765840"),
        RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space" })'),
    ],
)
def test_a_failed_write_removes_the_unfinished_folder_and_names_the_resume(tmp_path, failure):
    run = tmp_path / "run"
    (run / "grpo" / "checkpoint-2").mkdir(parents=True)
    (run / "recipe.yaml").write_text("{}")
    from grpokit.runs.checkpoints import mark_complete

    mark_complete(run / "grpo" / "checkpoint-2", 2)
    folder = run / "grpo" / "checkpoint-4"
    with pytest.raises(DiskFullError) as err, disk.saving(folder, 10, "GRPO checkpoint-4"):
        folder.mkdir()
        (folder / "optimizer.pt").write_bytes(b"half")
        raise failure
    message = str(err.value)
    assert not folder.exists()
    assert f"disk full: saving GRPO checkpoint-4 into {folder}" in message and "failed for lack of space" in message
    assert "checkpoint-2, is kept (the unfinished checkpoint-4 was removed)" in message
    assert f"grpokit train {run / 'recipe.yaml'} --resume {run}" in message


def test_other_errors_pass_through(tmp_path):
    with pytest.raises(ValueError, match="not a disk problem"), disk.saving(tmp_path / "x", 1, "x"):
        raise ValueError("not a disk problem")


class FillDiskAfterFirstSave(TrainerCallback):
    """Once checkpoint-1 is saved, fill the filesystem until only `leave` bytes are free."""

    def __init__(self, folder, leave):
        self.folder, self.leave = folder, leave

    def on_save(self, args, state, control, **kwargs):
        if state.global_step != 1:
            return
        size = disk.free_bytes(self.folder) - self.leave
        with (self.folder / "ballast").open("wb") as f:
            while size > 0:
                chunk = min(size, 1 << 20)
                f.write(b"\0" * chunk)
                size -= chunk


@contextlib.contextmanager
def small_filesystem(tmp_path, size="48m"):
    """A size-limited tmpfs at tmp_path/mnt (needs root or CAP_SYS_ADMIN; skipped where mounting fails)."""
    mount = tmp_path / f"mnt-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip() or done.returncode}); run as root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def disk_recipe(tiny_model_dir, out):
    # save_every=1: checkpoint-1 is written while there is room, checkpoint-2 meets the full disk.
    raw = tiny_recipe(tiny_model_dir, out, grpo={"max_steps": 3}, output={"dir": str(out), "save_every": 1})
    return build_recipe(raw)


def only_run(base):
    (run_dir,) = (base / "tiny").iterdir()
    return run_dir


def test_a_full_tmpfs_stops_before_the_next_checkpoint(tiny_model_dir, tmp_path):
    with small_filesystem(tmp_path) as mount:
        fill = FillDiskAfterFirstSave(mount, leave=256 * 1024)
        with pytest.raises(DiskFullError) as err:
            train.main(disk_recipe(tiny_model_dir, mount), callbacks=[fill])
        run_dir = only_run(mount)
        message = str(err.value)
        assert f"saving GRPO checkpoint-2 into {run_dir / 'grpo' / 'checkpoint-2'}" in message
        assert "and only 256.0 KB is free there. The last complete checkpoint, checkpoint-1, is kept." in message
        print(f"\nfull-disk message: {message}")  # the closing note quotes it (pytest -s)
        assert [p.name for p in complete_checkpoints(run_dir / "grpo")] == ["checkpoint-1"]
        assert not (run_dir / "grpo" / "checkpoint-2").exists()
        # The resume command the message gives works once there is room again.
        (mount / "ballast").unlink()
        assert train.prepare_resume(load_recipe(run_dir / "recipe.yaml"), run_dir, truncate=False)[2].name == (
            "checkpoint-1"
        )


def test_a_real_enospc_mid_checkpoint_keeps_the_last_complete_one(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(disk, "checkpoint_bytes", lambda *a: 0)  # let the write start, and meet the full disk
    with small_filesystem(tmp_path) as mount:
        fill = FillDiskAfterFirstSave(mount, leave=16 * 1024)
        with pytest.raises(DiskFullError) as err:
            train.main(disk_recipe(tiny_model_dir, mount), callbacks=[fill])
        run_dir = only_run(mount)
        print(f"\nfull-disk message: {err.value}")  # the closing note quotes it (pytest -s)
        assert "failed for lack of space" in str(err.value) and "checkpoint-1, is kept" in str(err.value)
        assert [p.name for p in complete_checkpoints(run_dir / "grpo")] == ["checkpoint-1"]
        assert not (run_dir / "grpo" / "checkpoint-2").exists()


def test_an_injected_enospc_during_the_final_save(tiny_model_dir, tmp_path, monkeypatch):
    """Where no small filesystem can be mounted: the adapter's save fails as a full disk would."""
    from peft import PeftModel

    def no_space(self, *args, **kwargs):
        os.makedirs(args[0], exist_ok=True)
        raise OSError(errno.ENOSPC, "No space left on device")

    class FullAtTheEnd(TrainerCallback):  # checkpoints save normally; the disk fills after the last step
        def on_train_end(self, args, state, control, **kwargs):
            monkeypatch.setattr(PeftModel, "save_pretrained", no_space)

    with pytest.raises(DiskFullError) as err:
        train.main(disk_recipe(tiny_model_dir, tmp_path), callbacks=[FullAtTheEnd()])
    run_dir = only_run(tmp_path)
    # The first save after the last step is the GRPO stage's own adapter (then the run's).
    assert f"saving the trained adapter into {run_dir / 'grpo' / 'adapter'}" in str(err.value)
    assert "checkpoint-3, is kept (the unfinished adapter was removed)" in str(err.value)
    assert not (run_dir / "grpo" / "adapter").exists() and not (run_dir / "adapter").exists()
