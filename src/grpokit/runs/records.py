"""Run folders that say what they hold: a status file per run, the list of runs, and the newest one that worked.

`status.json` in each run directory is rewritten (atomically) as the run moves on:

    running       training (with the process id; a process that died without a word reads "stopped")
    interrupted   stopped on a signal or a full disk, with a checkpoint to resume from
    failed        ended by an error (kept in the file), before or during training
    finished      done: summary.json and the report are there

`grpokit runs` lists them with recipe, model and headline numbers; pickers of "the newest run" skip
failed ones, so a start that failed before training never hides the run before it.

>>> default_name(Path("recipes/smollm2/arithmetic_grpo.yaml"))
'smollm2/arithmetic_grpo'
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from grpokit.errors import RecipeError, TrainingInterrupted
from grpokit.runs.checkpoints import resume_checkpoint

STATUS_FILE = "status.json"


def default_name(recipe_path: Path) -> str:
    """A run folder name from the recipe's folder and file name: recipes with one file name in two folders
    (recipes/smollm2/arithmetic_grpo.yaml, recipes/qwen2.5-0.5b/arithmetic_grpo.yaml) never share runs."""
    path = Path(recipe_path).absolute()
    parent = path.parent.name
    return f"{parent}/{path.stem}" if parent else path.stem


def _write(run_dir: Path, status: dict[str, Any]) -> None:
    tmp = run_dir / f".{STATUS_FILE}.tmp"
    tmp.write_text(json.dumps(status, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, run_dir / STATUS_FILE)


def _saved(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def mark_running(run_dir: Path, recipe: Any, resumed: bool = False) -> None:
    """Called when a run starts or resumes: status running, with what it trains and who runs it."""
    old = _saved(run_dir)
    _write(
        run_dir,
        {
            "status": "running",
            "recipe": recipe.source,
            "model": recipe.model.name,
            "task": recipe.task.name,
            "started": old.get("started", time.time()),
            "updated": time.time(),
            "resumed": resumed or old.get("resumed", False),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        },
    )


def mark_finished(run_dir: Path) -> None:
    _write(run_dir, {**_saved(run_dir), "status": "finished", "updated": time.time(), "error": None})


def mark_stopped(run_dir: Path, err: BaseException) -> None:
    """Called with the exception that ended a run: interrupted when a checkpoint of the stage it stopped in
    (any stage: `checkpoints.resume_checkpoint`) lets it resume, else failed."""
    found = resume_checkpoint(run_dir)
    checkpoint = str(found) if found else None
    resumable = checkpoint is not None and (
        isinstance(err, TrainingInterrupted | KeyboardInterrupt) or getattr(err, "kept", None) is not None
    )
    status = {
        **_saved(run_dir),
        "status": "interrupted" if resumable else "failed",
        "updated": time.time(),
        "error": f"{type(err).__name__}: {err}"[:2000],
        "checkpoint": checkpoint,
    }
    _write(run_dir, status)


def read_status(run_dir: Path) -> dict[str, Any]:
    """The run's status; runs from before status files count as finished when they have a summary."""
    status = _saved(run_dir)
    if not status:
        return {"status": "finished" if (run_dir / "summary.json").is_file() else "unknown"}
    here = status.get("host") == socket.gethostname()
    if status.get("status") == "running" and here and not _alive(status.get("pid")):
        status = {**status, "status": "stopped", "error": "the process ended without writing a status (killed?)"}
    return status


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class RunInfo:
    path: Path
    status: str
    recipe: str
    model: str
    headline: str
    error: str | None = None


def find_runs(base: Path) -> list[Path]:
    """Run directories (folders holding recipe.yaml) under `base`, oldest first by their timestamp name."""
    base = Path(base)
    if (base / "recipe.yaml").is_file():
        return [base]
    found = [p.parent for depth in ("*/", "*/*/", "*/*/*/") for p in base.glob(f"{depth}recipe.yaml")]
    return sorted(found, key=lambda p: (p.name, str(p)))


def describe(run_dir: Path) -> RunInfo:
    status = read_status(run_dir)
    try:
        recipe = yaml.safe_load((run_dir / "recipe.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        recipe = {}
    return RunInfo(
        path=run_dir,
        status=status.get("status", "unknown"),
        recipe=status.get("recipe") or str((recipe.get("output") or {}).get("name") or "?"),
        model=str(status.get("model") or (recipe.get("model") or {}).get("name", "?")),
        headline=headline(run_dir),
        error=status.get("error"),
    )


def headline(run_dir: Path) -> str:
    """'accuracy 0.0% -> 93.5% (15.8 min)' from summary.json (its stages list when it has one)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if summary.get("stages"):
        accuracies = [s.get("accuracy") for s in summary["stages"] if s.get("accuracy") is not None]
        minutes = sum(s.get("minutes") or 0 for s in summary["stages"])
    else:
        accuracies = [e.get("accuracy") for e in summary.get("evals", {}).values() if e.get("accuracy") is not None]
        minutes = (summary.get("seconds") or {}).get("total", 0) / 60
    if not accuracies:
        return ""
    shown = accuracies if len(accuracies) == 1 else [accuracies[0], accuracies[-1]]
    return f"accuracy {' -> '.join(f'{100 * a:.1f}%' for a in shown)} ({minutes:.1f} min)"


def list_runs(base: Path) -> list[RunInfo]:
    return [describe(run) for run in find_runs(base)]


def format_runs(infos: list[RunInfo]) -> str:
    if not infos:
        return "no runs"
    rows = [("run", "status", "recipe", "model", "result")]
    rows += [(str(i.path), i.status, i.recipe, i.model, i.headline or (i.error or "")[:80]) for i in infos]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    return "\n".join("  ".join([*(r[c].ljust(widths[c]) for c in range(4)), r[4]]).rstrip() for r in rows)


def newest(base: Path, usable: Any = None) -> Path | None:
    """The newest run under `base` that did not fail (and passes `usable(run_dir)` when given)."""
    for run in reversed(find_runs(base)):
        if read_status(run).get("status") != "failed" and (usable is None or usable(run)):
            return run
    return None


def latest_resumable_run(base: Path) -> Path | None:
    """The newest run directory under `base` that did not fail and can continue a stage from a complete
    checkpoint (`checkpoints.resume_checkpoint`), whichever stage that is."""
    return newest(base, lambda run: resume_checkpoint(run) is not None)


def resolve_resume(recipe: Any, resume: str | Path | None) -> Path | None:
    """`resume` as a run directory: "latest" is the recipe's newest resumable run (`latest_resumable_run`
    under its output folder); RecipeError when there is none."""
    if resume != "latest":
        return Path(resume) if resume else None
    base = Path(recipe.output.dir) / (recipe.output.name or "run")
    found = latest_resumable_run(base)
    if found is None:
        raise RecipeError(f"nothing to resume: no run under {base} has a complete checkpoint")
    return found
