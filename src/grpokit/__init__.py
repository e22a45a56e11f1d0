"""grpokit: post-train LLMs to reason with GRPO on verifiable rewards, on top of TRL.

The public surface, importable from `grpokit` without loading torch:

- recipes: `load_recipe(path, overrides)`, `Recipe`, `RecipeError`;
- tasks: `build_task(name, params)`, `task_of(recipe)`, `TASKS`, `Task`;
- rewards: `make_reward(name, task, params)`, `to_trl(name, reward)` (TRL's batch signature), `REWARDS`;
- the sandbox that scores untrusted completions: `Sandbox`, `shared_sandbox()`;
- training: `train(recipe_or_path, overrides, resume)` returns the run directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from grpokit.errors import RecipeError
from grpokit.recipe.load import load_recipe
from grpokit.recipe.schema import Recipe
from grpokit.rewards import REWARDS, make_reward, to_trl
from grpokit.sandbox.client import Sandbox, shared_sandbox
from grpokit.tasks import TASKS, Task, build_task, task_of

__version__ = "0.1.0"

__all__ = [
    "REWARDS",
    "TASKS",
    "Recipe",
    "RecipeError",
    "Sandbox",
    "Task",
    "__version__",
    "build_task",
    "load_recipe",
    "make_reward",
    "shared_sandbox",
    "task_of",
    "to_trl",
    "train",
]


def train(recipe: Recipe | str | Path, overrides: Sequence[str] = (), resume: str | Path | None = None) -> Path:
    """Train a recipe (a loaded `Recipe`, or a YAML path with `key.sub=value` overrides) as `grpokit train`
    does in one process; returns the run directory. Every recipe check runs before a model loads."""
    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe, list(overrides))
    elif overrides:
        raise RecipeError("overrides apply to a recipe file; pass the path, or build the Recipe with them applied")
    # slow import: torch, transformers, trl, only when something trains
    from grpokit.stages import pipeline

    return pipeline.main(recipe, resume=resume)
