"""Which operators a run's answers use: for countdown, how many right answers need a product or a quotient.

    python scripts/answer_operators.py RUN [--stage after]

Reads `RUN/eval_<stage>.json` (the greedy test-split evaluation every run writes) and prints, for its stored
samples (all answers, the right ones) and its stored wrong answers (`mistakes`), the share that use `*` (or
`×`), `/` (or `÷`), either, and neither (`+`/`-` only). The file keeps a sample of the problems and up to 100
wrong answers, not every completion: the header says how many.
A policy that only ever writes `(a + b) - c` shows as 100% "neither"; issue 56 asks for this figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PRODUCT, QUOTIENT = ("*", "×"), ("/", "÷")


def answer_of(completion: str, open_tag: str = "<answer>", close_tag: str = "</answer>") -> str | None:
    """The text of the last answer block, or None."""
    start = completion.rfind(open_tag)
    if start < 0:
        return None
    end = completion.find(close_tag, start)
    return completion[start + len(open_tag) : end if end >= 0 else None]


def count(samples: list[dict]) -> dict[str, dict[str, int]]:
    """For `all` answers and the `right` ones: how many, and how many use a product, a quotient, either."""
    table = {kind: {"answers": 0, "product": 0, "quotient": 0, "either": 0} for kind in ("all", "right")}
    for sample in samples:
        answer = answer_of(sample["completion"])
        if answer is None:
            continue
        product = any(op in answer for op in PRODUCT)
        quotient = any(op in answer for op in QUOTIENT)
        for kind in ("all", "right") if sample.get("correct") else ("all",):
            row = table[kind]
            row["answers"] += 1
            row["product"] += product
            row["quotient"] += quotient
            row["either"] += product or quotient
    return table


def render(table: dict[str, dict[str, int]], header: str) -> str:
    lines = [
        header,
        "| answers | n | with * | with / | with * or / | + and - only |",
        "|---|---|---|---|---|---|",
    ]
    for kind, row in table.items():
        total = row["answers"] or 1
        share = {k: f"{row[k]} ({row[k] / total:.0%})" for k in ("product", "quotient", "either")}
        plain = row["answers"] - row["either"]
        lines.append(
            f"| {kind} | {row['answers']} | {share['product']} | {share['quotient']} | {share['either']} | "
            f"{plain} ({plain / total:.0%}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--stage", default="after", help="eval_<stage>.json to read (default: after)")
    args = parser.parse_args(argv)
    path = args.run / f"eval_{args.stage}.json"
    if not path.is_file():
        print(f"{path} not found: give a run folder and a stage it evaluated (before, after, a stage name)")
        return 2
    evaluation = json.loads(path.read_text(encoding="utf-8"))
    samples, mistakes = evaluation["samples"], evaluation.get("mistakes", [])
    table = count(samples)
    table["wrong (stored)"] = count(mistakes)["all"]
    n = evaluation.get("n", len(samples))
    print(render(table, f"{n} problems: {len(samples)} samples and {len(mistakes)} wrong answers stored"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
