"""Two runs' logged metrics compared step for step: does a refactor keep a seeded run's losses?

    python bench/compare_losses.py RUN_A RUN_B [KEY ...]    (keys default: loss grad_norm reward entropy)

Prints one line per (stage, step) both runs logged, EQUAL or the keys that differ, and a count. Values are
compared exactly: a behaviour-preserving change reproduces them to the last bit on the same machine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT_KEYS = ["loss", "grad_norm", "reward", "entropy"]


def logged_steps(run_dir: Path) -> dict[tuple[str, int], dict]:
    """The run's training rows (those with a loss) by (stage, step)."""
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return {(row["stage"], row["step"]): row for row in map(json.loads, lines) if "loss" in row}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    a, b = logged_steps(Path(argv[0])), logged_steps(Path(argv[1]))
    keys = argv[2:] or DEFAULT_KEYS
    stage_order = {stage: i for i, (stage, _) in enumerate(sorted(a, key=lambda k: a[k].get("time", 0)))}
    common = sorted(set(a) & set(b), key=lambda k: (stage_order.get(k[0], 0), k[1]))
    equal = 0
    for key in common:
        diffs = {k: (a[key].get(k), b[key].get(k)) for k in keys if a[key].get(k) != b[key].get(k)}
        equal += not diffs
        print(f"{key[0]:>10} {key[1]:>4}  loss {a[key]['loss']!r:>24} {b[key]['loss']!r:>24}  {diffs or 'EQUAL'}")
    only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
    print(f"{equal}/{len(common)} steps equal in {keys}; only in A: {only_a}, only in B: {only_b}")
    return 0 if equal == len(common) and common else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
