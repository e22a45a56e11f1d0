"""`make bench-skill`: held-out greedy accuracy against training time for a recipe (the default one unless
`--recipe` names another), and an SFT-only control given the same time.

Trains the recipe with a greedy eval every `--every` GRPO steps, or reads a finished run with
`--run RUN_DIR`. Then (unless `--no-control`) trains the control, or reads a finished one with
`--control-run DIR`: the same recipe with its GRPO stages replaced by one sft stage, `sft_more`, on fresh
demonstrations (the warm-up's batch size and learning rate), whose `max_minutes` is the GRPO stages' training
time and which is evaluated every `--every` of its steps. The control branches from the run's own warm-up:
its run directory starts with a copy of the run's finished stages before the first GRPO one (records,
metric rows, saved adapter) and resumes from there, so both methods continue from the same weights and
the warm-up is not trained twice. Prints each curve, the first time 80% / 90% / 95% is reached and which
method won after the same minutes past the warm-up; draws bench/out/time_to_skill[_RECIPE].png and writes
bench/out/time_to_skill[_RECIPE].json (no suffix for the default recipe).

Time is training time: the `train_seconds` of each stage's last logged row (the steps' own time summed,
grpokit.stages.callbacks.MetricsLog), laid end to end. Evaluations and checkpoint saves between steps are left
out, so two runs that evaluate at different rates compare (an SFT step is shorter than a GRPO step, so at
the same step cadence the control evaluates more often); so is the time between stages (the stage-end
evaluation, saving, building the next trainer). A stage's `max_minutes` budget counts the same way.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "smollm2" / "arithmetic_grpo.yaml"
OUT = Path(__file__).resolve().parent / "out"
BARS = (0.8, 0.9, 0.95)
CONTROL_STAGE = "sft_more"
# 400 batches of 16: the budget ends the stage long before they are all seen (a warm-up SFT step took
# about 30 s on the 2-core machine of bench/RESULTS.md), so no demonstration is trained on twice. The steps
# only bound the stage (and keep the warm-up's constant learning rate constant).
CONTROL_EXAMPLES = 6400
CONTROL_STEPS = 10_000
LABELS = {"grpo": "GRPO", "sft": "SFT only (same training time)"}

Point = tuple[float, str, float, int]  # (training minutes, label, accuracy, problems)


def curve(run_dir: Path) -> tuple[list[Point], list[tuple[float, str]]]:
    """[(training minutes, label, accuracy, n)] and the stage ends [(training minutes, stage)] of a run."""
    from grpokit.stages.callbacks import step_eval_name

    records = json.loads((run_dir / "stages.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    points, bounds, clock = [], [], 0.0
    for record in records:
        name = record["name"]
        if record["kind"] == "eval":
            points.append((clock, name, record["accuracy"], record["n"]))
            continue
        timed = [r for r in rows if r.get("stage") == name and "train_seconds" in r]
        offset, last = 0.0, 0.0
        for r in timed:
            if r["train_seconds"] < last:  # a resume restarted the stage's clock: add up the parts
                offset += last
            last = r["train_seconds"]
            if "eval/accuracy" in r:
                saved = run_dir / "evals" / step_eval_name(name, r["step"])
                n = json.loads(saved.read_text())["n"] if saved.is_file() else 0
                minutes = clock + (offset + last) / 60
                points.append((minutes, f"{name} step {r['step']}", r["eval/accuracy"], n))
        # Runs older than train_seconds: the stage's minutes as train.py measured them, evaluations included.
        clock += (offset + last) / 60 if timed else record["minutes"]
        points.append((clock, name, record["accuracy"], record["n"]))
        bounds.append((clock, name))
    return points, bounds


def warmup_end(run_dir: Path) -> tuple[str | None, float]:
    """The last stage before the first GRPO stage (None: there is none) and where it ended, in minutes."""
    records = json.loads((run_dir / "stages.json").read_text())
    first = next((i for i, r in enumerate(records) if r["kind"] == "grpo"), len(records))
    name = records[first - 1]["name"] if first > 1 else None
    return name, dict((stage, m) for m, stage in curve(run_dir)[1]).get(name, 0.0)


def grpo_minutes(run_dir: Path) -> float:
    """Training minutes of the run's GRPO stages (and whatever follows the first of them)."""
    _, start = warmup_end(run_dir)
    return curve(run_dir)[1][-1][0] - start


def control_recipe(raw: dict[str, Any], minutes: float, every: int) -> dict[str, Any]:
    """`raw` (a recipe as a dict) with its stages from the first GRPO one on replaced by `sft_more`: the
    warm-up's settings, fresh demonstrations, at most `minutes` of training, an eval every `every` steps."""
    raw = json.loads(json.dumps(raw))
    stages = raw.get("stages") or []
    first = next((i for i, stage in enumerate(stages) if stage.get("kind", "grpo") == "grpo"), None)
    if first is None:
        raise SystemExit("the control replaces the recipe's GRPO stages, and this recipe lists none in stages:")
    template = next((stage for stage in reversed(stages[:first]) if stage.get("kind") == "sft"), {})
    control = {
        **json.loads(json.dumps(template)),  # its own copies: YAML would write the shared ones as anchors
        "name": CONTROL_STAGE,
        "kind": "sft",
        "steps": CONTROL_STEPS,
        "examples": CONTROL_EXAMPLES,
        "eval_every": every,
        "max_minutes": round(minutes, 3),
    }
    raw["stages"] = [*stages[:first], control]
    output = raw.setdefault("output", {})
    output["name"] = f"{output.get('name') or 'run'}_sft_control"
    return raw


def branch(run_dir: Path, recipe: Any) -> Path | None:
    """A new run directory for the control `recipe` holding the finished stages of `run_dir` before its
    first GRPO stage (their records, metric rows, eval files and saved weights), for the pipeline to resume
    from: the control continues from the run's own warm-up. None when the run has no stage to share but
    the evaluation before training."""
    from grpokit.stages import pipeline as train

    records = json.loads((run_dir / "stages.json").read_text())
    first = next((i for i, r in enumerate(records) if r["kind"] == "grpo"), len(records))
    shared = records[:first]
    trained = {r["name"] for r in shared if r["kind"] != "eval"}
    if not trained:
        return None
    names = [r["name"] for r in shared if r["kind"] != "eval"]
    if names != [p.section.name for p in train.plan_run(recipe)][: len(names)]:
        raise SystemExit(f"{run_dir}: its stages {names} are not the control's first ones")
    target = train.make_run_dir(recipe)
    (target / "recipe.yaml").write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False), encoding="utf-8")
    train.save_records(target, shared)
    rows = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    kept = [line for line in rows if line.strip() and json.loads(line).get("stage") in trained]
    (target / "metrics.jsonl").write_text("".join(kept))
    for record in shared:
        name = record["name"]
        if (run_dir / f"eval_{name}.json").is_file():
            shutil.copy2(run_dir / f"eval_{name}.json", target / f"eval_{name}.json")
        for folder in ("adapter", "model"):  # a LoRA run saves the adapter, a full fine-tune the model
            if name in trained and (run_dir / name / folder).is_dir():
                shutil.copytree(run_dir / name / folder, target / name / folder)
    return target


def train_control(run_dir: Path, every: int, name: str) -> Path:
    """Train the control of the finished run `run_dir`, from its warm-up; its recipe is kept in bench/out."""
    from grpokit.recipe.load import load_recipe
    from grpokit.stages import pipeline as train

    raw = yaml.safe_load((run_dir / "recipe.yaml").read_text())
    minutes = grpo_minutes(run_dir)
    path = OUT / f"{name}_control.yaml"
    header = f"# SFT-only control of {run_dir}: its GRPO stages' {minutes:.2f} training minutes as an sft stage\n"
    path.write_text(header + yaml.safe_dump(control_recipe(raw, minutes, every), sort_keys=False))
    recipe = load_recipe(path)
    start = branch(run_dir, recipe)
    show_progress()
    print(f"control: {path}, {minutes:.1f} minutes of SFT" + (f", from the warm-up of {run_dir}" if start else ""))
    return train.main(recipe, resume=start)


def show_progress() -> None:
    """grpokit's progress lines for the training this script starts, as `grpokit train` prints them (not
    transformers' bars and metric dicts), unless a console is already set up."""
    from grpokit.stages import console

    if console.active() is None:
        console.setup()


def recipe_name(run_dir: Path) -> str:
    """The run's recipe as its `output.name` says (`smollm2/math_grpo`), the default recipe's when unnamed."""
    raw = yaml.safe_load((run_dir / "recipe.yaml").read_text()) or {}
    return str((raw.get("output") or {}).get("name") or f"smollm2/{RECIPE.stem}")


def out_name(run_dir: Path) -> str:
    """`time_to_skill` for a run of the default recipe, `time_to_skill_<recipe>` for another recipe's."""
    recipe = recipe_name(run_dir).rsplit("/", 1)[-1]
    return "time_to_skill" if recipe == RECIPE.stem else f"time_to_skill_{recipe}"


def compare(run_dir: Path, control_dir: Path) -> dict[str, Any]:
    """GRPO's accuracy at the end of its stages against the control's after the same training minutes."""
    warmup, start = warmup_end(run_dir)
    control_ends = {stage: m for m, stage in curve(control_dir)[1]}
    control_start = control_ends.get(warmup, 0.0) if warmup else 0.0  # its warm-up is the stage of that name
    grpo_points, sft_points = curve(run_dir)[0], curve(control_dir)[0]
    (_, _, grpo, n1), (_, _, sft, n2) = grpo_points[-1], sft_points[-1]
    noise = 2 * math.sqrt(grpo * (1 - grpo) / n1 + sft * (1 - sft) / n2)  # two standard errors of the difference
    difference = grpo - sft
    winner = "GRPO" if difference > noise else "SFT" if -difference > noise else None
    minutes = grpo_points[-1][0] - start
    n = str(n1) if n1 == n2 else f"{n1}/{n2}"
    verdict = (
        f"after the same {minutes:.1f} minutes past the warm-up: GRPO {100 * grpo:.1f}% vs SFT {100 * sft:.1f}% "
        f"(n={n}): "
        + (f"{winner} wins by {100 * abs(difference):.1f} points" if winner else "neither wins")
        + f" (two standard errors: {100 * noise:.1f} points)"
    )
    change = paired_finals(run_dir, control_dir)
    if change is not None:
        verdict += (
            f"; on the same {change['n']} problems GRPO alone was right on {change['broke']}, SFT alone on "
            f"{change['fixed']} (McNemar z {-change['z']:.2f})"
        )
    return {
        "run": str(run_dir),
        "control_run": str(control_dir),
        "paired": change,
        "warmup": warmup,
        "minutes_past_warmup": {"grpo": round(minutes, 2), "sft": round(sft_points[-1][0] - control_start, 2)},
        "accuracy": {"grpo": grpo, "sft": sft},
        "n": {"grpo": n1, "sft": n2},
        "difference": difference,
        "noise": noise,
        "winner": winner,
        "verdict": verdict,
        "curves": {"grpo": grpo_points, "sft": sft_points},
    }


def paired_finals(run_dir: Path, control_dir: Path) -> dict[str, Any] | None:
    """`grpokit.eval.evaluate.paired` from the run's final evaluation to the control's (`fixed`: problems
    only SFT got right, `broke`: only GRPO), or None when their files do not pair up."""
    from grpokit.eval.evaluate import paired

    def final(folder: Path) -> dict[str, Any]:
        name = json.loads((folder / "stages.json").read_text())[-1]["name"]
        path = folder / f"eval_{name}.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    return paired(final(run_dir), final(control_dir))


def print_curve(title: str, points: list[Point]) -> None:
    print(f"\n{title}\n{'when':<26} {'train min':>9} {'accuracy':>8}   n")
    for minutes, label, accuracy, n in points:
        print(f"{label:<26} {minutes:>9.1f} {100 * accuracy:>7.1f}%   {n}")


def problems(curves: dict[str, list[Point]]) -> str:
    """How many problems the points stand on: the stages' evaluations (the test split), and the step
    evaluations' (`eval.every_n` of the validation split).

    >>> problems({"grpo": [(0.0, "warmup", 0.6, 200), (2.0, "grpo step 15", 0.7, 50), (9.0, "grpo", 0.9, 200)]})
    '200 test problems; step evaluations: 50 validation problems'
    """

    def sizes(steps: bool) -> str:
        found = {n for points in curves.values() for _, name, _, n in points if (" step " in name) == steps}
        return "/".join(str(n) for n in sorted(found))

    stages, steps = sizes(False), sizes(True)
    return f"{stages} test problems" + (f"; step evaluations: {steps} validation problems" if steps else "")


def draw(curves: dict[str, list[Point]], warmup_at: float | None, path: Path, recipe: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    shown = set()  # stages both runs share (before, the warm-up) are labelled once
    ends = {key: points[-1][2] for key, points in curves.items()}
    for (key, points), marker in zip(curves.items(), ("o", "s"), strict=False):
        line = ax.plot([p[0] for p in points], [100 * p[2] for p in points], marker=marker, label=LABELS[key])
        higher = ends[key] >= max(ends.values())  # its end label goes above the other curve's end
        for i, (minutes, name, accuracy, _) in enumerate(points):
            if " step " in name or name in shown:
                continue
            shown.add(name)
            last = i == len(points) - 1  # the end, labelled right of its point
            ax.annotate(
                f"{name} {100 * accuracy:.1f}%",
                (minutes, 100 * accuracy),
                fontsize=8,
                color=line[0].get_color(),
                xytext=(6, 3 if higher else -10) if last else (-10, 8 if key == "grpo" else -14),
                textcoords="offset points",
                ha="left" if last else "right",
            )
    right = max(p[0] for points in curves.values() for p in points)
    ax.set_xlim(right=right * 1.22 + 0.5)  # room for the end labels
    if warmup_at is not None:
        ax.axvline(warmup_at, color="lightgrey", linewidth=1)
    for bar in BARS:
        ax.axhline(100 * bar, color="grey", linestyle="--", linewidth=0.8)
    ax.set(
        title=f"{recipe + ': ' if recipe else ''}greedy accuracy vs training time\n({problems(curves)})",
        xlabel="minutes of training (evaluations left out)",
        ylabel="%",
        ylim=(0, 102),
    )
    ax.title.set_fontsize(10)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default=str(RECIPE), help="the recipe to train (a path or a shipped name)")
    parser.add_argument("--run", type=Path, help="a finished run to read instead of training one")
    parser.add_argument("--every", type=int, default=10, help="eval every N steps (GRPO's, and the control's)")
    parser.add_argument("--control", action=argparse.BooleanOptionalAction, default=True, help="the SFT control")
    parser.add_argument("--control-run", type=Path, help="a finished control run to read instead of training it")
    parser.add_argument("overrides", nargs="*", help="recipe overrides for the run (key.sub=value)")
    args = parser.parse_args(argv)
    OUT.mkdir(exist_ok=True)

    run_dir = args.run
    if run_dir is None:
        from grpokit.recipe.load import load_recipe
        from grpokit.stages import pipeline as train

        overrides = [f"eval.every={args.every}", "eval.every_n=200", *args.overrides]
        show_progress()
        run_dir = train.main(load_recipe(args.recipe, overrides))
    points, _ = curve(run_dir)
    warmup, warmup_at = warmup_end(run_dir)
    print_curve(f"run: {run_dir}", points)
    for bar in BARS:
        first = next(((m, label) for m, label, a, _ in points if a >= bar), None)
        print(f"first >= {bar:.0%}: " + (f"{first[0]:.1f} min ({first[1]})" if first else "not reached"))
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("grpo_gain") is not None:
        print(f"GRPO added {100 * summary['grpo_gain']:+.1f} points over the evaluation before it")

    control_dir = args.control_run
    if control_dir is None and args.control:
        every = (yaml.safe_load((run_dir / "recipe.yaml").read_text()).get("eval") or {}).get("every", args.every)
        control_dir = train_control(run_dir, every, out_name(run_dir))
    comparison = compare(run_dir, control_dir) if control_dir is not None else None
    curves = {"grpo": points}
    if comparison is not None:
        curves["sft"] = comparison["curves"]["sft"]
        print_curve(f"control: {control_dir}", curves["sft"])
        print(f"\n{comparison['verdict']}")
    name = out_name(run_dir)
    draw(curves, warmup_at if warmup else None, OUT / f"{name}.png", recipe_name(run_dir))
    result = {"run": str(run_dir), "points": points, "comparison": comparison}
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"picture: {OUT / f'{name}.png'}, numbers: {OUT / f'{name}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
