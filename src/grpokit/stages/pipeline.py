"""`grpokit train`: seed, model, data, evaluation before, then each stage (sft, grpo) and its evaluation.

A recipe runs its `stages:` in order (or, without them, a cold start when enabled and one GRPO stage);
each stage trains the policy the previous one left and is evaluated on the same problems of the task's
`test` split, and on each of the recipe's `eval.suites`. Evaluations during a stage (`eval.every`) read
the `validation` split, so nothing a run watches or tunes on is what it reports.

Run directory (one per run, never overwritten):
    recipe.yaml            the resolved recipe, as run
    train.log              everything logged, TRL's and transformers' messages included
    metrics.jsonl          one JSON line per logging step (stage, step, TRL's metrics)
    stages.json            one row per finished stage, `before` first: accuracy, format, minutes, gain
    eval_before.json       greedy test-split evaluation of the untouched model
    eval_<stage>.json      ... after each stage (eval_after.json: after the last one)
    eval_<stage>.<suite>.json  each evaluation suite's, beside it
    <stage>/               the stage's checkpoints and its trained adapter/ (or model/)
    trainer_state.json     TRL's log history of the last GRPO stage
    adapter/ or model/     the trained LoRA adapter (or full model) and tokenizer
    summary.json           the stages, before/after numbers and timings
    curves.png             rewards over GRPO steps and the before/after bars
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import transformers
import yaml
from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
from safetensors.torch import load_file

from grpokit.errors import RecipeError, TrainingInterrupted
from grpokit.eval.evaluate import EvalResult, evaluate_recipe, paired
from grpokit.kernels import memory
from grpokit.kernels.attention import use_grouped_attention
from grpokit.kernels.precision import trainer_precision
from grpokit.models.load import hold_frozen_linears, load_model
from grpokit.recipe.load import build_recipe
from grpokit.recipe.schema import Recipe, StageSection
from grpokit.recipe.stages import plan_stages, stage_recipe
from grpokit.recipe.trl_args import measure_precision
from grpokit.report import page as report
from grpokit.rollout.sampler import copy_refusal
from grpokit.runs import disk
from grpokit.runs import records as runs
from grpokit.runs.checkpoints import StopOnSignal, checkpoint_step, complete_checkpoints, truncate_metrics
from grpokit.sandbox.client import configure as configure_sandbox
from grpokit.stages import console, launch, sft
from grpokit.stages.callbacks import (
    MetricsLog,
    PeriodicEval,
    TimeBudget,
    Trackers,
    active_wandb_run,
    finish_wandb,
    stage_eval_logs,
    tracker_callbacks,
)
from grpokit.stages.grpo import build_train_dataset as build_train_dataset  # re-exported: tests, benchmarks
from grpokit.stages.grpo import build_trainer
from grpokit.tasks import task_of
from grpokit.tasks.base import Example, Task

log = logging.getLogger(__name__)

STAGES_FILE = "stages.json"


def main(recipe: Recipe, resume: Path | str | None = None, callbacks: Sequence[Any] = ()) -> Path:
    """Train `recipe` in a new run directory, or continue `resume` (a run directory) where it stopped:
    finished stages are kept, the interrupted one continues from its last complete checkpoint.

    `callbacks` are extra transformers TrainerCallbacks for the GRPO stages.
    """
    run_started = time.perf_counter()  # the clock of the stages' max_run_minutes
    configure_sandbox(recipe.sandbox)  # the recipe's sandbox: section, for every score this run takes
    measure_precision(recipe)  # before the seed: the measurement draws random matrices
    main_rank = launch.is_main()
    plan = plan_run(recipe)
    # Bad data fails before the run directory is made and before the model loads.
    task = task_of(recipe)
    held = held_out(task, recipe, plan)
    memory.follow_recipe(recipe.train_pass)
    if resume:
        run_dir, records, checkpoint = prepare_resume(recipe, Path(resume), truncate=main_rank, plan=plan)
    elif os.environ.get(launch.RUN_DIR_ENV):  # one of several processes: the launcher made the directory
        run_dir, records, checkpoint = Path(os.environ[launch.RUN_DIR_ENV]), [], None
        run_dir.mkdir(parents=True, exist_ok=True)
    else:
        run_dir, records, checkpoint = make_run_dir(recipe), [], None
    if main_rank:
        runs.mark_running(run_dir, recipe, resumed=bool(resume))
    outer_wandb = active_wandb_run()  # a W&B run the caller opened is theirs to end
    root = logging.getLogger()
    log_file = attach_log_file(run_dir / "train.log") if main_rank else logging.NullHandler()
    previous_level = root.level
    root.setLevel(min(previous_level, logging.INFO))  # train.log keeps INFO even when the caller set less
    try:
        if resume:
            log.info("resuming %s: %s", run_dir, resume_point([p.section for p in plan], records, checkpoint))
        elif main_rank:
            (run_dir / "recipe.yaml").write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False), encoding="utf-8")
            log.info("run directory: %s", run_dir)
        transformers.set_seed(recipe.seed)
        started = time.perf_counter()

        model, tokenizer = load_model(
            recipe.model.name, recipe.model.dtype, recipe.model.revision, full_finetune=not recipe.lora.enabled
        )
        use_grouped_attention(model)  # short sequences on a CPU: grpokit.kernels.attention (other devices: sdpa)
        for note in task.notes():
            log.warning("data: %s", note)
        if not records and main_rank:
            result, suites = run_evals(model, tokenizer, held, recipe, run_dir, "before")
            records.append(stage_record("before", "eval", result, 0.0, None, suites))
            save_records(run_dir, records)
        if recipe.lora.enabled:
            model = attach_lora(model, recipe)

        metrics = MetricsLog(run_dir / "metrics.jsonl")
        done = {row["name"] for row in records}
        last_done = next((p.section for p in reversed(plan) if p.section.name in done), None)
        if last_done is not None and checkpoint is None:
            load_weights(model, run_dir / last_done.name, recipe)
        grpo_state = None  # the last stage's TRL state, when it was a GRPO stage
        for planned in plan:
            stage = planned.section
            if stage.name in done:
                continue
            # The trackers get the evaluation before the first stage at its first step (each stage's own at its last).
            metrics.opening = stage_eval_logs(records[0]) if len(records) == 1 and main_rank else {}
            t0 = time.perf_counter()
            model, trainer = run_stage(
                stage,
                model,
                tokenizer,
                recipe,
                run_dir,
                held.validation,
                metrics,
                checkpoint,
                callbacks,
                seen=planned.recipe,
                first_example=demonstrations_before(recipe, stage, plan),
                run_started=run_started,
            )
            checkpoint, minutes = None, (time.perf_counter() - t0) / 60
            grpo_state = trainer.state if hasattr(trainer, "reward_funcs") else None
            trackers = Trackers.of(trainer)
            # The finished stage's trainer (optimizer, buffers, callbacks that point back at it) goes before
            # the evaluation and the next stage build theirs.
            del trainer
            gc.collect()
            memory.trim()
            if not main_rank:
                continue
            save_model(model, tokenizer, run_dir / stage.name, recipe)
            result, suites = run_evals(model, tokenizer, held, recipe, run_dir, stage.name)
            record = stage_record(stage.name, stage.kind, result, minutes, records, suites)
            record.update(changed_since(run_dir, records[-1]["name"], result) if records else {})
            records.append(record)
            save_records(run_dir, records)
            trackers.log(stage_eval_logs(records[-1]))
        if not main_rank:
            return run_dir
        if grpo_state is not None:
            grpo_state.save_to_json(str(run_dir / "trainer_state.json"))
        save_model(model, tokenizer, run_dir, recipe)
        final = run_dir / f"eval_{plan[-1].section.name}.json"
        (run_dir / "eval_after.json").write_text(final.read_text(encoding="utf-8"), encoding="utf-8")
        write_summary(run_dir, records, time.perf_counter() - started, task.notes(), launch.world_size())
        log.info("\n%s", format_table(records))
        log.info("report: %s (open it in a browser; curves.png beside it)", report.main(run_dir))
        runs.mark_finished(run_dir)
        return run_dir
    except BaseException as err:
        if main_rank:
            runs.mark_stopped(run_dir, err)  # interrupted with a checkpoint, or failed with the error
            write_partial_report(run_dir)
        raise
    finally:
        if main_rank:
            finish_wandb(outer_wandb, failed=sys.exc_info()[1] is not None)
        root.removeHandler(log_file)
        root.setLevel(previous_level)
        log_file.close()


@dataclasses.dataclass(frozen=True)
class PlannedStage:
    """One stage of a run and the recipe as that stage sees it (`recipe.stages.stage_recipe`)."""

    section: StageSection
    recipe: Recipe


def plan_run(recipe: Recipe) -> list[PlannedStage]:
    """The stages `recipe` runs, in order, each with its stage recipe: `main` computes this once per run
    and hands each step the part it reads."""
    return [PlannedStage(stage, stage_recipe(recipe, stage)) for stage in plan_stages(recipe)]


def write_partial_report(run_dir: Path) -> None:
    """report.html for a run that stopped before its end, from what it logged; never raises, so the error
    that stopped the run is the one reported."""
    try:
        log.info("partial report: %s", report.main(run_dir))
    except Exception as err:  # a report is a courtesy here: the run's own error matters more
        log.warning("no partial report for %s: %s", run_dir, err)


def run_stage(
    stage: StageSection,
    model: Any,
    tokenizer: Any,
    recipe: Recipe,
    run_dir: Path,
    watched: list,
    metrics: MetricsLog,
    checkpoint: Path | None,
    callbacks: Sequence[Any] = (),
    *,
    seen: Recipe,
    first_example: int,
    run_started: float,
) -> tuple[Any, Any]:
    """Train one stage on `model` (from `checkpoint` when resuming inside it); return the model and trainer.

    `seen` is the recipe as the stage sees it (`PlannedStage.recipe`); an sft stage draws demonstrations
    from the `first_example`-th on (`demonstrations_before`). A stage's `max_minutes` (its training time)
    and `max_run_minutes` (the run's wall clock since `run_started`, a perf_counter() value) stop it early
    (callbacks.TimeBudget; a resumed stage's budget counts from the resume); its `eval_every` (or
    eval.every for grpo stages) evaluates it on `watched` (validation problems) every N steps."""
    metrics.stage, metrics.health = stage.name, None
    stop = StopOnSignal()
    shown = console.callbacks(stage.name)  # the stage's progress line, when a console is set up
    # Before the periodic evaluation's callback, which the trainers add last: see TimeBudget.
    budget, limits = [], None
    if stage.max_minutes is not None or stage.max_run_minutes is not None:
        limits = TimeBudget(stage.name, stage.max_minutes, run_minutes=stage.max_run_minutes, run_started=run_started)
        budget = [limits.callback()]
    if stage.kind == "sft":
        trainer = sft.build_trainer(
            model,
            tokenizer,
            seen,
            run_dir / stage.name,
            [*budget, metrics.callback(), stop.callback(), *shown],
            first_example=first_example,
        )
        if seen.eval.every and launch.is_main():
            task = task_of(seen)
            periodic = PeriodicEval(trainer, tokenizer, task, watched[: seen.eval.every_n], seen, run_dir, stage.name)
            trainer.add_callback(periodic.callback())
    else:
        trainer = build_trainer(
            stage.name, model, tokenizer, seen, run_dir, watched, metrics, stop, [*budget, *shown, *callbacks]
        )
    console.adopt(trainer)
    metrics.trackers = tracker_callbacks(trainer)  # health warnings and the opening evaluation go there too
    budget_note = f", at most {stage.max_minutes:g} min of training" if stage.max_minutes else ""
    if stage.max_run_minutes:
        budget_note += f", until minute {stage.max_run_minutes:g} of the run"
    log.info("stage %s (%s): %d steps%s", stage.name, stage.kind, trainer.args.max_steps, budget_note)
    if checkpoint is not None and checkpoint_step(checkpoint) >= trainer.args.max_steps:
        # Stopped after its last step, before its evaluation: the checkpoint is the stage's result
        # (transformers would train one step more).
        trainer._load_from_checkpoint(str(checkpoint))
        return trainer.model, trainer
    if limits is not None:
        limits.warn_if_started_late()
    with stop:
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    if stop.requested:
        raise TrainingInterrupted(
            f"{stop.requested}: stopped after step {trainer.state.global_step} of stage {stage.name} with a "
            f"checkpoint in {run_dir / stage.name}; continue with: grpokit train {recipe.source} --resume {run_dir}"
        )
    model = trainer.model
    if hasattr(model, "peft_config") and "ref" in model.peft_config:
        model.delete_adapter("ref")  # TRL's frozen copy for the KL term; the next stage makes its own
    return model, trainer


def demonstrations_before(recipe: Recipe, stage: StageSection, plan: list[PlannedStage] | None = None) -> int:
    """How many demonstrations the sft stages before `stage` drew: each sft stage draws the ones after
    them, so a second sft stage trains on fresh examples rather than the first one's again. `plan`: the
    run's (`plan_run(recipe)`, computed here when not given)."""
    drawn = 0
    for earlier in plan_run(recipe) if plan is None else plan:
        if earlier.section.name == stage.name:
            return drawn
        if earlier.section.kind == "sft":
            drawn += earlier.recipe.cold_start.examples
    return drawn


def stage_record(
    name: str,
    kind: str,
    result: EvalResult,
    minutes: float,
    earlier: list[dict[str, Any]] | None,
    suites: dict[str, EvalResult] | None = None,
) -> dict[str, Any]:
    """One row of stages.json: test-split accuracy with its standard error, format, minutes, and each
    suite's accuracy; a GRPO stage's `gain` is its accuracy minus the evaluation before it."""
    row = {
        "name": name,
        "kind": kind,
        "split": "test",
        "accuracy": result.accuracy,
        "stderr": standard_error(result.accuracy, result.n),
        "format_rate": result.format_rate,
        "n": result.n,
        "minutes": round(minutes, 2),
        "eval_minutes": round((result.seconds + sum(r.seconds for r in (suites or {}).values())) / 60, 2),
    }
    if suites:
        row["suites"] = {
            label: {
                "accuracy": r.accuracy,
                "stderr": standard_error(r.accuracy, r.n),
                "format_rate": r.format_rate,
                "n": r.n,
            }
            for label, r in suites.items()
        }
    if kind == "grpo" and earlier:
        row["gain"] = result.accuracy - earlier[-1]["accuracy"]
    return row


def changed_since(run_dir: Path, earlier: str, result: EvalResult) -> dict[str, Any]:
    """`fixed`, `broke` and McNemar's `z` of `result` against the stage `earlier`'s saved evaluation of the
    same problems (`grpokit.eval.evaluate.paired`); nothing when that file cannot be paired."""
    path = run_dir / f"eval_{earlier}.json"
    before = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    change = paired(before, {"correct": result.correct, "samples": result.samples})  # what paired reads
    return {key: change[key] for key in ("fixed", "broke", "z")} if change else {}


def standard_error(accuracy: float, n: int) -> float:
    """The binomial standard error of an accuracy measured on `n` problems.

    >>> round(standard_error(0.9, 100), 3)
    0.03
    """
    return (accuracy * (1 - accuracy) / n) ** 0.5 if n else 0.0


def save_records(run_dir: Path, records: list[dict[str, Any]]) -> None:
    tmp = run_dir / f".{STAGES_FILE}.tmp"
    tmp.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, run_dir / STAGES_FILE)


def load_records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / STAGES_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []


def prepare_resume(
    recipe: Recipe, run_dir: Path, truncate: bool = True, plan: list[PlannedStage] | None = None
) -> tuple[Path, list[dict], Path | None]:
    """Check that `run_dir` is this recipe's run and can continue; return it, its finished stages'
    records and the checkpoint to continue the next stage from (None: that stage starts afresh).
    `plan`: the run's (`plan_run(recipe)`, computed here when not given)."""
    saved_path = run_dir / "recipe.yaml"
    if not saved_path.is_file():
        raise RecipeError(f"cannot resume {run_dir}: it has no recipe.yaml, so it is not a grpokit run directory")
    # Through build_recipe, so sections a newer grpokit added (at their defaults) do not count as changes.
    saved = build_recipe(yaml.safe_load(saved_path.read_text(encoding="utf-8")) or {}).to_dict()
    current = recipe.to_dict()
    loosened = _how_not_what(saved, current)
    if loosened:
        log.info("resuming with %s changed: how a step is computed, not what it computes", ", ".join(loosened))
    saved, current = _without_how(saved), _without_how(current)
    changed = sorted(k for k in set(saved) | set(current) if k != "output" and saved.get(k) != current.get(k))
    if changed:
        raise RecipeError(
            f"cannot resume {run_dir}: the recipe's {', '.join(changed)} section changed since the run started; "
            "resume with the same recipe and overrides, or start a new run"
        )
    records = load_records(run_dir)
    done = {row["name"] for row in records}
    stages = [p.section for p in plan] if plan is not None else plan_stages(recipe)
    pending = [stage for stage in stages if stage.name not in done]
    if not pending:
        raise RecipeError(f"cannot resume {run_dir}: every stage has finished; start a new run")
    found = complete_checkpoints(run_dir / pending[0].name)
    if not found and len(done) <= 1:
        raise RecipeError(
            f"cannot resume {run_dir}: no stage finished and it has no complete checkpoint (runs save every "
            "output.save_every steps and on Ctrl-C); start a new run"
        )
    checkpoint = found[-1] if found else None
    stage = pending[0].name
    dropped = 0
    if truncate:
        dropped = truncate_metrics(run_dir / "metrics.jsonl", stage, checkpoint_step(checkpoint) if checkpoint else 0)
    if dropped:
        log.info(
            "dropped %d metric rows of stage %s logged after its checkpoint: those steps run again", dropped, stage
        )
    return run_dir, records, checkpoint


# Settings that change how a step is computed and how much memory it takes, not what it computes: the same loss
# and gradient (micro-batches and the shared prefix are tested against TRL's pass; checkpointing recomputes the
# same forward). A run that ran out of memory resumes with them changed.
HOW_NOT_WHAT = {
    "train_pass": ("micro_batch_rows", "shared_prefix", "return_freed_memory"),
    "grpo": ("gradient_checkpointing",),
}


def _without_how(recipe: dict) -> dict:
    out = dict(recipe)
    for section, keys in HOW_NOT_WHAT.items():
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k not in keys}
    return out


def _how_not_what(saved: dict, current: dict) -> list[str]:
    """The `HOW_NOT_WHAT` settings that differ between the saved recipe and this one, as `section.key`."""
    return [
        f"{section}.{key}"
        for section, keys in HOW_NOT_WHAT.items()
        for key in keys
        if (saved.get(section) or {}).get(key) != (current.get(section) or {}).get(key)
    ]


def resume_point(plan: list[StageSection], records: list[dict], checkpoint: Path | None) -> str:
    done = {row["name"] for row in records}
    stage = next(s.name for s in plan if s.name not in done)
    return f"stage {stage} from {checkpoint.name}" if checkpoint else f"stage {stage} from its start"


def load_weights(model: Any, folder: Path, recipe: Recipe) -> None:
    """Put a finished stage's saved weights (adapter or full model) into `model`."""
    if recipe.lora.enabled:
        set_peft_model_state_dict(model, load_file(str(folder / "adapter" / "adapter_model.safetensors")))
    else:
        state = {}
        for path in sorted((folder / "model").glob("*.safetensors")):
            state.update(load_file(str(path)))
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or any(not name.endswith("lm_head.weight") for name in missing):
            raise RecipeError(f"cannot resume: {folder / 'model'} does not match the model ({missing or unexpected})")


def make_run_dir(recipe: Recipe) -> Path:
    base = Path(recipe.output.dir) / (recipe.output.name or "run")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for suffix in ["", *(f"-{i}" for i in range(1, 100))]:
        run_dir = base / f"{stamp}{suffix}"
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            continue
        except OSError as err:
            raise OSError(
                f"cannot create the run directory {run_dir}: {err}; set output.dir to a writable folder"
            ) from err
        return run_dir
    raise FileExistsError(f"too many runs started this second under {base}")


def attach_log_file(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    return handler


def attach_lora(model: Any, recipe: Recipe) -> Any:
    cfg = recipe.lora
    lora = LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=cfg.target_modules,
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lora)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("LoRA r=%d on %s: %.2fM trainable parameters", cfg.r, cfg.target_modules, trainable / 1e6)
    if autocast_everywhere(recipe) and copy_refusal(model) is None:
        # Every stage's training pass runs under bf16 autocast, which never reads a frozen weight's fp32 bits;
        # rollouts sample from a merged bf16 copy (rounded dithered) and evaluation from a merged fp32 one.
        # (An adapter no merged copy can hold is run directly by evaluation, so its base keeps fp32.)
        held = hold_frozen_linears(model, torch.bfloat16)
        if held:
            log.info("LoRA base weights held in bf16, as autocast uses them: %.1fM weights", held / 1e6)
    return model


def autocast_everywhere(recipe: Recipe) -> bool:
    """Whether every stage trains under bf16 autocast (the device's default or grpo.bf16, stage by stage)."""
    return all(trainer_precision(p.recipe.grpo.get("bf16"))["bf16"] for p in plan_run(recipe))


@dataclasses.dataclass
class HeldOut:
    """What a run is evaluated on: the test problems it reports, the validation problems it watches during
    training, and each evaluation suite's task and test problems."""

    task: Task
    test: list[Example]
    validation: list[Example]
    suites: dict[str, tuple[Task, list[Example]]]


def held_out(task: Task, recipe: Recipe, plan: list[PlannedStage] | None = None) -> HeldOut:
    """The run's evaluation sets, drawn before any model loads so that a split too small for the recipe
    fails first. Validation is drawn only when a stage evaluates during training. `plan`: the run's
    (`plan_run(recipe)`, computed here when not given)."""
    stages = [p.recipe.eval for p in (plan_run(recipe) if plan is None else plan)]
    watched = max((section.every_n for section in stages if section.every), default=0)
    try:
        test = task.dataset("test", recipe.eval.n)
        validation = task.dataset("validation", watched) if watched else []
    except ValueError as err:
        raise RecipeError(f"task {recipe.task.name!r}: {err}") from err
    suites = {}
    for suite in recipe.eval.suites:
        suite_task = task_of(recipe, suite.params)
        try:
            suites[suite.name] = (suite_task, suite_task.dataset("test", suite.n or recipe.eval.n))
        except ValueError as err:
            raise RecipeError(f"eval.suites {suite.name!r}: {err}") from err
    return HeldOut(task, test, validation, suites)


def run_evals(
    model: Any, tokenizer: Any, held: HeldOut, recipe: Recipe, run_dir: Path, label: str
) -> tuple[EvalResult, dict[str, EvalResult]]:
    """Evaluate on the test split and every suite; save each as eval_<label>[.<suite>].json."""
    result = run_eval(model, tokenizer, held.task, held.test, recipe, run_dir / f"eval_{label}.json", label)
    suites = {
        name: run_eval(model, tokenizer, task, rows, recipe, run_dir / f"eval_{label}.{name}.json", f"{label} {name}")
        for name, (task, rows) in held.suites.items()
    }
    return result, suites


def run_eval(
    model: Any, tokenizer: Any, task: Any, eval_set: list, recipe: Recipe, path: Path, label: str
) -> EvalResult:
    result = evaluate_recipe(model, tokenizer, task, eval_set, recipe, label=f"eval {label}")
    result.save(path)
    log.info(
        "eval %s: accuracy %.1f%% (± %.1f), format %.1f%% on %d test problems (%.0f s)",
        label,
        100 * result.accuracy,
        100 * standard_error(result.accuracy, result.n),
        100 * result.format_rate,
        result.n,
        result.seconds,
    )
    return result


def save_model(model: Any, tokenizer: Any, run_dir: Path, recipe: Recipe) -> Path:
    out = run_dir / ("adapter" if recipe.lora.enabled else "model")
    return disk.save_pretrained(model, tokenizer, out, f"the trained {out.name}")


def write_summary(
    run_dir: Path, records: list[dict[str, Any]], seconds: float, notes: list[str] | None = None, world_size: int = 1
) -> None:
    """summary.json: the stages in order (`before` first), the same rows as evals by name, timings."""
    first_grpo = next((i for i, row in enumerate(records) if row["kind"] == "grpo"), None)
    keys = ("split", "accuracy", "stderr", "format_rate", "n", "suites")
    summary = {
        "stages": records,
        "evals": {
            **{row["name"]: {k: row[k] for k in keys if k in row} for row in records},
            "after": {k: records[-1][k] for k in keys if k in records[-1]},
        },
        # What the GRPO stages added over the evaluation just before the first of them.
        "grpo_gain": records[-1]["accuracy"] - records[first_grpo - 1]["accuracy"] if first_grpo else None,
        "seconds": {
            **{row["name"]: round(60 * row["minutes"], 1) for row in records if row["kind"] != "eval"},
            "total": round(seconds, 1),
        },
        "minutes": round(seconds / 60, 2),
        "data_notes": notes or [],
        "world_size": world_size,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def format_table(records: list[dict[str, Any]]) -> str:
    """The stages as a table: greedy test-split accuracy (± one standard error) and format after each,
    what GRPO added, each evaluation suite's accuracy in a column of its own, and how many problems each
    stage fixed and broke against the evaluation before it (when both saved per-problem results)."""
    suites = list(dict.fromkeys(name for row in records for name in row.get("suites", {})))
    width = max([10, *(len(name) + 1 for name in suites)])
    head = "".join(f" {name:>{width}}" for name in suites)
    lines = [
        f"{'stage':<14} {'kind':<5} {'test':>15} {'gain':>7} {'format':>8}{head} {'minutes':>8}   (greedy accuracy)"
    ]
    for row in records:
        gain = f"{100 * row['gain']:+6.1f}" if "gain" in row else ""
        accuracy = f"{100 * row['accuracy']:.1f}% ± {100 * row.get('stderr', 0):.1f}"
        cells = "".join(
            f" {100 * row['suites'][name]['accuracy']:>{width - 1}.1f}%"
            if name in row.get("suites", {})
            else " " * (width + 1)
            for name in suites
        )
        change = f"  fixed {row['fixed']}, broke {row['broke']} (z {row['z']:.1f})" if "fixed" in row else ""
        lines.append(
            f"{row['name']:<14} {row['kind']:<5} {accuracy:>15} {gain:>7} {100 * row['format_rate']:>7.1f}%{cells} "
            f"{row['minutes'] + row.get('eval_minutes', 0):>8.1f}   n={row['n']}{change}"
        )
    return "\n".join(lines)
