"""A GRPO stage: the rewards, the trainer and its schedules, built from the recipe as the stage sees it."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset

from grpokit.eval.evaluate import stop_texts
from grpokit.recipe.schema import Recipe
from grpokit.recipe.trl_args import build_grpo_config
from grpokit.rewards import make_reward, to_trl
from grpokit.runs.checkpoints import StopOnSignal
from grpokit.stages import launch
from grpokit.stages.callbacks import PROBE_ENV, MetricsLog, PeriodicEval, RankProbe
from grpokit.stages.dynamic_sampling import AdaptiveWeights, Curriculum
from grpokit.stages.health import HealthMonitor
from grpokit.stages.sft import opened_by_prompt
from grpokit.stages.trainer import GrpoOptions, GrpoTrainer
from grpokit.tasks import task_of
from grpokit.tasks.base import Task, render_prompt, think_prefilled


def build_trainer(
    stage: str,
    model: Any,
    tokenizer: Any,
    recipe: Recipe,
    run_dir: Path,
    eval_set: list,
    metrics: MetricsLog,
    stop: StopOnSignal,
    callbacks: Sequence[Any] = (),
) -> Any:
    """The stage's GrpoTrainer, writing checkpoints to `run_dir/<stage>`."""
    task = task_of(recipe)
    train_data = build_train_dataset(task, tokenizer, recipe)
    prefilled = think_prefilled(train_data[0]["prompt"], task.tags)
    rewards = [
        to_trl(
            spec.name,
            make_reward(spec.name, task, spec.params),
            prefilled,
            run_dir / "reward_errors.jsonl",
            spec.timeout or None,
            spec.on_error,
            task.tags,
        )
        for spec in recipe.rewards
    ]
    args = build_grpo_config(recipe, run_dir / stage)
    if launch.is_main():
        metrics.health = HealthMonitor(
            window=5,
            max_completion_length=args.max_completion_length,
            path=run_dir / "warnings.jsonl",
            group_size=args.num_generations,
        )
    if hasattr(model, "peft_config") and "ref" in model.peft_config:
        model.delete_adapter("ref")  # an earlier stage's reference: TRL copies this stage's start as "ref"
    trainer = GrpoTrainer(
        model=model,
        reward_funcs=rewards,
        args=args,
        train_dataset=_level_data(recipe, tokenizer, 0) if recipe.curriculum.param else train_data,
        processing_class=tokenizer,
        callbacks=[metrics.callback(), stop.callback(), *callbacks],
        options=trainer_options(recipe, task, tokenizer, args.max_steps),
    )
    if os.environ.get(PROBE_ENV):
        trainer.add_callback(RankProbe(trainer, Path(os.environ[PROBE_ENV])).callback())
    if recipe.eval.every and launch.is_main():
        periodic = PeriodicEval(trainer, tokenizer, task, eval_set[: recipe.eval.every_n], recipe, run_dir, stage)
        trainer.add_callback(periodic.callback())
    return trainer


def build_train_dataset(task: Any, tokenizer: Any, recipe: Recipe) -> Any:
    """GRPO prompts as text rendered by grpokit, so training and evaluation see the same prompt."""
    rows = task.dataset("train", recipe.task.train_size, distinct=False)
    kwargs, prefill = recipe.chat_template_kwargs, recipe.task.prefill
    return Dataset.from_list(
        [
            {**row, "prompt": render_prompt(tokenizer, task.messages(row, recipe.task.system_prompt), kwargs, prefill)}
            for row in rows
        ]
    )


def trainer_options(recipe: Recipe, task: Task, tokenizer: Any, steps: int) -> GrpoOptions:
    """What GrpoTrainer adds to TRL's trainer, as the recipe sets it: the rollout engine, the training
    pass, dynamic sampling, curriculum and adaptive weights (`make bench` hands its grpokit the same)."""
    dynamic = recipe.dynamic_sampling
    return GrpoOptions(
        rollout_engine=recipe.rollout.engine,
        stop_texts=stop_texts(recipe),
        rollout_copy=recipe.rollout.merged_copy,
        shared_prefix=recipe.train_pass.shared_prefix,
        micro_batch_rows=recipe.train_pass.micro_batch_rows,
        sampler_logprobs=recipe.train_pass.sampler_logprobs,
        importance_sampling_cap=recipe.train_pass.importance_sampling_cap,
        temperature_schedule=_temperature_schedule(recipe, steps),
        dynamic_max_extra=dynamic.max_extra if dynamic.enabled else None,
        dynamic_replay=dynamic.replay if dynamic.enabled else 0,
        dynamic_retry=dynamic.retry if dynamic.enabled else 0,
        retry_reward=dynamic.success_reward,
        dynamic_upfront=dynamic.enabled and dynamic.upfront,
        downsample_to=dynamic.downsample_to,
        guide=_guide(task) if dynamic.enabled and dynamic.guide else None,
        curriculum=_curriculum(recipe, tokenizer),
        adaptive=_adaptive(recipe),
    )


def _temperature_schedule(recipe: Recipe, steps: int) -> tuple[float, int, int] | None:
    """(final temperature, the step it starts to move, the step it arrives) from the rollout section, or
    None for a constant one."""
    cfg = recipe.rollout
    if cfg.final_temperature is None:
        return None
    return cfg.final_temperature, cfg.temperature_from_step, cfg.temperature_steps or max(1, steps)


def _level_data(recipe: Recipe, tokenizer: Any, level: int) -> Any:
    """GRPO prompts of the task with the curriculum's parameter at `level`."""
    cfg = recipe.curriculum
    params = {**recipe.task.params, cfg.param: cfg.levels[level]}
    task = task_of(recipe, params)
    return build_train_dataset(
        task, tokenizer, dataclasses.replace(recipe, task=dataclasses.replace(recipe.task, params=params))
    )


def _guide(task: Task) -> Callable[[dict[str, Any]], str]:
    """dynamic_sampling.guide's demonstration for a prompt row, as the completion of its prompt."""

    def guide(row: dict[str, Any]) -> str:
        text = task.demonstration(row)
        if text is None:
            raise ValueError(f"task {task.name!r} wrote no demonstration for {row.get('prompt')!r}")
        prompt = row.get("prompt")
        return opened_by_prompt(text, prompt, task.tags) if isinstance(prompt, str) else text

    return guide


def _curriculum(recipe: Recipe, tokenizer: Any) -> tuple[Curriculum, list[Any], str] | None:
    cfg = recipe.curriculum
    if cfg.param is None:
        return None
    levels = [_level_data(recipe, tokenizer, i) for i in range(len(cfg.levels))]
    return Curriculum(cfg.param, cfg.levels, cfg.threshold, cfg.window), levels, cfg.reward


def _adaptive(recipe: Recipe) -> AdaptiveWeights | None:
    specs = {spec.name: spec.adaptive for spec in recipe.rewards if spec.adaptive is not None}
    if not specs:
        return None
    return AdaptiveWeights(specs, {spec.name: spec.weight for spec in recipe.rewards})
