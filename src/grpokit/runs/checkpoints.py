"""Checkpoints that are complete or ignored, resume, and a clean stop on Ctrl-C / SIGTERM.

transformers writes `checkpoint-N/` file by file, so a crash mid-write leaves a folder that looks
like a checkpoint. grpokit writes a marker (`grpokit-complete.json`, atomically, last) after every
save and resumes only from marked checkpoints.

A first SIGINT or SIGTERM asks the trainer to save a checkpoint at the end of the current step and
stop; `grpokit train RECIPE --resume RUN` continues from it. A second signal aborts at once. Every stage
saves into its own folder (`RUN/<stage>/checkpoint-N`), sft and grpo alike, and a run resumes from the
one it stopped in, whatever its name (`resume_checkpoint`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MARKER = "grpokit-complete.json"
STAGES_FILE = "stages.json"  # the finished stages, one row each, as `grpokit.stages.pipeline` writes them
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def mark_complete(checkpoint: Path, step: int) -> None:
    """Write the marker last, atomically: a checkpoint without it is treated as unfinished."""
    tmp = checkpoint / f".{MARKER}.tmp"
    tmp.write_text(json.dumps({"step": step}) + "\n", encoding="utf-8")
    os.replace(tmp, checkpoint / MARKER)


def complete_checkpoints(folder: Path) -> list[Path]:
    """Marked checkpoints under `folder`, oldest first; unmarked ones are logged and skipped."""
    found = []
    for path in folder.glob("checkpoint-*") if folder.is_dir() else []:
        match = _CHECKPOINT.match(path.name)
        if not match or not path.is_dir():
            continue
        if (path / MARKER).is_file():
            found.append((int(match.group(1)), path))
        else:
            log.warning("ignoring %s: it was never finished (no %s)", path, MARKER)
    return [path for _, path in sorted(found)]


def checkpoint_step(path: Path) -> int:
    return int(_CHECKPOINT.match(path.name).group(1))


def finished_stages(run_dir: Path) -> set[str]:
    """The names of the stages `run_dir` finished (its stages.json rows; `before` among them once evaluated)."""
    try:
        rows = json.loads((run_dir / STAGES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {row["name"] for row in rows if isinstance(row, dict) and isinstance(row.get("name"), str)}


def resume_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of the stage the run stopped in, or None when it has none.

    That stage is the one whose folder holds checkpoints and stages.json does not list as finished
    (stages run in order, so there is at most one): a warm-up `sft` stage as much as one named `grpo`.
    Finished stages keep their checkpoints, which a resume never continues.
    """
    finished = finished_stages(run_dir)
    stages = [p for p in run_dir.iterdir() if p.is_dir() and p.name not in finished] if run_dir.is_dir() else []
    last = [found[-1] for found in map(complete_checkpoints, stages) if found]  # each stage's highest step
    return max(last, key=lambda path: (path / MARKER).stat().st_mtime_ns, default=None)


def truncate_metrics(path: Path, stage: str, after_step: int) -> int:
    """Drop `stage` rows logged after `after_step` (they are redone on resume); return how many."""
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line) if line.strip() else None
        if row is not None and row.get("stage") == stage and row.get("step", 0) > after_step:
            dropped += 1
        elif row is not None:
            kept.append(line)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
    os.replace(tmp, path)
    return dropped


class StopOnSignal:
    """Within `with`, SIGINT/SIGTERM request a save-and-stop at the end of the current training step."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():  # signals can only be handled there
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.requested:  # the second signal: stop now, without saving
            raise KeyboardInterrupt(f"{name} again: stopped without saving")
        self.requested = name
        log.warning("%s: saving a checkpoint after this step, then stopping (send it again to abort now)", name)

    def callback(self) -> Any:
        # slow import: transformers, only when a trainer runs (run listings import this module)
        from transformers import TrainerCallback

        outer = self

        class _Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if outer.requested:
                    control.should_save = True
                    control.should_training_stop = True

        return _Callback()
