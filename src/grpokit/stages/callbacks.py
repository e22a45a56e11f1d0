"""The trainer callbacks of a run: metrics and progress, evaluation every N steps, rank diagnostics.

Each class holds what it needs and hands transformers a `TrainerCallback` from `callback()`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback, TrainerControl
from transformers.integrations import INTEGRATION_TO_CALLBACK

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
                    # trainer.log() clears should_log, which would drop the step's own log (its loss) after it.
                    logging = control.should_log
                    outer.run(step)
                    control.should_log = logging

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
    """Stops a stage after the step during which its training time reached `minutes` (a stage's `max_minutes`),
    or during which the run's wall clock reached `run_minutes` (a stage's `max_run_minutes`).

    Training time is the time from each step's start to its end, summed: rollouts, the loss and the
    optimizer step, not the evaluations or checkpoint saves between steps. The run's wall clock counts
    everything from `run_started` (a `time.perf_counter()` value: the start of `grpokit train`, or of the
    resume), evaluations and earlier stages included. The callback must come before PeriodicEval's, so that
    a step's evaluation runs after the budget has looked at that step. The stage clock starts with the
    trainer, so a resumed stage's budget counts from the resume. With several processes the ranks agree: the
    stage stops when any rank's budget ran out.
    """

    def __init__(
        self,
        stage: str,
        minutes: float | None = None,
        *,
        run_minutes: float | None = None,
        run_started: float | None = None,
    ) -> None:
        if run_minutes is not None and run_started is None:
            raise ValueError("run_minutes needs run_started, the perf_counter() value the run started at")
        self.stage, self.minutes = stage, minutes
        self.run_minutes, self.run_started = run_minutes, run_started
        self.clock = StepClock()
        self.reached_at: int | None = None  # the step after which the budget stopped the stage

    @property
    def seconds(self) -> float:
        """Training time so far."""
        return self.clock.seconds

    @property
    def run_seconds(self) -> float:
        """The run's wall clock so far (needs `run_started`)."""
        return time.perf_counter() - self.run_started

    def ran_out(self) -> str | None:
        """Which budget ran out (its log line), or None."""
        if self.minutes is not None and self.seconds >= 60 * self.minutes:
            return f"time budget of {self.minutes:g} min"
        if self.run_minutes is not None and self.run_seconds >= 60 * self.run_minutes:
            return f"run time limit of {self.run_minutes:g} min"
        return None

    def warn_if_started_late(self) -> None:
        """Warn when the run's wall clock has already passed `run_minutes` as the stage starts: the limit is
        checked after each step, so such a stage still trains one."""
        if self.run_minutes is None:
            return
        minute = self.run_seconds / 60
        if minute >= self.run_minutes:
            log.warning(
                "stage %s starts at minute %.1f of the run, past its max_run_minutes of %g: it trains one step "
                "and stops; raise max_run_minutes or shorten the stages before it",
                self.stage,
                minute,
                self.run_minutes,
            )

    def callback(self) -> Any:
        outer = self

        class _Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                outer.clock.begin()

            def on_step_end(self, args, state, control, **kwargs):
                outer.clock.end()
                if outer.reached_at is not None:
                    return
                which = outer.ran_out()
                if _any_rank(which is not None, args.device):
                    outer.reached_at = state.global_step
                    control.should_training_stop = True
                    if state.is_world_process_zero:
                        log.info(
                            "stage %s: %s reached after step %d",
                            outer.stage,
                            which or "another process's time budget",
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


def tracker_callbacks(trainer: Any) -> list[Any]:
    """The trainer's experiment-tracker callbacks (`grpo.report_to`: TensorBoard, W&B, ...): where its logs go."""
    classes = tuple(INTEGRATION_TO_CALLBACK.values())
    return [callback for callback in trainer.callback_handler.callbacks if isinstance(callback, classes)]


def report(trackers: list[Any], args: Any, state: Any, logs: dict[str, float]) -> None:
    """Hand `logs` to `trackers` as a trainer hands them its own (`on_log`, at `state.global_step`), so grpokit's
    metrics sit beside TRL's in every tracker, under the names each tracker gives a trainer's logs."""
    control = TrainerControl()
    for tracker in trackers:
        tracker.on_log(args, state, control, logs=dict(logs))


@dataclasses.dataclass
class Trackers:
    """A finished stage's trackers: its evaluation runs after its trainer is gone (the trainer's memory goes
    first), and is reported to them at the stage's last step."""

    callbacks: list[Any]
    args: Any
    state: Any

    @classmethod
    def of(cls, trainer: Any) -> Trackers:
        return cls(tracker_callbacks(trainer), trainer.args, trainer.state)

    def log(self, logs: dict[str, float]) -> None:
        # A TensorBoard callback whose stage never trained (resumed past its last step) has no folder yet:
        # it would open one in the working directory.
        opened = [tracker for tracker in self.callbacks if getattr(tracker, "logging_dir", "") is not None]
        report(opened, self.args, self.state, logs)
        for tracker in self.callbacks:  # TensorBoard's writer: on_log reopened the one the stage's end closed
            writer = getattr(tracker, "tb_writer", None)
            if writer is not None:
                writer.close()
                tracker.tb_writer = None


def stage_eval_logs(record: dict[str, Any]) -> dict[str, float]:
    """A stage's test-split evaluation (a stages.json row) as tracker metrics: `test_accuracy`, `test_stderr`,
    `test_format_rate`, `test_<suite>/accuracy`, ... (transformers' trackers show `test_x` as `test/x`).

    >>> row = {"accuracy": 0.5, "stderr": 0.1, "format_rate": 1.0, "n": 8, "suites": {"big": {"accuracy": 0.2}}}
    >>> stage_eval_logs(row)
    {'test_accuracy': 0.5, 'test_stderr': 0.1, 'test_format_rate': 1.0, 'test_big/accuracy': 0.2}
    """
    logs = {f"test_{key}": record[key] for key in ("accuracy", "stderr", "format_rate") if key in record}
    for name, suite in record.get("suites", {}).items():
        logs.update({f"test_{name}/{key}": suite[key] for key in ("accuracy", "format_rate") if key in suite})
    return logs


def active_wandb_run() -> Any:
    """The active W&B run, or None (wandb is never imported here: a run that reports to it has imported it)."""
    return getattr(sys.modules.get("wandb"), "run", None)


def finish_wandb(outer: Any, failed: bool = False) -> None:
    """End the W&B run a grpokit run opened (transformers leaves it open), marked failed when the run raised, so
    its files are complete when the run returns and the next run in this process opens its own; `outer`, a run
    the caller opened, stays open."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None and wandb.run is not outer:
        wandb.finish(exit_code=1 if failed else 0)
        if outer is None:  # finish() returns before W&B's service has written the run out; teardown waits for it
            wandb.teardown()


class MetricsLog:
    """Appends every trainer log (sft and GRPO stages) to metrics.jsonl and prints a progress line.

    Each row carries `train_seconds`: the stage's training time so far, the steps' own time summed as
    TimeBudget sums it (evaluations and checkpoint saves between steps left out; from the resume in a
    resumed stage), so runs that evaluate at different rates share a time axis.

    The trackers (`trackers`, the stage's) also get each health warning as `health/<condition>` = 1 at its
    step (`health/reward_errors/<reward>` for a reward's errors), and `opening` (the evaluation the stage
    starts from, when set) at the stage's first step.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stage = "train"
        self.health: HealthMonitor | None = None  # set for the GRPO stage
        self.trackers: list[Any] = []
        self.opening: dict[str, float] = {}

    def callback(self) -> Any:
        outer = self

        class _Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                self.t0, self.first_step = time.perf_counter(), state.global_step  # > 0 in a resumed stage
                self.clock = StepClock()
                # After the trackers' own on_train_begin (a trainer's report_to callbacks come first): they are open.
                if outer.opening and state.is_world_process_zero:
                    report(outer.trackers, args, state, outer.opening)

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
                    found = outer.health.observe(state.global_step, logs)
                    if found:
                        flags = {f"health/{w.condition.replace(':', '/')}": 1.0 for w in found}  # reward_errors:<name>
                        report(outer.trackers, args, state, flags)
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
