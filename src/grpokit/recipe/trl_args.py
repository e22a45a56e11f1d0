"""The `grpo:` section as TRL's `GRPOConfig`: types and choices as TRL declares them, ranges on top."""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from pathlib import Path
from typing import Any

from grpokit.errors import RecipeError
from grpokit.kernels.precision import trainer_precision
from grpokit.recipe.schema import Recipe
from grpokit.recipe.stages import plan_stages, stage_recipe
from grpokit.recipe.trackers import check_report_to, report_to, run_name
from grpokit.registry import did_you_mean


def build_grpo_config(recipe: Recipe, output_dir: str | Path, measure_precision: bool = True):
    """TRL's GRPOConfig from the recipe's `grpo:` section; errors name the bad key.

    Without `bf16` in the recipe, `measure_precision` picks it where it measures faster
    (grpokit.kernels.precision: it times a matmul on a CPU); `measure_precision=False` builds the config in
    fp32 instead, as validation does, so that loading a recipe times nothing.
    """
    # slow import: trl loads torch and transformers; a recipe module imports without them
    from trl import GRPOConfig

    check_grpo_values(recipe.grpo, recipe.source)
    if "output_dir" in recipe.grpo:
        raise RecipeError("grpo.output_dir is set by grpokit: runs go to output.dir/<name>/<timestamp>")
    grpo = dict(recipe.grpo)
    save_every, keep = checkpoint_cadence(grpo, recipe.output.save_every, recipe.output.keep)
    for key in LEGACY_SAVE_KEYS:
        grpo.pop(key, None)
    # TRL defaults bf16 to True, which fails on a CPU and is slower than fp32 on CPUs without bf16 units.
    bf16 = grpo.get("bf16")
    if bf16 is None and not measure_precision:
        bf16 = False
    kwargs = {"seed": recipe.seed, **trainer_precision(bf16), **grpo}
    kwargs["report_to"] = report_to(grpo)  # unset or null: TensorBoard when installed
    kwargs.setdefault("run_name", run_name(recipe.output.name, output_dir))
    kwargs["save_strategy"] = "steps" if save_every else "no"
    kwargs["save_steps"] = save_every or 500
    kwargs["save_total_limit"] = keep
    kwargs["reward_weights"] = [spec.weight for spec in recipe.rewards]
    try:
        return GRPOConfig(output_dir=str(output_dir), **kwargs)
    except (ValueError, TypeError) as err:
        raise RecipeError(f"bad value in the grpo section of {recipe.source}: {err}") from err


LEGACY_SAVE_KEYS = ("save_strategy", "save_steps", "save_total_limit")


def checkpoint_cadence(grpo: dict[str, Any], save_every: int, keep: int) -> tuple[int, int]:
    """(output.save_every, output.keep) once TRL's own keys in `grpo` (`save_strategy`, `save_steps`,
    `save_total_limit`, from recipes written before output.save_every) are read: they still work and say
    the same thing.

    >>> checkpoint_cadence({"save_steps": 5, "save_total_limit": 3}, 10, 2), checkpoint_cadence({}, 10, 2)
    ((5, 3), (10, 2))
    >>> checkpoint_cadence({"save_strategy": "no", "save_steps": 5}, 10, 2)
    (0, 2)
    """
    if not set(LEGACY_SAVE_KEYS) & set(grpo):
        return save_every, keep
    strategy = grpo.get("save_strategy", "steps")
    save_every = 0 if strategy == "no" else int(grpo.get("save_steps", save_every))
    return save_every, int(grpo.get("save_total_limit", keep))


def measure_precision(recipe: Recipe) -> None:
    """Settle bf16 for every GRPO stage that leaves it to the machine (`grpokit.kernels.precision` measures
    once per process and keeps the answer). A run calls it before it seeds: the measurement draws random
    matrices, and loading a recipe measures nothing."""
    for stage in plan_stages(recipe):
        if stage.kind == "grpo":
            trainer_precision(stage_recipe(recipe, stage).grpo.get("bf16"))


# Ranges TRL leaves to fail late (or never): key -> (test, what the value must be).
GRPO_RANGES: dict[str, tuple[Any, str]] = {
    "learning_rate": (lambda v: v > 0, "a number > 0"),
    "temperature": (lambda v: v > 0, "> 0 (sampling needs a temperature above zero)"),
    "beta": (lambda v: v >= 0, ">= 0 (0 turns the KL term off)"),
    "epsilon": (lambda v: v > 0, "> 0"),
    "num_generations": (lambda v: v >= 2, "at least 2 generations (a group needs two completions to compare)"),
    "max_completion_length": (lambda v: v >= 1, ">= 1"),
    "max_prompt_length": (lambda v: v >= 1, ">= 1"),
    "per_device_train_batch_size": (lambda v: v >= 1, ">= 1"),
    "gradient_accumulation_steps": (lambda v: v >= 1, ">= 1"),
    "num_iterations": (lambda v: v >= 1, ">= 1"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "top_k": (lambda v: v >= 0, ">= 0 (0: no top-k)"),
    "logging_steps": (lambda v: v > 0, "> 0"),
}


def check_grpo_values(grpo: dict[str, Any], source: str = "the recipe") -> None:
    """Every `grpo:` key is a field of TRL's GRPOConfig, of the type TRL declares (and among its choices
    where it lists them), and inside the range GRPO needs; the message names the key, the value and the fix.
    TRL's config class does not check its own types, so a bad value would otherwise fail deep in a run."""
    # slow import: trl loads torch and transformers; a recipe module imports without them
    from trl import GRPOConfig

    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    hints = typing.get_type_hints(GRPOConfig)
    for key, value in grpo.items():
        if key not in fields:
            raise RecipeError(
                f"unknown key grpo.{key} in {source}: it is not a TRL GRPOConfig field "
                f"(see https://huggingface.co/docs/trl/grpo_trainer){did_you_mean(key, fields)}"
            )
        if key == "report_to" and value is not None:
            check_report_to(value, source)  # transformers' tracker names, each installed
        choices = fields[key].metadata.get("choices")
        if value is not None and choices and value not in choices:
            raise RecipeError(f"grpo.{key}={value!r}; TRL accepts one of {', '.join(map(str, choices))}")
        problem = _trl_type_problem(hints[key], value)
        if problem:
            raise RecipeError(f"grpo.{key}={value!r}: {problem}")
        if key in GRPO_RANGES and isinstance(value, int | float) and not isinstance(value, bool):
            test, want = GRPO_RANGES[key]
            if not test(value):
                raise RecipeError(f"grpo.{key}={value!r}; it must be {want}")


def _trl_type_problem(hint: Any, value: Any) -> str | None:
    """Why `value` does not fit the type TRL declares for a field (None: it fits, or the type is one grpokit
    does not check); an enum's values are the choices of a field typed `SomeEnum | str`."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    enums = [o for o in options if isinstance(o, type) and issubclass(o, enum.Enum)]
    if enums and isinstance(value, str):
        allowed = [m.value for e in enums for m in e]
        return None if value in allowed else f"TRL accepts one of {', '.join(map(str, allowed))}"
    if any(_fits(option, value) for option in options):
        return None
    names = " or ".join(getattr(o, "__name__", str(o)).replace("NoneType", "null") for o in options)
    return f"TRL declares it {names}, got {type(value).__name__}"


def _fits(hint: Any, value: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is Any or (not isinstance(hint, type) and origin is None):
        return True  # a typing construct grpokit does not check: TRL's own checks apply
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list or hint is list:
        args = typing.get_args(hint)
        return isinstance(value, list) and (not args or all(_fits(args[0], item) for item in value))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if isinstance(hint, type) and origin is None:
        return isinstance(value, hint) or not isinstance(value, int | float | str | bool | list | dict)
    return True
