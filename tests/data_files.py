"""Small data files in the public schemas (NuminaMath-TIR, GSM8K), written by the tests themselves."""

from __future__ import annotations

import json
from pathlib import Path

NUMINA = [
    {"problem": f"What is ${i}/{i + 1}$ of ${i + 1}$?", "solution": f"Multiply: $\\boxed{{{i}}}$.", "messages": []}
    for i in range(1, 40)
] + [
    {"problem": "Simplify $\\frac{2}{4}$.", "solution": "Divide both by 2: $\\boxed{\\frac{1}{2}}$.", "messages": []},
    {"problem": "Solve $x + 1 = 3$.", "solution": "So $\\boxed{x = 2}$.", "messages": []},
    {"problem": "No boxed answer here.", "solution": "The answer is two.", "messages": []},
    {"problem": "Unreadable gold.", "solution": "$\\boxed{\\text{}}$", "messages": []},
]

GSM8K = [
    {
        "question": f"Ann has {i} apples and buys {i * 10}. How many now?",
        "answer": f"{i}+{i * 10}=<<{i}+{i * 10}={i * 11}>>{i * 11}\n#### {i * 11:,}",
    }
    for i in range(1, 40)
] + [{"question": "A row without the marker.", "answer": "It is 5."}]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_hub_folder(root: Path, rows: list[dict], eval_rows: int = 8) -> Path:
    """A folder laid out like a hub dataset repo (data/train.jsonl, data/test.jsonl)."""
    (root / "data").mkdir(parents=True)
    write_jsonl(root / "data" / "train.jsonl", rows[eval_rows:])
    write_jsonl(root / "data" / "test.jsonl", rows[:eval_rows])
    return root


def build_test_task(name: str, folder: Path, tags=None):
    """Every registered task, built offline with small parameters (files written into `folder`)."""
    from grpokit.tasks import build_task
    from grpokit.tasks.parsing import THINK_TAGS

    params = {
        "arithmetic": {},
        "countdown": {},
        "math": {
            "source": str(write_jsonl(folder / "numina.jsonl", NUMINA)),
            "validation_fraction": 0.1,
            "test_fraction": 0.3,
        },
        "custom": {
            "path": str(
                write_jsonl(
                    folder / "qa.jsonl", [{"question": f"Half of {2 * i}?", "answer": str(i)} for i in range(60)]
                )
            ),
            "checker": "numeric",
        },
        "reasoning_gym": {"dataset": "countdown", "config": {"min_numbers": 3, "max_numbers": 4}},
    }
    if name not in params:
        raise AssertionError(f"task {name!r} has no test parameters in tests/data_files.py; add them")
    return build_task(name, params[name], tags or THINK_TAGS)
