"""`grpokit report RUN_A RUN_B ...`: one self-contained page laying runs side by side, from saved files only.

The page shows each run's status and headline, the recipe keys that differ, a stage table (accuracy,
format, n, minutes per stage: summary.json's `stages` list when it has one, else its before /
cold start / after evaluations), reward and held-out accuracy curves on shared axes by GRPO step and
by wall time, and the same held-out prompts' final completions next to each other. Like the run
report it needs no network and no script, and model output is escaped.
"""

from __future__ import annotations

import base64
import html
import json
import os
import time
from pathlib import Path
from typing import Any

from grpokit.report import plots
from grpokit.report.page import _CSS, _read_json, _read_json_yaml, checkpoints, load_metrics
from grpokit.runs import records as runs

SAMPLE_PROMPTS = 4
_SECONDS_OF = {"before": "eval_before", "cold_start": "cold_start", "after": "grpo"}


def main(run_dirs: list[str | Path], out: str | Path | None = None) -> Path:
    """Write the comparison page (default: compare-<time>.html beside the runs); return its path."""
    paths = [Path(r) for r in run_dirs]
    for path in paths:
        if not (path / "recipe.yaml").is_file():
            raise FileNotFoundError(f"{path} has no recipe.yaml: it is not a grpokit run directory (see grpokit runs)")
    if out is None:
        common = Path(os.path.commonpath([p.absolute() for p in paths]))
        out = common / f"compare-{time.strftime('%Y%m%d-%H%M%S')}.html"
    loaded = [load_run(path, _label(i)) for i, path in enumerate(paths)]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)  # --out may name a folder that does not exist yet
    out.write_text(_page(loaded), encoding="utf-8")
    return out


def _label(index: int) -> str:
    return chr(ord("A") + index) if index < 26 else f"R{index}"


def load_run(path: Path, label: str) -> dict[str, Any]:
    summary = _read_json(path / "summary.json") or {}
    metrics = load_metrics(path)
    status = runs.read_status(path)
    return {
        "label": label,
        "path": path,
        "name": f"{path.parent.name}/{path.name}",
        "recipe": _read_json_yaml(path / "recipe.yaml"),
        "summary": summary,
        "metrics": metrics,
        "status": status,
        "stages": stage_rows(summary),
        "start": _start_time(status, summary, metrics),
        "final": final_eval(path, summary),
    }


def stage_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """[{name, kind, accuracy, format_rate, n, minutes}]: the multi-stage `stages` list, or the older evals."""
    if summary.get("stages"):
        return [dict(s) for s in summary["stages"]]
    seconds = summary.get("seconds") or {}
    rows = []
    for name, result in (summary.get("evals") or {}).items():
        spent = seconds.get(_SECONDS_OF.get(name, name))
        rows.append(
            {
                "name": name,
                "kind": {"before": "eval", "cold_start": "sft", "after": "grpo"}.get(name, ""),
                "accuracy": result.get("accuracy"),
                "format_rate": result.get("format_rate"),
                "n": result.get("n"),
                "minutes": None if spent is None else spent / 60,
            }
        )
    return rows


def final_eval(path: Path, summary: dict[str, Any]) -> dict[str, Any] | None:
    """The last saved held-out evaluation: the last stage's file, eval_after.json, or the latest checkpoint."""
    names = [s.get("name") for s in summary.get("stages") or []]
    for name in [*reversed(names), "after"]:
        found = _read_json(path / f"eval_{name}.json") if name else None
        if found is not None:
            return found
    saved = checkpoints(path)
    return saved[-1][1] if saved else None


def _start_time(status: dict[str, Any], summary: dict[str, Any], metrics: list[dict]) -> float | None:
    """When the run started: its status file says; older runs: the first metric minus the stages before it."""
    if status.get("started"):
        return float(status["started"])
    times = [row["time"] for row in metrics if "time" in row]
    if not times:
        return None
    seconds = summary.get("seconds") or {}
    first_stage = metrics[0].get("stage")
    before = seconds.get("eval_before", 0) + (seconds.get("cold_start", 0) if first_stage == "grpo" else 0)
    return min(times) - before


def reward_series(run: dict[str, Any]) -> tuple[list[float], list[float], list[float]]:
    """(steps, minutes since the start, reward) over every GRPO stage, steps counted on across stages."""
    steps, minutes, rewards = [], [], []
    offset, last_stage, last_step = 0, None, 0
    for row in run["metrics"]:
        if "reward" not in row:
            continue
        if last_stage is not None and row.get("stage") != last_stage:
            offset = last_step
        last_stage, last_step = row.get("stage"), offset + row["step"]
        steps.append(last_step)
        minutes.append(_minutes(run, row))
        rewards.append(row["reward"])
    return steps, minutes, rewards


def heldout_series(run: dict[str, Any]) -> tuple[tuple[list, list], tuple[list, list]]:
    """Held-out accuracy ((steps, acc), (minutes, acc)): before, every in-training eval, and each stage's end."""
    steps, _, _ = reward_series(run)
    by_step: tuple[list, list] = ([], [])
    by_time: tuple[list, list] = ([], [])
    stages = run["stages"]
    if stages and stages[0].get("accuracy") is not None:
        by_step[0].append(0)
        by_step[1].append(stages[0]["accuracy"])
    for row in run["metrics"]:
        if "eval/accuracy" in row:
            by_step[0].append(row["step"])
            by_step[1].append(row["eval/accuracy"])
    if len(stages) > 1 and stages[-1].get("accuracy") is not None:
        by_step[0].append(max(steps, default=0))
        by_step[1].append(stages[-1]["accuracy"])
    clock = 0.0
    for stage in stages:  # each stage's evaluation at the stage's end on the clock
        clock += stage.get("minutes") or 0.0
        if stage.get("accuracy") is not None:
            by_time[0].append(clock)
            by_time[1].append(stage["accuracy"])
    for row in run["metrics"]:
        if "eval/accuracy" in row and _minutes(run, row) is not None:
            by_time[0].append(_minutes(run, row))
            by_time[1].append(row["eval/accuracy"])
    order = sorted(range(len(by_time[0])), key=lambda i: by_time[0][i])
    return by_step, ([by_time[0][i] for i in order], [by_time[1][i] for i in order])


def _minutes(run: dict[str, Any], row: dict[str, Any]) -> float | None:
    if run["start"] is None or "time" not in row:
        return None
    return (row["time"] - run["start"]) / 60


def recipe_differences(recipes: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Dotted keys whose values differ between the recipes, with each recipe's value ('' where absent)."""
    flat = [_flatten(r) for r in recipes]
    keys = sorted(set().union(*flat)) if flat else []
    return [
        (key, [json.dumps(f[key]) if key in f else "" for f in flat])
        for key in keys
        if key != "output.dir" and len({json.dumps(f.get(key), sort_keys=True) for f in flat}) > 1
    ]


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): node}


def _page(loaded: list[dict[str, Any]]) -> str:
    e = html.escape
    title = " vs ".join(run["name"] for run in loaded)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>grpokit comparison: {e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>grpokit: {len(loaded)} runs side by side</h1>",
        "<table><tr><th>run</th><th class='l'>folder</th><th>status</th><th class='l'>model</th>"
        "<th class='l'>result</th></tr>",
    ]
    for run in loaded:
        model = (run["recipe"].get("model") or {}).get("name", "?")
        parts.append(
            f"<tr><td>{e(run['label'])}</td><td class='l'>{e(str(run['path']))}</td>"
            f"<td>{e(run['status'].get('status', '?'))}</td><td class='l'>{e(str(model))}</td>"
            f"<td class='l'>{e(runs.headline(run['path']))}</td></tr>"
        )
    parts += ["</table>", "<h2>Recipe differences</h2>", _differences_table(loaded), "<h2>Stages</h2>"]
    parts.append(_stage_table(loaded))
    for title_, png in _pictures(loaded).items():
        if png:
            data = base64.b64encode(png).decode("ascii")
            parts.append(f"<h2>{e(title_)}</h2><img alt='{e(title_)}' src='data:image/png;base64,{data}'>")
    parts.append("<h2>Same prompts, final completions</h2>")
    parts.append(_samples(loaded))
    parts.append("</body></html>")
    return "\n".join(parts)


def _differences_table(loaded: list[dict[str, Any]]) -> str:
    diffs = recipe_differences([run["recipe"] for run in loaded])
    if not diffs:
        return "<p class='muted'>The recipes are the same (output.dir aside).</p>"
    head = "".join(f"<th class='l'>{run['label']}</th>" for run in loaded)
    rows = [f"<table><tr><th class='l'>key</th>{head}</tr>"]
    for key, values in diffs:
        cells = "".join(f"<td class='l'>{html.escape(v)}</td>" for v in values)
        rows.append(f"<tr><td class='l'>{html.escape(key)}</td>{cells}</tr>")
    return "\n".join([*rows, "</table>"])


def _stage_table(loaded: list[dict[str, Any]]) -> str:
    names: list[str] = []
    for run in loaded:
        names += [s["name"] for s in run["stages"] if s["name"] not in names]
    if not names:
        return "<p class='muted'>No stage results saved.</p>"
    head = "".join(f"<th colspan='4'>{run['label']}</th>" for run in loaded)
    sub = "<th>accuracy</th><th>format</th><th>n</th><th>min</th>" * len(loaded)
    rows = [f"<table><tr><th class='l' rowspan='2'>stage</th>{head}</tr><tr>{sub}</tr>"]
    for name in names:
        cells = []
        for run in loaded:
            stage = next((s for s in run["stages"] if s["name"] == name), None) or {}
            minutes = stage.get("minutes")
            cells += [
                _pct(stage.get("accuracy")),
                _pct(stage.get("format_rate")),
                str(stage.get("n", "")),
                "" if minutes is None else f"{minutes:.1f}",
            ]
        label = name.replace("_", " ") + (f" ({stage_kind})" if (stage_kind := _kind(loaded, name)) else "")
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        rows.append(f"<tr><td class='l'>{html.escape(label)}</td>{tds}</tr>")
    return "\n".join([*rows, "</table>"])


def _kind(loaded: list[dict[str, Any]], name: str) -> str:
    kinds = {s.get("kind") for run in loaded for s in run["stages"] if s["name"] == name and s.get("kind")}
    return "/".join(sorted(kinds))


def _pictures(loaded: list[dict[str, Any]]) -> dict[str, bytes | None]:
    rewards = [(run, reward_series(run)) for run in loaded]
    heldout = [(run, heldout_series(run)) for run in loaded]
    names = {run["label"]: f"{run['label']}: {run['name']}" for run in loaded}
    by_time = [(names[r["label"]], s[1], s[2]) for r, s in rewards if None not in s[1]]  # runs with a clock
    return {
        "Reward by GRPO step": plots.compare(
            [(names[r["label"]], s[0], s[2]) for r, s in rewards], "Reward per GRPO step", "GRPO step", "reward"
        ),
        "Reward by wall time": plots.compare(by_time, "Reward over wall time", "minutes since the start", "reward"),
        "Held-out accuracy by step": plots.compare(
            [(names[r["label"]], *h[0]) for r, h in heldout],
            "Held-out accuracy (greedy)",
            "GRPO step",
            "%",
            percent=True,
        ),
        "Held-out accuracy by wall time": plots.compare(
            [(names[r["label"]], *h[1]) for r, h in heldout],
            "Held-out accuracy (greedy) over wall time",
            "minutes since the start",
            "%",
            percent=True,
        ),
    }


def _samples(loaded: list[dict[str, Any]]) -> str:
    e = html.escape
    by_run = [{s["question"]: s for s in (run["final"] or {}).get("samples", [])} for run in loaded]
    questions: list[str] = []
    for samples in by_run:
        questions += [q for q in samples if q not in questions]
    shared = [q for q in questions if all(q in samples for samples in by_run)][:SAMPLE_PROMPTS]
    if not shared:
        return "<p class='muted'>The runs saved no completions for the same prompts.</p>"
    parts = []
    for question in shared:
        parts.append(f"<h3>{e(question)}</h3><p>gold answer: <b>{e(str(by_run[0][question].get('answer')))}</b></p>")
        for run, samples in zip(loaded, by_run, strict=True):
            sample = samples[question]
            mark = "ok" if sample.get("correct") else "bad"
            verdict = "correct" if sample.get("correct") else "wrong"
            parts.append(
                f"<p class='{mark}'>{e(run['label'])} ({e(run['name'])}): {verdict}</p>"
                f"<pre>{e(str(sample.get('completion', '')))}</pre>"
            )
    return "\n".join(parts)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"
