"""The report's pictures, drawn with matplotlib from a run's saved metrics (PNG bytes, no display).

Each function takes plain lists and dicts (what `grpokit.report.page` read from the run directory) and
returns PNG bytes, or None when the run has nothing to draw for that picture.
"""

from __future__ import annotations

import io
from typing import Any

Row = dict[str, Any]


def _figure(width: float = 7.5, height: float = 3.6):
    # slow import: matplotlib, only when a picture is drawn
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    ax.grid(alpha=0.3)
    return plt, fig, ax


def _png(plt: Any, fig: Any) -> bytes:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def rewards(grpo: list[Row]) -> bytes | None:
    """Total and per-reward mean reward per GRPO step (sampled completions)."""
    if not grpo:
        return None
    plt, fig, ax = _figure()
    keys = sorted({k for row in grpo for k in row if k.startswith("rewards/") and k.endswith("/mean")})
    steps = [row["step"] for row in grpo]
    for key in [*keys, "reward"]:
        label = "reward (weighted sum)" if key == "reward" else key.removeprefix("rewards/").removesuffix("/mean")
        ax.plot(steps, [row.get(key) for row in grpo], marker=".", label=label, linewidth=2 if key == "reward" else 1)
    ax.set(title="Rewards per GRPO step (mean over sampled completions)", xlabel="step", ylabel="reward")
    ax.legend(fontsize=8)
    return _png(plt, fig)


def eval_over_steps(points: list[tuple[float, str, dict[str, float]]]) -> bytes | None:
    """Greedy accuracy and format rate: on the test split before and after each stage, on the validation
    split every eval.every GRPO steps."""
    if not points:
        return None
    plt, fig, ax = _figure()
    xs = [x for x, _, _ in points]
    for key, label in (("accuracy", "accuracy"), ("format_rate", "format rate")):
        ax.plot(xs, [100 * m[key] for _, _, m in points], marker="o", label=label)
    for x, name, m in points:
        if " step " not in name:  # a stage's own evaluation: before, warm-up, each GRPO stage
            ax.annotate(
                name.replace("_", " "),
                (x, 100 * m["accuracy"]),
                fontsize=7,
                xytext=(3, -12),
                textcoords="offset points",
            )
    ax.set(
        title="Accuracy and format (greedy; validation within a stage)", xlabel="GRPO step", ylabel="%", ylim=(-3, 105)
    )
    ax.legend(fontsize=8)
    return _png(plt, fig)


def lengths(grpo: list[Row], limit: int | None) -> bytes | None:
    """Completion length per GRPO step (mean, min, max) and the share cut off at the length limit."""
    rows = [row for row in grpo if "completions/mean_length" in row]
    if not rows:
        return None
    plt, fig, ax = _figure()
    steps = [row["step"] for row in rows]
    ax.plot(steps, [row["completions/mean_length"] for row in rows], marker=".", label="mean")
    ax.fill_between(
        steps,
        [row.get("completions/min_length", row["completions/mean_length"]) for row in rows],
        [row.get("completions/max_length", row["completions/mean_length"]) for row in rows],
        alpha=0.2,
        label="min-max",
    )
    if limit:
        ax.axhline(limit, color="grey", linestyle="--", linewidth=1, label=f"limit {limit}")
    ax.set(title="Completion length (tokens)", xlabel="step", ylabel="tokens")
    clipped = [row.get("completions/clipped_ratio") for row in rows]
    if any(c is not None for c in clipped):
        twin = ax.twinx()
        twin.plot(steps, [100 * (c or 0) for c in clipped], color="tab:red", alpha=0.6, label="truncated %")
        twin.set(ylabel="truncated %", ylim=(0, 105))
        twin.legend(fontsize=8, loc="upper right")
    ax.legend(fontsize=8, loc="upper left")
    return _png(plt, fig)


def before_after(evals: dict[str, dict[str, Any]], suites: dict[str, dict[str, float]] | None = None) -> bytes | None:
    """Test-split accuracy and format rate per stage, with pass@k where it was measured, and each
    evaluation suite's accuracy (`suites`: stage -> suite name -> accuracy)."""
    if not evals:
        return None
    plt, fig, ax = _figure(width=6.5)
    stages = list(evals)
    suites = suites or {}
    series = [("accuracy", "test accuracy"), ("format_rate", "format")]
    ks = sorted({k for e in evals.values() for k in e.get("pass_at_k", {})}, key=int)
    series += [(f"pass@{k}", f"pass@{k}") for k in ks]
    names = list(dict.fromkeys(name for found in suites.values() for name in found))
    series += [(f"suite:{name}", f"{name} accuracy") for name in names]
    width = 0.8 / len(series)
    for i, (key, label) in enumerate(series):
        if key.startswith("suite:"):
            values = [100 * suites.get(s, {}).get(key.removeprefix("suite:"), 0.0) for s in stages]
        else:
            values = [100 * _metric(evals[s], key) for s in stages]
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(stages))]
        bars = ax.bar(xs, values, width, label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    n = evals[stages[0]].get("n", 0)
    ax.set(
        title=f"Test split (n={n}), greedy",
        ylabel="%",
        ylim=(0, 112),
        xticks=range(len(stages)),
        xticklabels=[s.replace("_", " ") for s in stages],
    )
    ax.legend(fontsize=8, loc="upper left")
    return _png(plt, fig)


def cold_start_loss(rows: list[Row]) -> bytes | None:
    rows = [row for row in rows if "loss" in row]
    if not rows:
        return None
    plt, fig, ax = _figure(width=6.5, height=3.0)
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], marker=".")
    ax.set(title="Cold start (supervised) loss", xlabel="step", ylabel="loss")
    return _png(plt, fig)


def _metric(result: dict[str, Any], key: str) -> float:
    if key.startswith("pass@"):
        return result.get("pass_at_k", {}).get(key.removeprefix("pass@"), 0.0)
    return result.get(key, 0.0)


def compare(
    series: list[tuple[str, list[float], list[float]]], title: str, xlabel: str, ylabel: str, percent: bool = False
) -> bytes | None:
    """One line per run on shared axes: (label, xs, ys) each; None when no run has a point."""
    series = [(label, xs, ys) for label, xs, ys in series if xs]
    if not series:
        return None
    plt, fig, ax = _figure()
    for label, xs, ys in series:
        ax.plot(xs, [100 * y for y in ys] if percent else ys, marker="." if len(xs) > 12 else "o", label=label)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if percent:
        ax.set_ylim(-3, 105)
    ax.legend(fontsize=8)
    return _png(plt, fig)
