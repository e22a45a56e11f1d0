"""Saving on a disk that may fill up: check free space first, and turn a full disk into one clear error.

Every checkpoint and model save goes through `saving()`: it compares the free space with the size about
to be written, and if the write still fails for lack of space it removes the unfinished folder (the last
complete checkpoint stays) and raises `DiskFullError`, whose message names the folder, the space needed
and free, and the command that resumes. Why: torch's own error for a full disk (`unexpected pos`) says
neither "disk full", nor where, nor how much.

>>> human(1536), human(3 * 1024**3)
('1.5 KB', '3.0 GB')
"""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grpokit.errors import DiskFullError
from grpokit.runs.checkpoints import MARKER, complete_checkpoints

log = logging.getLogger(__name__)

SLACK_BYTES = 8 * 1024**2  # tokenizer, RNG and scheduler state, trainer_state.json, and some margin
# What a failed write looks like when the disk fills: errno, Rust's io::Error (safetensors), torch's writer.
_FULL_TEXTS = ("no space left", "storagefull", "disk quota", "unexpected pos", "file write failed")


def human(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def free_bytes(path: Path) -> int:
    """Free space on the filesystem that holds `path` (or its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) if Path(path).is_dir() else 0


def tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def weights_bytes(model: Any) -> int:
    """What `save_pretrained` writes: the trainable (adapter) weights of a PEFT model, else every weight."""
    params = list(model.parameters())
    if hasattr(model, "peft_config"):
        params = [p for p in params if p.requires_grad]
    return tensor_bytes(params)


def checkpoint_bytes(model: Any, optimizer: Any, folder: Path) -> int:
    """The size of the next checkpoint in `folder`: the last complete one's, else weights + optimizer state."""
    previous = complete_checkpoints(folder)
    if previous:
        return int(folder_bytes(previous[-1]) * 1.05) + SLACK_BYTES // 8
    state = getattr(optimizer, "state", None) or {}
    moments = [v for s in state.values() for v in s.values() if hasattr(v, "element_size")]
    # Before the first step Adam holds no state yet: expect two fp32 moments per trainable weight.
    optimizer_size = tensor_bytes(moments) or 2 * 4 * sum(p.numel() for p in model.parameters() if p.requires_grad)
    return weights_bytes(model) + optimizer_size + SLACK_BYTES


def run_dir_of(path: Path) -> Path | None:
    """The run directory (the folder holding recipe.yaml) that `path` lies in."""
    for parent in [Path(path), *Path(path).parents]:
        if (parent / "recipe.yaml").is_file():
            return parent
    return None


def is_disk_full(err: BaseException) -> bool:
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err).lower()
    return any(t in text for t in _FULL_TEXTS)


@contextlib.contextmanager
def saving(folder: Path, needed: int, what: str) -> Iterator[None]:
    """Write `what` into `folder` inside this block; too little space, before or during, raises DiskFullError."""
    folder = Path(folder)
    free = free_bytes(folder)
    if free < needed:
        raise _error(folder, needed, free, what, started=False)
    existed = folder.exists()
    try:
        yield
    except Exception as err:
        if isinstance(err, DiskFullError) or not is_disk_full(err):
            raise
        removed = ""
        if not existed and not (folder / MARKER).exists():
            shutil.rmtree(folder, ignore_errors=True)  # half written: never loaded, only in the way
            removed = f" (the unfinished {folder.name} was removed)"
        raise _error(folder, needed, free_bytes(folder), what, started=True, cause=err, removed=removed) from err


def _error(
    folder: Path,
    needed: int,
    free: int,
    what: str,
    started: bool,
    cause: BaseException | None = None,
    removed: str = "",
) -> DiskFullError:
    run_dir = run_dir_of(folder)
    kept = None
    if run_dir is not None:
        found = complete_checkpoints(run_dir / "grpo")
        kept = found[-1] if found else None
    if kept is not None:
        then = (
            f"The last complete checkpoint, {kept.name}, is kept{removed}. Free some space (or move the run folder to "
            f"a larger disk), then continue with: grpokit train {run_dir / 'recipe.yaml'} --resume {run_dir}"
        )
    else:
        then = (
            f"No GRPO checkpoint was saved before it{removed}, so there is nothing to resume: free some space or set "
            "output.dir to a larger disk, then start the run again."
        )
    if started:
        why = f"{type(cause).__name__}: {str(cause)[:160]}" if cause is not None else "no space left"
        found = f"failed for lack of space ({why}); it needs about {human(needed)}, {human(free)} is free there now"
    else:
        found = f"needs about {human(needed)}, and only {human(free)} is free there"
    message = f"disk full: saving {what} into {folder} {found}. {then}"
    return DiskFullError(message, folder, needed, free, kept)


def save_pretrained(model: Any, tokenizer: Any, out: Path, what: str) -> Path:
    """`model.save_pretrained` + `tokenizer.save_pretrained` into `out`, behind a free-space check."""
    with saving(out, weights_bytes(model) + SLACK_BYTES, what):
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    return out
