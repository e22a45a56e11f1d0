"""`grpokit report RUN`: one self-contained HTML page about a run, from its saved files only.

The page (`report.html` in the run directory) needs no network and no script: pictures are PNGs
embedded as data URIs, and model output is HTML-escaped (it is data). It shows the before/after
table, reward and per-reward curves, held-out accuracy and format over steps, completion lengths, the
run-health warnings, and the same held-out prompts' completions at each checkpoint with every reward's
score. `curves.png` (rewards and before/after) is written beside it for READMEs and quick looks.
The model is never rerun; rewards are rescored from the saved completions.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
from pathlib import Path
from typing import Any

import yaml

from grpokit.recipe.load import load_recipe
from grpokit.report import plots
from grpokit.rewards import make_reward
from grpokit.rewards.guarded import Guarded
from grpokit.runs import records as runs
from grpokit.sandbox.client import configure as configure_sandbox
from grpokit.tasks import task_of
from grpokit.tasks.parsing import normalize_completion

log = logging.getLogger(__name__)
SAMPLE_PROMPTS = 4  # prompts followed across checkpoints
MISTAKES_SHOWN = 12  # wrong answers of the last evaluation shown on the page (eval_*.json keeps more)


def load_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def stage_list(run_dir: Path, summary: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The run's stages in order, `before` first ({name, kind, ...}): summary.json's `stages`, or for
    runs older than stages (and unfinished ones) stages.json, else before / cold start / after."""
    summary = _read_json(run_dir / "summary.json") if summary is None else summary
    rows = (summary or {}).get("stages") or _read_json(run_dir / "stages.json")
    if rows:
        return rows
    rows = [{"name": "before", "kind": "eval"}]
    if (run_dir / "eval_cold_start.json").is_file():
        rows.append({"name": "cold_start", "kind": "sft"})
    return [*rows, {"name": "after", "kind": "grpo"}]


def _periodic(run_dir: Path, stage: str) -> list[tuple[int, dict[str, Any]]]:
    """A GRPO stage's evaluations every eval.every steps: (step, result)."""
    pattern = "step_*.json" if stage in ("grpo", "after") else f"{stage}-step_*.json"
    found = []
    for path in sorted((run_dir / "evals").glob(pattern)):
        found.append((int(path.stem.rsplit("step_", 1)[1]), _read_json(path)))
    return found


def timeline(run_dir: Path, metrics: list[dict[str, Any]] | None = None) -> list[tuple[float, str, dict[str, Any]]]:
    """(GRPO step, label, saved EvalResult) in training order: before, each stage's evaluations (every
    eval.every steps and at its end). GRPO steps count on across stages; an sft stage sits where it ran."""
    metrics = load_metrics(run_dir) if metrics is None else metrics
    found, offset = [], 0
    for stage in stage_list(run_dir):
        name = stage["name"]
        if stage["kind"] == "grpo":
            for step, result in _periodic(run_dir, name):
                found.append((offset + step, f"{name} step {step}", result))
            steps = [row["step"] for row in metrics if row.get("stage") == ("grpo" if name == "after" else name)]
            offset += max(steps, default=0)
        if (result := _read_json(run_dir / f"eval_{name}.json")) is not None:
            found.append((offset, name, result))
    return found


def stage_suites(stages: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each stage's evaluation-suite accuracies, by stage name (`after` too, as the last stage's)."""
    found = {row["name"]: {k: v["accuracy"] for k, v in row.get("suites", {}).items()} for row in stages}
    if stages:
        found["after"] = found[stages[-1]["name"]]
    return found


def partial_summary(run_dir: Path) -> dict[str, Any]:
    """What an unfinished run (interrupted, failed or still running) logged, in summary.json's shape and
    marked `partial` with its status: the stages that finished (stages.json) and nothing else."""
    if not (run_dir / "recipe.yaml").is_file():
        raise FileNotFoundError(f"{run_dir} has no recipe.yaml: it is not a grpokit run directory (see grpokit runs)")
    status = runs.read_status(run_dir)
    stages = _read_json(run_dir / "stages.json") or []
    return {"stages": stages, "partial": status, "seconds": {}, "data_notes": []}


def checkpoints(run_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """(label, saved EvalResult) in training order: before, each stage's evaluations, the last one last."""
    return [(label, result) for _, label, result in timeline(run_dir)]


def grpo_rows(metrics: list[dict[str, Any]], stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every GRPO stage's logged steps, `step` counted on across stages (the first stage's own steps)."""
    out, offset = [], 0
    for stage in stages:
        if stage["kind"] != "grpo":
            continue
        name = "grpo" if stage["name"] == "after" else stage["name"]
        rows = [row for row in metrics if row.get("stage") == name and "reward" in row]
        out += [{**row, "step": offset + row["step"]} for row in rows]
        offset += max((row["step"] for row in rows), default=0)
    return out


def main(run_dir: str | Path) -> Path:
    """Write report.html and curves.png into the run directory; return the page's path."""
    run_dir = Path(run_dir)
    summary = _read_json(run_dir / "summary.json")
    if summary is None:
        summary = partial_summary(run_dir)
    metrics = load_metrics(run_dir)
    stages = stage_list(run_dir, summary)
    grpo = grpo_rows(metrics, stages)
    sft_names = {stage["name"] for stage in stages if stage["kind"] == "sft"}
    cold = [row for row in metrics if row.get("stage") in sft_names]
    recipe = _read_json_yaml(run_dir / "recipe.yaml")
    limit = (recipe.get("grpo") or {}).get("max_completion_length")
    points = timeline(run_dir, metrics)
    evals = {label: result for _, label, result in points if " step " not in label}
    pictures = {
        "Rewards": plots.rewards(grpo),
        "Accuracy over training (validation during a stage, test at its end)": plots.eval_over_steps(points),
        "Before and after": plots.before_after(evals, stage_suites(stages)),
        "Completion length": plots.lengths(grpo, limit),
        "Warm-up (sft) loss": plots.cold_start_loss(cold),
    }
    _write_curves_png(run_dir, pictures)
    warnings = [json.loads(line) for line in _lines(run_dir / "warnings.jsonl")]
    scorers = _scorers(run_dir)
    samples = _samples(run_dir, recipe, scorers)
    problems = [s for s in (g.summary() for g in scorers) if s]
    problems += [f"eval {label}: {r['score_error']}" for label, r in evals.items() if r.get("score_errors")]
    page = _page(run_dir, recipe, summary, evals, pictures, warnings, samples, problems)
    out = run_dir / "report.html"
    out.write_text(page, encoding="utf-8")
    return out


def _write_curves_png(run_dir: Path, pictures: dict[str, bytes | None]) -> None:
    """The rewards and before/after pictures side by side, as one PNG (the README shows it)."""
    # slow import: matplotlib, only when a picture is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [p for p in (pictures["Rewards"], pictures["Before and after"]) if p]
    if not shown:
        return
    fig, axes = plt.subplots(1, len(shown), figsize=(6.5 * len(shown), 3.8))
    for ax, png in zip([axes] if len(shown) == 1 else axes, shown, strict=True):
        ax.imshow(plt.imread(io.BytesIO(png), format="png"))
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(run_dir / "curves.png", dpi=110)
    plt.close(fig)


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] if path.is_file() else []


def _read_json_yaml(path: Path) -> dict[str, Any]:
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}


def _samples(run_dir: Path, recipe: dict[str, Any], scorers: list[Guarded] | None = None) -> list[dict[str, Any]]:
    """The first held-out prompts, each with its completion and per-reward scores at every checkpoint.

    Rewards are called through `Guarded`, as in training: one that raises or hangs is counted, not waited on.
    """
    scorers = _scorers(run_dir) if scorers is None else scorers
    rows: dict[str, dict[str, Any]] = {}
    for label, result in checkpoints(run_dir):
        for sample in result.get("samples", []):
            question = sample["question"]
            if question not in rows and len(rows) >= SAMPLE_PROMPTS:
                continue
            row = rows.setdefault(question, {"question": question, "answer": sample.get("answer"), "at": []})
            scores = {"correct": float(sample.get("correct", 0)), "format": float(sample.get("format", 0))}
            for score in scorers:
                value = score(sample["completion"], sample)
                scores[score.name] = "error" if value is None else round(value, 3)
            row["at"].append({"label": label, "completion": sample["completion"], "scores": scores})
    return list(rows.values())


def _scorers(run_dir: Path) -> list[Guarded]:
    """The run's rewards, rebuilt from its recipe.yaml with their timeouts; none if they cannot be rebuilt."""
    try:
        recipe = load_recipe(run_dir / "recipe.yaml")
        configure_sandbox(recipe.sandbox)  # the run's sandbox: section, for the rescoring below
        task = task_of(recipe)
        prefilled = recipe.task.prefill_think  # saved completions start after the prompt's thought tag
        out = []
        for spec in recipe.rewards:
            reward = make_reward(spec.name, task, spec.params)
            out.append(
                Guarded(
                    spec.name,
                    lambda text, row, reward=reward: reward(normalize_completion(text, prefilled, task.tags), row),
                    spec.timeout or None,
                )
            )
        return out
    except Exception as err:  # the report still shows what was saved
        log.warning("report: per-reward scores left out (%s: %s)", type(err).__name__, err)
        return []


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}img{max-width:100%;border:1px solid #eee;margin:.3em 0}
pre{white-space:pre-wrap;background:#f8f8f8;padding:.5em;margin:.2em 0;font-size:.85em;max-height:14em;overflow:auto}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:.4em .8em;margin:.4em 0}
.ok{color:#1a7f37}.bad{color:#b42318}.muted{color:#777}
"""


def _page(
    run_dir: Path,
    recipe: dict[str, Any],
    summary: dict[str, Any],
    evals: dict[str, dict[str, Any]],
    pictures: dict[str, bytes | None],
    warnings: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    scoring_problems: list[str] | None = None,
) -> str:
    e = html.escape
    model = (recipe.get("model") or {}).get("name", "?")
    task = (recipe.get("task") or {}).get("name", "?")
    seconds = summary.get("seconds", {})
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>grpokit report: {e(run_dir.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>grpokit run {e(run_dir.parent.name)}/{e(run_dir.name)}</h1>",
        f"<p>model <b>{e(str(model))}</b>, task <b>{e(str(task))}</b>, "
        f"wall time {seconds.get('total', 0) / 60:.1f} min</p>",
        _partial_line(summary.get("partial")),
        "<h2>Before and after</h2>",
        _gain_line(summary),
        _results_table(evals, summary.get("stages")),
    ]
    for note in summary.get("data_notes", []):
        parts.append(f"<div class='warn'>data: {e(note)}</div>")
    parts.append("<h2>Run health</h2>")
    if warnings:
        parts += [f"<div class='warn'>step {w['step']}: {e(w['message'])}</div>" for w in warnings]
    else:
        parts.append("<p class='ok'>No warnings.</p>")
    for title, png in pictures.items():
        if png:
            data = base64.b64encode(png).decode("ascii")
            parts.append(f"<h2>{e(title)}</h2><img alt='{e(title)}' src='data:image/png;base64,{data}'>")
    parts.append("<h2>Sample completions, same prompts at each checkpoint</h2>")
    for problem in scoring_problems or []:  # a reward or verifier that raised or hung while scoring
        parts.append(f"<div class='warn'>scoring: {e(problem)}</div>")
    if not samples:
        parts.append("<p class='muted'>No saved samples.</p>")
    for sample in samples:
        parts.append(f"<h3>{e(sample['question'])}</h3><p>gold answer: <b>{e(str(sample['answer']))}</b></p>")
        for at in sample["at"]:
            scores = ", ".join(f"{e(k)} {e(str(v))}" for k, v in at["scores"].items())
            mark = "ok" if at["scores"].get("correct") else "bad"
            parts.append(f"<p class='{mark}'>{e(at['label'])}: {scores}</p><pre>{e(at['completion'])}</pre>")
    parts.append(_mistakes(evals))
    parts.append("</body></html>")
    return "\n".join(parts)


def _mistakes(evals: dict[str, dict[str, Any]]) -> str:
    """The last evaluation's wrong answers: what is left to learn, read without scoring anything again."""
    if not evals:
        return ""
    label, last = list(evals.items())[-1]
    wrong = last.get("mistakes")
    if wrong is None:  # saved before grpokit kept them
        return ""
    e = html.escape
    total = round((1 - last.get("accuracy", 0)) * last.get("n", 0))
    parts = [f"<h2>Wrong answers after {e(label)}</h2>"]
    if not wrong:
        parts.append("<p class='ok'>None: every held-out problem was answered right.</p>")
        return "\n".join(parts)
    parts.append(
        f"<p class='muted'>{min(len(wrong), MISTAKES_SHOWN)} of {total} wrong "
        f"(eval_{e(label)}.json keeps {len(wrong)}, up to the recipe's eval.mistakes).</p>"
    )
    for row in wrong[:MISTAKES_SHOWN]:
        parts.append(
            f"<p class='bad'>{e(str(row.get('question', '')))} gold answer: <b>{e(str(row.get('answer', '')))}</b>"
            f"{'' if row.get('format') else ' (not in format)'}</p><pre>{e(str(row.get('completion', '')))}</pre>"
        )
    return "\n".join(parts)


def _results_table(evals: dict[str, dict[str, Any]], stages: list[dict[str, Any]] | None = None) -> str:
    """One row per stage's evaluation; with the run's stage list, its kind, minutes, each GRPO stage's
    gain over the evaluation before it, and the problems each stage fixed and broke against that one."""
    if not evals:
        return "<p class='muted'>No evaluations saved.</p>"
    info = {row["name"]: row for row in stages or []}
    ks = sorted({k for r in evals.values() for k in r.get("pass_at_k", {})}, key=int)
    suites = list(dict.fromkeys(name for row in stages or [] for name in row.get("suites", {})))
    head = ["stage", "kind", "n", "test accuracy", "± s.e.", "gain", "fixed / broke (z)", "format", *suites]
    head += [*[f"pass@{k}" for k in ks], *[f"maj@{k}" for k in ks]]
    head += ["mean tokens", "truncated", "minutes"]
    rows = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for stage, r in evals.items():
        row = info.get(stage, {})
        gain = f"{100 * row['gain']:+.1f}" if row.get("gain") is not None else ""
        cells = [stage.replace("_", " "), row.get("kind", ""), str(r.get("n", "")), _pct(r.get("accuracy"))]
        change = f"{row['fixed']} / {row['broke']} ({row['z']:+.1f})" if "fixed" in row else ""
        cells += [_pct(row.get("stderr")), gain, change, _pct(r.get("format_rate"))]
        cells += [_pct(row.get("suites", {}).get(name, {}).get("accuracy")) for name in suites]
        cells += [_pct(r.get("pass_at_k", {}).get(k)) for k in ks] + [_pct(r.get("maj_at_k", {}).get(k)) for k in ks]
        cells += [f"{r.get('mean_completion_tokens', 0):.1f}", _pct(r.get("truncation_rate"))]
        cells.append(f"{row['minutes']:.1f}" if row.get("minutes") is not None and row.get("kind") != "eval" else "")
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return "\n".join([*rows, "</table>"])


def _partial_line(status: dict[str, Any] | None) -> str:
    """The banner of a report on an unfinished run: its status, its error, where it can resume."""
    if status is None:
        return ""
    e = html.escape
    state = str(status.get("status", "unknown"))
    parts = [
        f"<div class='warn'><b>Partial report:</b> the run is {e(state)}, not finished; this page shows what it logged."
    ]
    if status.get("error"):
        parts.append(f" {e(str(status['error']))}")
    if status.get("checkpoint"):
        parts.append(f" It can resume from {e(str(status['checkpoint']))} (grpokit train RECIPE --resume RUN_DIR).")
    return "".join(parts) + "</div>"


def _gain_line(summary: dict[str, Any]) -> str:
    gain = summary.get("grpo_gain")
    if gain is None:
        return ""
    return f"<p>GRPO added <b>{100 * gain:+.1f} points</b> of test-split accuracy over the evaluation before it.</p>"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"
