"""Run directories written by the tests (recipe, metrics, evaluations, summary), without training anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

QUESTIONS = ["What is 2 + 3 * 4?", "What is 7 + 1 * 2?", "What is 5 + 5 * 5?"]
ANSWERS = ["14", "9", "30"]


def eval_result(accuracy: float, format_rate: float, n: int = 10, right: bool = True) -> dict[str, Any]:
    samples = [
        {
            "question": q,
            "answer": a,
            "completion": f"<think>work</think><answer>{a if right else -1}</answer>",
            "correct": right,
            "format": True,
        }
        for q, a in zip(QUESTIONS, ANSWERS, strict=True)
    ]
    return {
        "task": "arithmetic",
        "n": n,
        "accuracy": accuracy,
        "format_rate": format_rate,
        "mean_completion_tokens": 30.0,
        "max_completion_tokens": 40,
        "truncation_rate": 0.0,
        "tokens_per_second": 100.0,
        "seconds": 6.0,
        "samples": samples,
    }


def make_run(
    base: Path,
    name: str = "arithmetic_grpo",
    stamp: str = "20260101-120000",
    *,
    recipe: dict[str, Any] | None = None,
    steps: int = 6,
    start: float = 1_700_000_000.0,
    seconds_per_step: float = 10.0,
    before: float = 0.0,
    after: float = 0.9,
    stages: list[dict[str, Any]] | None = None,
    status: dict[str, Any] | None = None,
    finished: bool = True,
) -> Path:
    """A finished (or, with finished=False, a started) run directory under base/name/stamp."""
    run = Path(base) / name / stamp
    run.mkdir(parents=True)
    raw = recipe or {}
    full = {
        "model": {"name": "embedded", "dtype": "auto", "revision": None},
        "task": {"name": "arithmetic", "params": {}},
        "rewards": [{"name": "format", "weight": 0.5}, {"name": "correctness", "weight": 1.0}],
        "grpo": {"learning_rate": 1e-4, "max_steps": steps, "bf16": False},
        "output": {"dir": str(base), "name": name},
        **raw,
    }
    (run / "recipe.yaml").write_text(yaml.safe_dump(full, sort_keys=False), encoding="utf-8")
    if status is not None:
        (run / "status.json").write_text(json.dumps(status), encoding="utf-8")
    if not finished:
        return run
    rows = []
    for step in range(1, steps + 1):
        progress = step / steps
        rows.append(
            {
                "stage": "grpo",
                "step": step,
                "time": start + 60 + step * seconds_per_step,
                "reward": 0.5 + progress,
                "rewards/format/mean": min(1.0, 0.4 + progress),
                "rewards/correctness/mean": progress * after,
                "completions/mean_length": 30.0,
            }
        )
        if step % 3 == 0 and step < steps:
            rows.append(
                {"stage": "grpo", "step": step, "time": start + 61 + step * seconds_per_step, "eval/accuracy": progress}
            )
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (run / "eval_before.json").write_text(json.dumps(eval_result(before, 0.0, right=False)), encoding="utf-8")
    (run / "eval_after.json").write_text(json.dumps(eval_result(after, 1.0)), encoding="utf-8")
    total = 60 + steps * seconds_per_step + 10
    summary: dict[str, Any] = {
        "evals": {
            "before": {"accuracy": before, "format_rate": 0.0, "n": 10},
            "after": {"accuracy": after, "format_rate": 1.0, "n": 10},
        },
        "seconds": {"eval_before": 6.0, "grpo": steps * seconds_per_step, "total": total},
        "data_notes": [],
        "world_size": 1,
    }
    if stages is not None:
        summary["stages"] = stages
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return run
