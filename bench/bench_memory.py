"""Where a run's memory peaks: `grpokit train` with its resident set sampled every 20 ms in the same process,
each sample labelled by the phase running at that moment, and the peak printed per phase.

GNU time gives one number for a whole run. Which phase sets it decides what to change: in v0.24 a profile
labelled by the last log line put the default run's peak in its GRPO steps, because a step evaluation logs
only when it ends; labelled by phase (v0.25) it was evaluation's decode (3.03 GB), then the training pass.
Phases (the innermost running one names a sample, with the phase around it): a stage (`sft stage`,
`grpo stage`), an evaluation (`evaluation`: before, after each stage; `step evaluation`: every eval.every
GRPO steps), its or a rollout's decoding (`decoding`), a GRPO step's rollout and scoring (`rollout and
scoring`), its training pass (`training pass`), the merged copy's refresh (`copy refresh`), and the report
(`report`); the rest (loading, saving) is `outside any phase`.

Run: `python bench/bench_memory.py RECIPE [key=value ...] [--out DIR]`: a whole `grpokit train` (its time,
its run directory); the table goes to stdout, `<out>/results_memory.json` keeps it. Linux only (it reads
/proc/self/status), and nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

PERIOD_S = 0.02


def resident_gb() -> float:
    """This process's resident set (VmRSS) in GB (10^9 bytes, as GNU time's kbytes / 10^6)."""
    text = Path("/proc/self/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1e6


class PhaseSampler:
    """Samples the resident set in a thread; `phase(label)` wraps a function so that samples taken while it
    runs carry its label (with the label around it)."""

    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.stack: list[str] = []
        self.peaks: dict[str, float] = {}
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def label(self) -> str:
        return " > ".join(self.stack[-2:]) or "outside any phase"

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.period_s)

    def sample(self) -> None:
        label, rss = self.label(), resident_gb()
        self.peaks[label] = max(self.peaks.get(label, 0.0), rss)

    def phase(self, label: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def labelled(*args: Any, **kwargs: Any) -> Any:
            self.stack.append(label)
            try:
                return fn(*args, **kwargs)
            finally:
                self.sample()  # the phase's last moment, before its memory goes
                self.stack.pop()

        return labelled

    def __enter__(self) -> PhaseSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


@contextlib.contextmanager
def phases_of_a_run(sampler: PhaseSampler) -> Any:
    """grpokit's phase functions wrapped, where each module calls them, and put back afterwards."""
    import grpokit.report.page as report
    import grpokit.rollout.sampler as rollout
    import grpokit.stages.callbacks as callbacks
    import grpokit.stages.pipeline as train
    import grpokit.stages.trainer as trainer

    def stage_label(fn: Any) -> Any:
        def run(stage: Any, *args: Any, **kwargs: Any) -> Any:
            return sampler.phase(f"{stage.kind} stage", fn)(stage, *args, **kwargs)

        return run

    patches = [
        (train, "run_stage", stage_label(train.run_stage)),
        (train, "evaluate_recipe", sampler.phase("evaluation", train.evaluate_recipe)),
        (callbacks, "evaluate_recipe", sampler.phase("step evaluation", callbacks.evaluate_recipe)),
        (rollout, "sample", sampler.phase("decoding", rollout.sample)),  # evaluation imports it at each call
        (trainer, "sample", sampler.phase("decoding", trainer.sample)),
        (rollout, "refresh", sampler.phase("copy refresh", rollout.refresh)),
        (report, "main", sampler.phase("report", report.main)),
        (trainer.GrpoTrainer, "compute_loss", sampler.phase("training pass", trainer.GrpoTrainer.compute_loss)),
    ]
    generate = trainer.GrpoTrainer._generate_and_score_completions
    patches.append(
        (trainer.GrpoTrainer, "_generate_and_score_completions", sampler.phase("rollout and scoring", generate))
    )
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def profile_run(recipe_path: str, overrides: list[str]) -> dict[str, Any]:
    """Train `recipe_path` with `overrides`, sampled; returns the run directory, peaks per phase and overall."""
    from grpokit.kernels.precision import cpu_name
    from grpokit.recipe.load import load_recipe
    from grpokit.stages import pipeline as train

    recipe = load_recipe(recipe_path, overrides)
    with PhaseSampler() as sampler, phases_of_a_run(sampler):
        start = time.perf_counter()
        run_dir = train.main(recipe)
        seconds = time.perf_counter() - start
    peaks = dict(sorted(sampler.peaks.items(), key=lambda kv: -kv[1]))
    return {
        "cpu": cpu_name(),
        "recipe": str(recipe_path),
        "overrides": overrides,
        "run_dir": str(run_dir),
        "minutes": seconds / 60,
        "peak_gb": max(peaks.values()),
        "peaks_gb": peaks,
    }


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{'phase (innermost last)':<52} {'peak RSS':>9}"]
    lines += [f"{label:<52} {gb:>6.2f} GB" for label, gb in result["peaks_gb"].items()]
    lines.append(f"{'the run':<52} {result['peak_gb']:>6.2f} GB  ({result['minutes']:.1f} min)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("overrides", nargs="*", help="key.sub=value, as grpokit train takes them")
    parser.add_argument("--out", default="bench/out")
    args = parser.parse_args(argv)
    result = profile_run(args.recipe, args.overrides)
    print(f"\nCPU: {result['cpu']}; run: {result['run_dir']}")
    print(format_table(result))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results_memory.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {out / 'results_memory.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
