"""Do two sets of finished runs, one seed each, end at the same held-out accuracy?

    python bench/seeds.py RUN_A1 RUN_A2 ... --vs RUN_B1 RUN_B2 ... [--labels old new] [--out DIR]

A number in place of a run directory is a run's held-out accuracy in percent recorded elsewhere (a run
whose folder is gone), `SEED:PERCENT` with its seed: it counts in the figures and has no curve.

An RL run's final accuracy moves with its seed by several points (the default recipe: 89.0-99.0% over
sixteen runs, bench/RESULTS.md v0.33), so one run each cannot say whether a change cost accuracy, and the
same seed does not pair two code versions: their numbers part within a few steps and the runs then
sample different completions. This reads each run's last held-out evaluation and prints, per set, the
runs, their mean and spread; then the difference of the means (B - A) with a 95% bootstrap interval, the
exact permutation test's two-sided p-value (every way of splitting the runs into sets of these sizes),
and the smallest difference these runs would find four times in five (normal approximation, from the
sets' spreads). It draws each set's GRPO training correctness by step, mean and range over its runs,
into OUT/seeds.png and writes the figures to OUT/seeds.json. The same comparison runs on each run's
training correctness averaged over its GRPO steps (how fast it learned; thousands of sampled completions
each, so less noisy per run than one evaluation of the end). Nothing is trained.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import textwrap
from itertools import combinations
from pathlib import Path
from statistics import NormalDist, stdev
from statistics import fmean as mean
from typing import Any

OUT = Path(__file__).resolve().parent / "out"
CURVE_KEY = "rewards/correctness/mean"  # the correctness reward's mean over the step's completions
EXACT_SPLITS = 200_000  # more ways to split the runs than this: a fixed-seed sample of splits instead
Z_95, Z_80 = NormalDist().inv_cdf(0.975), NormalDist().inv_cdf(0.8)  # a two-sided 5% test; power 80%


def load(where: str) -> dict[str, Any]:
    """A finished run's seed, last held-out evaluation (accuracy, n) and GRPO correctness by step; for a
    recorded accuracy ([SEED:]PERCENT), that alone."""
    seed, _, number = where.rpartition(":")
    try:
        percent = float(number)
    except ValueError:
        return load_run(Path(where))
    if not 0 <= percent <= 100:
        raise SystemExit(f"{where}: a recorded accuracy is a percentage, 0-100 (or give the run's directory)")
    recorded = {"run": "recorded", "evaluation": "recorded", "accuracy": percent / 100, "n": None, "curve": {}}
    return {**recorded, "seed": int(seed) if seed.isdigit() else seed or None}


def load_run(run_dir: Path) -> dict[str, Any]:
    import yaml

    from grpokit.report.page import checkpoints, grpo_rows, load_metrics, stage_list

    if not (run_dir / "recipe.yaml").is_file():
        raise SystemExit(f"{run_dir} has no recipe.yaml: not a grpokit run directory (see grpokit runs)")
    evaluations = checkpoints(run_dir)
    if len(evaluations) < 2:  # `before` alone: the run stopped before any stage's evaluation
        raise SystemExit(f"{run_dir} has no evaluation after training: is it finished? (grpokit runs)")
    label, last = evaluations[-1]
    recipe = yaml.safe_load((run_dir / "recipe.yaml").read_text(encoding="utf-8")) or {}
    rows = grpo_rows(load_metrics(run_dir), stage_list(run_dir))
    return {
        "run": str(run_dir),
        "seed": recipe.get("seed"),
        "evaluation": label,
        "accuracy": float(last["accuracy"]),
        "n": int(last["n"]),
        "curve": {int(row["step"]): float(row[CURVE_KEY]) for row in rows if CURVE_KEY in row},
    }


def permutation_p(a: list[float], b: list[float]) -> float:
    """Two-sided p-value of mean(b) - mean(a) under 'the set a run belongs to does not matter': the share
    of splits of the pooled runs into sets of these sizes whose difference is at least as large. Exact
    (every split) up to EXACT_SPLITS splits, else 20,000 random splits (fixed seed)."""
    pooled, k = a + b, len(a)
    observed = abs(mean(b) - mean(a)) - 1e-12  # ties count as at least as large
    total = sum(pooled)

    def extreme(chosen: tuple[int, ...]) -> bool:
        in_a = sum(pooled[i] for i in chosen)
        return abs((total - in_a) / len(b) - in_a / k) >= observed

    count = math.comb(len(pooled), k)
    if count <= EXACT_SPLITS:
        splits = combinations(range(len(pooled)), k)
    else:
        rng, count = random.Random(0), 20_000
        splits = (tuple(rng.sample(range(len(pooled)), k)) for _ in range(count))
    return sum(map(extreme, splits)) / count


def bootstrap_interval(a: list[float], b: list[float], draws: int = 20_000, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of mean(b) - mean(a), each set resampled with replacement (fixed seed)."""
    rng = random.Random(0)
    diffs = sorted(mean(rng.choices(b, k=len(b))) - mean(rng.choices(a, k=len(a))) for _ in range(draws))
    tail = (1 - level) / 2
    return diffs[int(tail * draws)], diffs[min(draws - 1, int((1 - tail) * draws))]


def detectable(a: list[float], b: list[float]) -> float:
    """The difference of means a two-sided 5% test finds 80% of the time with these set sizes and spreads."""
    return (Z_95 + Z_80) * math.sqrt(stdev(a) ** 2 / len(a) + stdev(b) ** 2 / len(b))


def compare(a: list[float], b: list[float]) -> dict[str, float]:
    low, high = bootstrap_interval(a, b)
    return {
        "mean_a": mean(a),
        "mean_b": mean(b),
        "sd_a": stdev(a),
        "sd_b": stdev(b),
        "difference": mean(b) - mean(a),
        "interval_95": [low, high],
        "permutation_p": permutation_p(a, b),
        "detectable_80": detectable(a, b),
    }


def mean_curve(curves: list[dict[int, float]]) -> list[tuple[int, float, float, float]]:
    """(step, mean, min, max) over the runs that logged the step."""
    steps = sorted(set().union(*curves)) if curves else []
    out = []
    for step in steps:
        values = [c[step] for c in curves if step in c]
        out.append((step, mean(values), min(values), max(values)))
    return out


def draw(sets: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1]})
    for label, runs in sets.items():
        rows = mean_curve([r["curve"] for r in runs])
        if rows:
            steps, means, lows, highs = zip(*rows, strict=True)
            drawn = sum(1 for r in runs if r["curve"])
            line = left.plot(steps, means, label=f"{label} (mean of {drawn} runs)")[0]
            left.fill_between(steps, lows, highs, color=line.get_color(), alpha=0.15)
    left.set_xlabel("GRPO step")
    left.set_ylabel("training correctness (sampled)")
    left.set_title("correctness reward by step: mean, range over runs")
    if left.lines:
        left.legend()
    else:
        left.text(0.5, 0.5, "no run here logged its steps", ha="center", transform=left.transAxes)
    for x, runs in enumerate(sets.values()):
        values = [100 * r["accuracy"] for r in runs]
        right.scatter([x] * len(values), values, alpha=0.7, color=f"C{x}")
        right.hlines(mean(values), x - 0.25, x + 0.25, color=f"C{x}")
    right.set_xticks(range(len(sets)), [textwrap.fill(label, 14) for label in sets])
    right.set_xlim(-0.6, len(sets) - 0.4)
    right.set_ylabel("held-out accuracy, %")
    right.set_title("final accuracy per run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(sets: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    (name_a, runs_a), (name_b, runs_b) = sets.items()
    for name, runs in sets.items():
        print(f"{name}:")
        for r in runs:
            n, during = r["n"] or "-", training_correctness(r)
            during = "" if during is None else f"  training correctness {during:5.1f}%"
            print(f"  seed {r['seed']!s:>5}  {100 * r['accuracy']:5.1f}%  of {n:>4}{during}  {r['run']}")
    result: dict[str, Any] = {"sets": sets}
    print("held-out accuracy after training (greedy):")
    result["accuracy"] = verdict(
        name_a, name_b, [100 * r["accuracy"] for r in runs_a], [100 * r["accuracy"] for r in runs_b]
    )
    a, b = ([c for r in runs if (c := training_correctness(r)) is not None] for runs in (runs_a, runs_b))
    result["training_correctness"] = None
    if len(a) >= 2 and len(b) >= 2:  # how fast each run learned: its sampled correctness over all its steps
        print("training correctness, mean over the GRPO steps (sampled completions):")
        result["training_correctness"] = verdict(name_a, name_b, a, b)
    return result


def training_correctness(run: dict[str, Any]) -> float | None:
    """The mean over a run's GRPO steps of its correctness reward, percent (None without a curve)."""
    return 100 * mean(list(run["curve"].values())) if run["curve"] else None


def verdict(name_a: str, name_b: str, a: list[float], b: list[float]) -> dict[str, Any]:
    figures = compare(a, b)
    low, high = figures["interval_95"]
    print(f"  {name_a}: mean {figures['mean_a']:.1f}%  sd {figures['sd_a']:.1f}  ({len(a)} runs)")
    print(f"  {name_b}: mean {figures['mean_b']:.1f}%  sd {figures['sd_b']:.1f}  ({len(b)} runs)")
    print(
        f"  {name_b} - {name_a}: {figures['difference']:+.1f} points, 95% interval [{low:+.1f}, {high:+.1f}], "
        f"permutation p = {figures['permutation_p']:.3f}; these runs find a difference of "
        f"{figures['detectable_80']:.1f} points four times in five"
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", nargs="+", help="the first set's run directories (or recorded accuracies, %%)")
    parser.add_argument("--vs", nargs="+", required=True, help="the second set's run directories (or accuracies)")
    parser.add_argument("--labels", nargs=2, default=("A", "B"), help="names of the two sets")
    parser.add_argument("--out", type=Path, default=OUT, help="folder for seeds.json and seeds.png")
    args = parser.parse_args(argv)
    if len(args.a) < 2 or len(args.vs) < 2:
        parser.error("each set needs two runs or more (one per seed): one run says nothing about its spread")
    sets = {args.labels[0]: [load(p) for p in args.a], args.labels[1]: [load(p) for p in args.vs]}
    result = report(sets)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "seeds.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    draw(sets, args.out / "seeds.png")
    print(f"wrote {args.out / 'seeds.json'} and {args.out / 'seeds.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
