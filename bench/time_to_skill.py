"""`make bench-skill`: wall time until the default recipe's held-out greedy accuracy first reaches 80% / 90%.

Trains recipes/smollm2/arithmetic_grpo.yaml with a greedy eval on the full 200 held-out problems every
`--every` GRPO steps (eval time is included in the wall clock, as a user would see it), then prints
the curve and the first time each bar is reached, and draws bench/out/time_to_skill.png.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "smollm2" / "arithmetic_grpo.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="GRPO steps")
    parser.add_argument("--every", type=int, default=5, help="eval every N steps")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    from grpokit import train
    from grpokit.config import load_recipe

    overrides = [f"grpo.max_steps={args.steps}", f"eval.every={args.every}", "eval.every_n=200", *args.overrides]
    recipe = load_recipe(RECIPE, overrides)
    start = time.time()
    run_dir = train.main(recipe)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = [(0.0, "before", json.loads((run_dir / "eval_before.json").read_text())["accuracy"])]
    cold = [r for r in rows if r["stage"] == "cold_start"]
    if cold:
        cold_eval = json.loads((run_dir / "eval_cold_start.json").read_text())
        curve.append((cold[-1]["time"] + cold_eval["seconds"] - start, "cold start", cold_eval["accuracy"]))
    curve += [(r["time"] - start, f"step {r['step']}", r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
    after = json.loads((run_dir / "eval_after.json").read_text())
    curve.append(((run_dir / "eval_after.json").stat().st_mtime - start, f"after {args.steps}", after["accuracy"]))

    print(f"\nrun: {run_dir}\n{'when':<12} {'wall min':>8} {'accuracy':>8}")
    for seconds, label, accuracy in curve:
        print(f"{label:<12} {seconds / 60:>8.1f} {100 * accuracy:>7.1f}%")
    for bar in (0.8, 0.9):
        first = next(((s, label) for s, label, a in curve if a >= bar), None)
        print(f"first >= {bar:.0%}: " + (f"{first[0] / 60:.1f} min ({first[1]})" if first else "not reached"))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot([s / 60 for s, _, _ in curve], [100 * a for _, _, a in curve], marker="o")
    for bar in (80, 90):
        ax.axhline(bar, color="grey", linestyle="--", linewidth=1)
    ax.set(title="Default recipe: held-out greedy accuracy vs wall time", xlabel="minutes", ylabel="%", ylim=(0, 100))
    ax.grid(alpha=0.3)
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / "time_to_skill.png", dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
