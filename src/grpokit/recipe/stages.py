"""The stages a recipe runs, and the recipe as each stage sees it."""

from __future__ import annotations

import dataclasses

from grpokit.recipe.schema import Recipe, StageSection


def plan_stages(recipe: Recipe) -> list[StageSection]:
    """The stages a recipe runs, in order: its `stages:` list, or the single-stage recipe's cold start
    (when enabled) and GRPO stage."""
    if recipe.stages:
        return list(recipe.stages)
    plan = [StageSection(name="cold_start", kind="sft")] if recipe.cold_start.enabled else []
    return [*plan, StageSection(name="grpo", kind="grpo")]


def stage_recipe(recipe: Recipe, stage: StageSection) -> Recipe:
    """The recipe as one stage sees it: its rewards, task parameters, steps, learning rate and evaluation
    cadence (`eval.every`) in place."""
    task = dataclasses.replace(recipe.task, params={**recipe.task.params, **stage.task_params})
    default_every = recipe.eval.every if stage.kind == "grpo" else 0  # sft stages evaluate only when asked
    every = default_every if stage.eval_every is None else stage.eval_every
    recipe = dataclasses.replace(recipe, eval=dataclasses.replace(recipe.eval, every=every))
    if stage.kind == "sft":
        cold = dataclasses.replace(
            recipe.cold_start,
            enabled=True,
            steps=stage.steps or recipe.cold_start.steps,
            learning_rate=stage.learning_rate or recipe.cold_start.learning_rate,
            examples=stage.examples or recipe.cold_start.examples,
            batch_size=stage.batch_size or recipe.cold_start.batch_size,
        )
        return dataclasses.replace(recipe, task=task, cold_start=cold, stages=[])
    grpo = {**recipe.grpo, **stage.grpo}
    if stage.steps:
        grpo["max_steps"] = stage.steps
    if stage.learning_rate:
        grpo["learning_rate"] = stage.learning_rate
    return dataclasses.replace(
        recipe,
        task=task,
        grpo=grpo,
        rewards=list(stage.rewards) if stage.rewards is not None else recipe.rewards,
        dynamic_sampling=stage.dynamic_sampling or recipe.dynamic_sampling,
        curriculum=stage.curriculum or recipe.curriculum,
        stages=[],
    )
