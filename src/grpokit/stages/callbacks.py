"""The trainer callbacks of a run: metrics and progress, evaluation every N steps, rank diagnostics.

Each class holds what it needs and hands transformers a `TrainerCallback` from `callback()`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from grpokit.eval.evaluate import EvalResult, evaluate_recipe
from grpokit.recipe.schema import Recipe
from grpokit.stages import launch
from grpokit.stages.health import HealthMonitor

log = logging.getLogger("grpokit.stages.pipeline")  # progress lines read as the training log's own


PROBE_ENV = "GRPOKIT_RANK_PROBE"


class RankProbe:
    """Diagnostics for several processes: each rank writes `rank<N>.json` into the folder named by
    GRPOKIT_RANK_PROBE: its world size, the prompts it trained on and a checksum of its trainable weights."""

    def __init__(self, trainer: Any, folder: Path) -> None:
        self.trainer, self.folder = trainer, folder
        trainer.record_prompts = True

    def callback(self) -> Any:
        outer = self

        class _Callback(TrainerCallback):
            def on_train_end(self, args, state, control, **kwargs):
                digest = hashlib.sha256()
                for name, param in sorted(outer.trainer.model.named_parameters()):
                    if param.requires_grad:
                        digest.update(name.encode() + param.detach().cpu().contiguous().numpy().tobytes())
                report = {
                    "rank": launch.rank(),
                    "world_size": dist.get_world_size() if dist.is_initialized() else 1,
                    "prompts": outer.trainer.prompts_seen,
                    "weights_sha256": digest.hexdigest(),
                }
                outer.folder.mkdir(parents=True, exist_ok=True)
                (outer.folder / f"rank{launch.rank()}.json").write_text(json.dumps(report), encoding="utf-8")

        return _Callback()


class PeriodicEval:
    """Greedy validation-split accuracy every `eval.every` steps of a stage (sft or grpo), logged through the trainer.

    The numbers go where every other metric goes (metrics.jsonl, TensorBoard, `report_to`), and each
    eval's completions are kept in `evals/step_<N>.json`, the same prompts every time. Not at a step after
    which the stage stops (its last, a time budget, a signal): the stage's own evaluation follows.
    """

    def __init__(
        self,
        trainer: Any,
        tokenizer: Any,
        task: Any,
        examples: list,
        recipe: Recipe,
        run_dir: Path,
        stage: str = "grpo",
    ) -> None:
        self.trainer, self.tokenizer, self.task, self.examples, self.recipe = trainer, tokenizer, task, examples, recipe
        self.folder, self.stage = run_dir / "evals", stage

    def run(self, step: int) -> EvalResult:
        greedy = dataclasses.replace(self.recipe.eval, samples_per_problem=0, samples=len(self.examples))
        recipe = dataclasses.replace(self.recipe, eval=greedy)
        result = evaluate_recipe(
            self.trainer.model, self.tokenizer, self.task, self.examples, recipe, f"eval at step {step} of {self.stage}"
        )
        self.folder.mkdir(exist_ok=True)
        result.save(self.folder / step_eval_name(self.stage, step))
        log.info(
            "eval at step %d of %s: accuracy %.1f%%, format %.1f%% on %d problems",
            step,
            self.stage,
            100 * result.accuracy,
            100 * result.format_rate,
            result.n,
        )
        self.trainer.log(result.metrics())
        return result

    def callback(self) -> Any:
        outer = self

        class _Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                step = state.global_step
                stopping = control.should_training_stop or step >= state.max_steps
                if step % outer.recipe.eval.every == 0 and not stopping:
                    outer.run(step)

        return _Callback()


class StepClock:
    """Training time: each step's start to its end, summed, so evaluations and checkpoint saves between steps
    are left out. TimeBudget stops on it and MetricsLog logs it, so both count the same time."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began: float | None = None

    def begin(self) -> None:
        self._began = time.perf_counter()

    def end(self) -> None:
        if self._began is not None:
            self.seconds += time.perf_counter() - self._began
            self._began = None


class TimeBudget:
    """Stops a stage after the step during which its training time reached `minutes` (a stage's `max_minutes`).

    Training time is the time from each step's start to its end, summed: rollouts, the loss and the
    optimizer step, not the evaluations or checkpoint saves between steps. The callback must come before
    PeriodicEval's, so that a step's evaluation runs after the budget has looked at that step. The clock
    starts with the trainer, so a resumed stage's budget counts from the resume. With several processes the
    ranks agree: the stage stops when any rank's budget ran out.
    """

    def __init__(self, stage: str, minutes: float) -> None:
        self.stage, self.minutes = stage, minutes
        self.clock = StepClock()
        self.reached_at: int | None = None  # the step after which the budget stopped the stage

    @property
    def seconds(self) -> float:
        """Training time so far."""
        return self.clock.seconds

    def callback(self) -> Any:
        outer = self

        class _Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                outer.clock.begin()

            def on_step_end(self, args, state, control, **kwargs):
                outer.clock.end()
                if outer.reached_at is None and _any_rank(outer.seconds >= 60 * outer.minutes, args.device):
                    outer.reached_at = state.global_step
                    control.should_training_stop = True
                    if state.is_world_process_zero:
                        log.info(
                            "stage %s: time budget of %g min reached after step %d",
                            outer.stage,
                            outer.minutes,
                            state.global_step,
                        )

        return _Callback()


def _any_rank(flag: bool, device: Any) -> bool:
    """`flag` on any process (several processes must stop at the same step, or they wait on each other)."""
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    value = torch.tensor([float(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def step_eval_name(stage: str, step: int) -> str:
    """The file of a periodic evaluation in `evals/`: `step_N.json` in a stage called grpo (the
    single-stage recipe's), `<stage>-step_N.json` in others."""
    return f"step_{step:05d}.json" if stage == "grpo" else f"{stage}-step_{step:05d}.json"


class MetricsLog:
    """Appends every trainer log (sft and GRPO stages) to metrics.jsonl and prints a progress line.

    Each row carries `train_seconds`: the stage's training time so far, the steps' own time summed as
    TimeBudget sums it (evaluations and checkpoint saves between steps left out; from the resume in a
    resumed stage), so runs that evaluate at different rates share a time axis.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stage = "train"
        self.health: HealthMonitor | None = None  # set for the GRPO stage

    def callback(self) -> Any:
        outer = self

        class _Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                self.t0, self.first_step = time.perf_counter(), state.global_step  # > 0 in a resumed stage
                self.clock = StepClock()

            # Before PeriodicEval's callback, like TimeBudget's: a step's evaluation is not its time.
            def on_step_begin(self, args, state, control, **kwargs):
                self.clock.begin()

            def on_step_end(self, args, state, control, **kwargs):
                self.clock.end()

            def on_log(self, args, state, control, logs=None, **kwargs):
                if not logs or not state.is_world_process_zero:
                    return
                row = {
                    "stage": outer.stage,
                    "step": state.global_step,
                    "time": round(time.time(), 3),
                    "train_seconds": round(self.clock.seconds, 3),
                    **{k: (v if math.isfinite(v) else str(v)) for k, v in logs.items() if isinstance(v, int | float)},
                }
                with outer.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                if outer.health is not None and "reward" in logs:
                    outer.health.observe(state.global_step, logs)
                elapsed = time.perf_counter() - self.t0
                rate = elapsed / max(state.global_step - self.first_step, 1)
                eta = rate * (state.max_steps - state.global_step)
                shown = {
                    k: logs[k]
                    for k in (
                        "loss",
                        "reward",
                        "rewards/correctness/mean",
                        "rewards/format/mean",
                        "completions/mean_length",
                    )
                    if k in logs
                }
                log.info(
                    "%s step %d/%d (%.1f s/step, ETA %.1f min) %s",
                    outer.stage,
                    state.global_step,
                    state.max_steps,
                    rate,
                    eta / 60,
                    " ".join(f"{k}={v:.3g}" for k, v in shown.items()),
                    extra={"console": False},  # train.log; the console shows grpokit.stages.console's progress line
                )

        return _Callback()
