"""`grpokit train`: seed, model, data, rewards, evaluation before, cold start, GRPO, save, evaluation after.

Run directory (one per run, never overwritten):
    recipe.yaml            the resolved recipe, as run
    train.log              everything logged, TRL's and transformers' messages included
    metrics.jsonl          one JSON line per logging step (stage, step, TRL's metrics)
    trainer_state.json     TRL's own log history of the GRPO stage
    eval_before.json       greedy held-out evaluation of the untouched model
    eval_cold_start.json   ... after the cold start (when the recipe has one)
    eval_after.json        ... after GRPO
    adapter/ or model/     the trained LoRA adapter (or full model) and tokenizer
    summary.json           the before/after numbers and timings
    curves.png             rewards over GRPO steps and the before/after bars
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from grpokit import cold_start, console, disk, launch, report, runs
from grpokit.callbacks import PROBE_ENV, MetricsLog, PeriodicEval, RankProbe
from grpokit.checkpoints import (
    StopOnSignal,
    TrainingInterrupted,
    checkpoint_step,
    complete_checkpoints,
    truncate_metrics,
)
from grpokit.config import Recipe, RecipeError, build_grpo_config
from grpokit.evaluate import EvalResult, evaluate_recipe
from grpokit.health import HealthMonitor
from grpokit.models import load_model
from grpokit.rewards import make_reward, to_trl
from grpokit.tasks import build_task
from grpokit.tasks.base import render_prompt, think_prefilled

log = logging.getLogger(__name__)


def main(recipe: Recipe, resume: Path | str | None = None, callbacks: Sequence[Any] = ()) -> Path:
    """Train `recipe` in a new run directory, or continue `resume` (a run directory) from its last checkpoint.

    `callbacks` are extra transformers TrainerCallbacks for the GRPO stage.
    """
    import transformers

    from grpokit.trainer import GrpoTrainer

    main_rank = launch.is_main()
    if resume:
        run_dir, checkpoint = prepare_resume(recipe, Path(resume), truncate=main_rank)
    elif os.environ.get(launch.RUN_DIR_ENV):  # one of several processes: the launcher made the directory
        run_dir, checkpoint = Path(os.environ[launch.RUN_DIR_ENV]), None
        run_dir.mkdir(parents=True, exist_ok=True)
    else:
        run_dir, checkpoint = make_run_dir(recipe), None
    if main_rank:
        runs.mark_running(run_dir, recipe, resumed=checkpoint is not None)
    root = logging.getLogger()
    log_file = attach_log_file(run_dir / "train.log") if main_rank else logging.NullHandler()
    previous_level = root.level
    root.setLevel(min(previous_level, logging.INFO))  # train.log keeps INFO even when the caller set less
    try:
        if checkpoint is not None:
            log.info("resuming %s from %s", run_dir, checkpoint.name)
        elif main_rank:
            (run_dir / "recipe.yaml").write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False), encoding="utf-8")
            log.info("run directory: %s", run_dir)
        transformers.set_seed(recipe.seed)
        started = time.perf_counter()
        stages: dict[str, float] = {}

        task = build_task(recipe.task.name, recipe.task.params)  # bad data fails before the model loads
        try:
            eval_set = task.dataset("eval", recipe.eval.n)
        except ValueError as err:
            raise RecipeError(f"task {recipe.task.name!r}: {err}") from err
        model, tokenizer = load_model(recipe.model.name, recipe.model.dtype, recipe.model.revision)
        train_data = build_train_dataset(task, tokenizer, recipe)
        for note in task.notes():
            log.warning("data: %s", note)
        prefilled = think_prefilled(train_data[0]["prompt"])

        results = saved_results(run_dir) if checkpoint else {}
        if "before" not in results and main_rank:
            results["before"] = run_eval(model, tokenizer, task, eval_set, recipe, run_dir, "before")
            stages["eval_before"] = results["before"].seconds

        if recipe.lora.enabled:
            model = attach_lora(model, recipe)
        metrics = MetricsLog(run_dir / "metrics.jsonl")
        if recipe.cold_start.enabled and checkpoint is None:  # a GRPO checkpoint already holds its result
            t0 = time.perf_counter()
            metrics.stage = "cold_start"
            stage_callbacks = [metrics.callback(), *console.callbacks("cold_start")]
            model = cold_start.run(model, tokenizer, task, recipe, run_dir / "cold_start", stage_callbacks)
            stages["cold_start"] = time.perf_counter() - t0
            if main_rank:
                save_model(model, tokenizer, run_dir / "cold_start", recipe)
                results["cold_start"] = run_eval(model, tokenizer, task, eval_set, recipe, run_dir, "cold_start")

        rewards = [
            to_trl(
                spec.name,
                make_reward(spec.name, task, spec.params),
                prefilled,
                run_dir / "reward_errors.jsonl",
                spec.timeout or None,
            )
            for spec in recipe.rewards
        ]
        args = build_grpo_config(recipe, run_dir / "grpo")
        metrics.stage = "grpo"
        if main_rank:
            metrics.health = HealthMonitor(
                window=5, max_completion_length=args.max_completion_length, path=run_dir / "warnings.jsonl"
            )
        stop = StopOnSignal()
        trainer = GrpoTrainer(
            model=model,
            reward_funcs=rewards,
            args=args,
            train_dataset=train_data,
            processing_class=tokenizer,
            callbacks=[metrics.callback(), stop.callback(), *console.callbacks("grpo"), *callbacks],
            rollout_engine=recipe.rollout.engine,
            stop_texts=("</answer>",) if recipe.rollout.stop_at_answer else (),
            rollout_copy=recipe.rollout.merged_copy,
        )
        console.adopt(trainer)
        if os.environ.get(PROBE_ENV):
            trainer.add_callback(RankProbe(trainer, Path(os.environ[PROBE_ENV])).callback())
        if recipe.eval.every and main_rank:
            periodic = PeriodicEval(trainer, tokenizer, task, eval_set[: recipe.eval.every_n], recipe, run_dir)
            trainer.add_callback(periodic.callback())
        t0 = time.perf_counter()
        with stop:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        stages["grpo"] = time.perf_counter() - t0
        if stop.requested:
            raise TrainingInterrupted(
                f"{stop.requested}: stopped after step {trainer.state.global_step} with a checkpoint in "
                f"{run_dir / 'grpo'}; continue with: grpokit train {recipe.source} --resume {run_dir}"
            )
        if not main_rank:
            return run_dir
        trainer.state.save_to_json(str(run_dir / "trainer_state.json"))
        model = trainer.model
        save_model(model, tokenizer, run_dir, recipe)

        results["after"] = run_eval(model, tokenizer, task, eval_set, recipe, run_dir, "after")
        stages["total"] = time.perf_counter() - started
        write_summary(run_dir, results, stages, task.notes(), launch.world_size())
        log.info("\n%s", format_table(results, stages))
        log.info("report: %s (open it in a browser; curves.png beside it)", report.main(run_dir))
        runs.mark_finished(run_dir)
        return run_dir
    except BaseException as err:
        if main_rank:
            runs.mark_stopped(run_dir, err)  # interrupted with a checkpoint, or failed with the error
        raise
    finally:
        root.removeHandler(log_file)
        root.setLevel(previous_level)
        log_file.close()


def prepare_resume(recipe: Recipe, run_dir: Path, truncate: bool = True) -> tuple[Path, Path]:
    """Check that `run_dir` is this recipe's run with a complete checkpoint; return it and the checkpoint."""
    saved_path = run_dir / "recipe.yaml"
    if not saved_path.is_file():
        raise RecipeError(f"cannot resume {run_dir}: it has no recipe.yaml, so it is not a grpokit run directory")
    saved = yaml.safe_load(saved_path.read_text(encoding="utf-8"))
    current = recipe.to_dict()
    changed = sorted(k for k in set(saved) | set(current) if k != "output" and saved.get(k) != current.get(k))
    if changed:
        raise RecipeError(
            f"cannot resume {run_dir}: the recipe's {', '.join(changed)} section changed since the run started; "
            "resume with the same recipe and overrides, or start a new run"
        )
    found = complete_checkpoints(run_dir / "grpo")
    if not found:
        raise RecipeError(
            f"cannot resume {run_dir}: it has no complete GRPO checkpoint (runs save every output.save_every "
            "steps and on Ctrl-C); start a new run"
        )
    checkpoint = found[-1]
    dropped = truncate_metrics(run_dir / "metrics.jsonl", "grpo", checkpoint_step(checkpoint)) if truncate else 0
    if dropped:
        log.info("dropped %d metric rows logged after %s: those steps run again", dropped, checkpoint.name)
    return run_dir, checkpoint


def saved_results(run_dir: Path) -> dict[str, EvalResult]:
    out = {}
    for label in ("before", "cold_start"):
        path = run_dir / f"eval_{label}.json"
        if path.is_file():
            out[label] = EvalResult(**json.loads(path.read_text(encoding="utf-8")))
    return out


def build_train_dataset(task: Any, tokenizer: Any, recipe: Recipe) -> Any:
    """GRPO prompts as text rendered by grpokit, so training and evaluation see the same prompt."""
    from datasets import Dataset

    rows = task.dataset("train", recipe.task.train_size, distinct=False)
    return Dataset.from_list(
        [{**row, "prompt": render_prompt(tokenizer, task.messages(row, recipe.task.system_prompt))} for row in rows]
    )


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
    from peft import LoraConfig, get_peft_model

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
    return model


def run_eval(
    model: Any, tokenizer: Any, task: Any, eval_set: list, recipe: Recipe, run_dir: Path, label: str
) -> EvalResult:
    result = evaluate_recipe(model, tokenizer, task, eval_set, recipe, label=f"eval {label}")
    result.save(run_dir / f"eval_{label}.json")
    log.info(
        "eval %s: accuracy %.1f%%, format %.1f%% on %d held-out problems (%.0f s)",
        label,
        100 * result.accuracy,
        100 * result.format_rate,
        result.n,
        result.seconds,
    )
    return result


def save_model(model: Any, tokenizer: Any, run_dir: Path, recipe: Recipe) -> Path:
    out = run_dir / ("adapter" if recipe.lora.enabled else "model")
    return disk.save_pretrained(model, tokenizer, out, f"the trained {out.name}")


def write_summary(
    run_dir: Path,
    results: dict[str, EvalResult],
    stages: dict[str, float],
    notes: list[str] | None = None,
    world_size: int = 1,
) -> None:
    summary = {
        "evals": {k: {"accuracy": r.accuracy, "format_rate": r.format_rate, "n": r.n} for k, r in results.items()},
        "seconds": stages,
        "data_notes": notes or [],
        "world_size": world_size,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def format_table(results: dict[str, EvalResult], stages: dict[str, float]) -> str:
    lines = [f"{'stage':<12} {'accuracy':>9} {'format':>8} {'tokens':>7}   (greedy, held-out)"]
    for name, r in results.items():
        lines.append(
            f"{name:<12} {100 * r.accuracy:>8.1f}% {100 * r.format_rate:>7.1f}% "
            f"{r.mean_completion_tokens:>7.1f}   n={r.n}"
        )
    timing = ", ".join(f"{k} {v / 60:.1f} min" for k, v in stages.items())
    return "\n".join(lines) + f"\nwall time: {timing}"
