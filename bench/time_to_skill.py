"""`make bench-skill`: held-out greedy accuracy against wall time for the default recipe, stage by stage.

Trains recipes/smollm2/arithmetic_grpo.yaml with a greedy eval on the full 200 held-out problems every
`--every` GRPO steps (eval time is in the wall clock, as a user sees it), or reads a finished run with
`--run RUN_DIR`; prints the curve, the first time 80% / 90% / 95% is reached and what the GRPO stages
added, and draws bench/out/time_to_skill.png. Times are each stage's own (train + eval) minutes from
stages.json laid end to end, so a run that was stopped and resumed is not charged for the pause.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "smollm2" / "arithmetic_grpo.yaml"
BARS = (0.8, 0.9, 0.95)


def curve(run_dir: Path) -> tuple[list[tuple[float, str, float]], list[tuple[float, str]]]:
    """[(minutes, label, accuracy)] and the stage boundaries [(minutes, stage)] of a finished run."""
    records = json.loads((run_dir / "stages.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    from grpokit.callbacks import step_eval_name

    points, bounds, clock = [], [], 0.0
    for record in records:
        name = record["name"]
        stage_rows = [r for r in rows if r.get("stage") == name]
        if record["kind"] == "grpo" and stage_rows:
            first = stage_rows[0]
            begun = first["time"] - first.get("step_time", 0.0)
            for r in stage_rows:
                if "eval/accuracy" in r:
                    saved = run_dir / "evals" / step_eval_name(name, r["step"])
                    n = json.loads(saved.read_text())["n"] if saved.is_file() else "?"
                    label = f"{name} step {r['step']} (n={n})"
                    points.append((clock + (r["time"] - begun) / 60, label, r["eval/accuracy"]))
        clock += record["minutes"] + record.get("eval_minutes", 0.0)
        points.append((clock, name, record["accuracy"]))
        bounds.append((clock, name))
    return points, bounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a finished run directory to read instead of training")
    parser.add_argument("--every", type=int, default=10, help="eval every N GRPO steps")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    run_dir = args.run
    if run_dir is None:
        from grpokit import train
        from grpokit.config import load_recipe

        overrides = [f"eval.every={args.every}", "eval.every_n=200", *args.overrides]
        run_dir = train.main(load_recipe(RECIPE, overrides))
    points, bounds = curve(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())

    print(f"\nrun: {run_dir}\n{'when':<24} {'wall min':>8} {'accuracy':>8}")
    for minutes, label, accuracy in points:
        print(f"{label:<24} {minutes:>8.1f} {100 * accuracy:>7.1f}%")
    for bar in BARS:
        first = next(((m, label) for m, label, a in points if a >= bar), None)
        print(f"first >= {bar:.0%}: " + (f"{first[0]:.1f} min ({first[1]})" if first else "not reached"))
    if summary.get("grpo_gain") is not None:
        print(f"GRPO added {100 * summary['grpo_gain']:+.1f} points over the evaluation before it")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    ax.plot([m for m, _, _ in points], [100 * a for _, _, a in points], marker="o")
    for minutes, name, accuracy in points:
        if " step " not in name:
            ax.annotate(
                f"{name} {100 * accuracy:.1f}%",
                (minutes, 100 * accuracy),
                fontsize=8,
                xytext=(-10, 8),
                textcoords="offset points",
                ha="right",
            )
    for minutes, _ in bounds[:-1]:
        ax.axvline(minutes, color="lightgrey", linewidth=1)
    for bar in BARS:
        ax.axhline(100 * bar, color="grey", linestyle="--", linewidth=0.8)
    ax.set(
        title="Default recipe: held-out greedy accuracy (200 problems) vs wall time",
        xlabel="minutes",
        ylabel="%",
        ylim=(0, 102),
    )
    ax.grid(alpha=0.3)
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / "time_to_skill.png", dpi=110)
    print(f"picture: {out / 'time_to_skill.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
