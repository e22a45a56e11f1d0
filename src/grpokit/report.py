"""`grpokit report RUN`: pictures of a run, drawn from its saved JSON only (never reruns a model).

Writes `curves.png` into the run directory: the reward per function over GRPO steps, and held-out
accuracy and format rate before training, after the cold start and after GRPO.
"""

from __future__ import annotations

import json
from pathlib import Path


def load_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(run_dir: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{run_dir} has no summary.json: it is not a finished grpokit run directory")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    grpo = [row for row in load_metrics(run_dir) if row.get("stage") == "grpo" and "reward" in row]
    reward_keys = sorted({k for row in grpo for k in row if k.startswith("rewards/") and k.endswith("/mean")})

    fig, (curves, bars) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    steps = [row["step"] for row in grpo]
    for key in [*reward_keys, "reward"]:
        label = "reward (weighted sum)" if key == "reward" else key.removesuffix("/mean")
        curves.plot(steps, [row.get(key) for row in grpo], marker=".", label=label)
    curves.set(title="GRPO rewards per step (sampled completions)", xlabel="step", ylabel="mean reward")
    curves.grid(alpha=0.3)
    curves.legend(fontsize=8)

    stages = list(summary["evals"])
    width = 0.38
    for offset, (metric, label) in enumerate([("accuracy", "accuracy"), ("format_rate", "format")]):
        values = [100 * summary["evals"][s][metric] for s in stages]
        xs = [i + (offset - 0.5) * width for i in range(len(stages))]
        drawn = bars.bar(xs, values, width, label=label)
        bars.bar_label(drawn, fmt="%.1f", fontsize=8)
    n = summary["evals"][stages[0]]["n"] if stages else 0
    bars.set(
        title=f"held-out, greedy (n={n})", ylabel="%", ylim=(0, 110), xticks=range(len(stages)), xticklabels=stages
    )
    bars.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out = run_dir / "curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
