"""Rules that span sections: task and reward names, stage plans, what each stage kind needs."""

from __future__ import annotations

from grpokit.errors import RecipeError
from grpokit.recipe.schema import Recipe
from grpokit.recipe.stages import plan_stages, stage_recipe
from grpokit.recipe.trackers import check_report_to
from grpokit.recipe.trl_args import build_grpo_config, check_grpo_values
from grpokit.rewards import REWARDS, make_reward
from grpokit.sandbox import client as sandbox
from grpokit.sandbox import confine
from grpokit.tasks import task_of


def validate_recipe(recipe: Recipe) -> None:
    sections = (recipe.model, recipe.lora, recipe.eval, recipe.output, recipe.launch, recipe.train_pass, recipe.sandbox)
    for section in (*sections, recipe.rollout):
        section.validate()
    if recipe.grpo.get("report_to") is not None:  # sft stages report there too, and check no other grpo key
        check_report_to(recipe.grpo["report_to"], recipe.source)
    names = [stage.name for stage in recipe.stages]
    if len(set(names)) < len(names):
        raise RecipeError(f"stage names must differ: {names}")
    for stage in recipe.stages:
        stage.validate()
    if recipe.stages and recipe.cold_start.enabled:
        raise RecipeError("cold_start.enabled and stages: both: make the cold start an sft stage in stages:")
    for stage in plan_stages(recipe):
        try:
            _validate_stage(stage_recipe(recipe, stage), stage.kind)
        except RecipeError as err:
            raise RecipeError(f"stage {stage.name!r}: {err}" if recipe.stages else str(err)) from err


def _validate_downsampling(recipe: Recipe) -> None:
    keep, grpo = recipe.dynamic_sampling.downsample_to, recipe.grpo
    drawn = int(grpo.get("num_generations", 8))  # TRL's default
    if keep >= drawn:
        raise RecipeError(
            f"dynamic_sampling.downsample_to={keep} keeps every one of grpo.num_generations={drawn} completions; "
            f"draw more (e.g. grpo.num_generations: {2 * keep}) or leave downsample_to out"
        )
    if recipe.launch.processes > 1:
        raise RecipeError("dynamic_sampling.downsample_to runs in one process; set launch.processes: 1 or leave it out")
    if grpo.get("multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
        raise RecipeError(
            "dynamic_sampling.downsample_to computes advantages from the summed reward; set "
            "grpo.multi_objective_aggregation: sum_then_normalize, or leave downsample_to out"
        )


def _validate_stage(recipe: Recipe, kind: str) -> None:
    for section in (recipe.task, recipe.cold_start, recipe.dynamic_sampling, recipe.curriculum):
        section.validate()
    with sandbox.configured(recipe.sandbox):  # a gold checked in the sandbox is checked as the run will
        _validate_task_and_rewards(recipe, kind)


def _validate_task_and_rewards(recipe: Recipe, kind: str) -> None:
    task = task_of(recipe)
    for suite in recipe.eval.suites:
        try:
            task_of(recipe, suite.params)
        except RecipeError as err:
            raise RecipeError(f"eval.suites {suite.name!r}: {err}") from err
    missing = confine.missing_here() if task.uses_sandbox and not recipe.sandbox.allow_unconfined else []
    if missing:
        raise RecipeError(
            f"task {task.name!r} scores in the sandbox worker, which lacks {', '.join(missing)} on this machine "
            "(see grpokit env); install them, or set sandbox.allow_unconfined: true to score without"
        )
    _validate_prefill(recipe)
    # A task's first demonstration, read only where one is needed (None: the task writes none).
    wants = kind == "sft" or recipe.dynamic_sampling.guide
    try:  # a task that reads its data on first use (a hub data set) reads it here
        demonstration = task.demonstration(task.example("train", 0)) if wants else None
    except ValueError as err:
        raise RecipeError(f"task {task.name!r}: {err}") from err
    hint = task.demonstration_hint() if wants and demonstration is None else ""
    hint = f"; {hint}" if hint else ""
    if kind == "sft":
        if demonstration is None:
            raise RecipeError(f"task {task.name!r} cannot write demonstrations, so it has no sft stage{hint}")
        if recipe.task.prefill_think and not demonstration.lstrip().startswith(recipe.task.tags.think_open):
            raise RecipeError(
                f"task.prefill_think: task {task.name!r} writes demonstrations that do not open with "
                f"{recipe.task.tags.think_open}, so they cannot follow the prefilled tag; drop the sft stage "
                "or task.prefill_think"
            )
        return
    check_grpo_values(recipe.grpo, recipe.source)  # first: the checks below read grpo values
    curriculum, sampling = recipe.curriculum, recipe.dynamic_sampling
    names = [spec.name for spec in recipe.rewards]
    if curriculum.param is not None:
        for value in curriculum.levels:
            task_of(recipe, {curriculum.param: value})
        if curriculum.reward not in names:
            raise RecipeError(f"curriculum.reward={curriculum.reward!r} is not one of the stage's rewards")
    if sampling.retry and sampling.success_reward not in names:
        raise RecipeError(
            f"dynamic_sampling.success_reward={sampling.success_reward!r} is not one of the stage's rewards "
            f"({', '.join(names)}); name the one that says a completion is right"
        )
    if sampling.guide and demonstration is None:
        raise RecipeError(
            f"dynamic_sampling.guide: task {task.name!r} cannot write demonstrations; set guide: false{hint}"
        )
    if sampling.guide and recipe.train_pass.sampler_logprobs:
        raise RecipeError(
            "dynamic_sampling.guide: a demonstration row has no sampler log-probabilities; set "
            "train_pass.sampler_logprobs: false, or guide: false"
        )
    if recipe.train_pass.importance_sampling_cap is not None and (
        recipe.grpo.get("use_vllm") or recipe.rollout.engine != "grpokit"
    ):
        raise RecipeError(
            "train_pass.importance_sampling_cap needs grpokit's sampler (rollout.engine: grpokit), which returns the "
            "log-probabilities it drew with; with vLLM use TRL's grpo.vllm_importance_sampling_mode: token_truncate "
            "and grpo.vllm_importance_sampling_clip_max instead, and leave the cap out"
        )
    if recipe.rollout.final_temperature is not None and recipe.grpo.get("use_vllm"):
        raise RecipeError(
            "rollout.final_temperature: vLLM samples at the temperature it was started with, so its rollouts and "
            "the loss would disagree; leave final_temperature out, or set grpo.use_vllm: false"
        )
    if sampling.enabled and recipe.launch.processes > 1:
        raise RecipeError("dynamic_sampling runs in one process; set launch.processes: 1 or turn it off")
    if sampling.downsample_to is not None:
        _validate_downsampling(recipe)
    if not recipe.rewards:
        raise RecipeError(
            f"the recipe has no rewards; add e.g. rewards: [{{name: format}}, {{name: correctness}}] "
            f"(known: {', '.join(sorted(REWARDS))})"
        )
    for index, spec in enumerate(recipe.rewards):
        spec.validate()
        try:  # built once here (rewards are cheap to build), so a bad param fails before any model loads
            make_reward(spec.name, task, spec.params)
        except RecipeError:
            raise
        except ValueError as err:
            raise RecipeError(f"rewards.{index} ({spec.name}): {err}") from err
    if "reward_weights" in recipe.grpo:
        raise RecipeError("set reward weights as rewards[*].weight, not grpo.reward_weights")
    build_grpo_config(recipe, output_dir="unused", measure_precision=False)


def _validate_prefill(recipe: Recipe) -> None:
    switches = recipe.chat_template_kwargs  # a malformed value raises here, before any model loads
    if recipe.task.prefill_think and switches.get("enable_thinking") is False:
        raise RecipeError(
            "task.prefill_think with grpo.chat_template_kwargs.enable_thinking: false: the template then writes "
            f"an empty, closed thought before the prefilled {recipe.task.tags.think_open}; drop one of the two"
        )
