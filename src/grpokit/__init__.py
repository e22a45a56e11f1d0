"""grpokit: post-train LLMs to reason with GRPO on verifiable rewards, on top of TRL.

The public surface, importable from `grpokit` without loading torch:

- recipes: `load_recipe(path, overrides)`, `Recipe`, `RecipeError`;
- tasks: `build_task(name, params)`, `task_of(recipe)`, `TASKS`, `Task`;
- rewards: `make_reward(name, task, params)`, `to_trl(name, reward)` (TRL's batch signature), `REWARDS`;
- the sandbox that scores untrusted completions: `Sandbox`, `shared_sandbox()`;
- training: `train(recipe_or_path, overrides, resume)` returns the run directory.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:  # one version, the package metadata's (pyproject.toml)
    __version__ = importlib.metadata.version("grpokit")
except importlib.metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, not installed
    __version__ = "0+unknown"

# Each public name and the module that defines it, imported on first use: `import grpokit.x` (the sandbox
# worker, the command line) runs this file first and must stay as light as grpokit.x itself.
_EXPORTS = {
    "RecipeError": "grpokit.errors",
    "load_recipe": "grpokit.recipe.load",
    "Recipe": "grpokit.recipe.schema",
    "REWARDS": "grpokit.rewards",
    "make_reward": "grpokit.rewards",
    "to_trl": "grpokit.rewards",
    "Sandbox": "grpokit.sandbox.client",
    "shared_sandbox": "grpokit.sandbox.client",
    "TASKS": "grpokit.tasks",
    "Task": "grpokit.tasks",
    "build_task": "grpokit.tasks",
    "task_of": "grpokit.tasks",
}

__all__ = [  # _EXPORTS' names, __version__ and train
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

if TYPE_CHECKING:  # the names as type checkers and editors see them
    from grpokit.errors import RecipeError
    from grpokit.recipe.load import load_recipe
    from grpokit.recipe.schema import Recipe
    from grpokit.rewards import REWARDS, make_reward, to_trl
    from grpokit.sandbox.client import Sandbox, shared_sandbox
    from grpokit.tasks import TASKS, Task, build_task, task_of


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'grpokit' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def train(recipe: Recipe | str | Path, overrides: Sequence[str] = (), resume: str | Path | None = None) -> Path:
    """Train a recipe (a loaded `Recipe`, a YAML path or a shipped recipe's name, with `key.sub=value`
    overrides) as `grpokit train` does in one process; returns the run directory. `resume` is a run
    directory, or "latest" for the recipe's newest resumable run. Every recipe check runs before a model
    loads."""
    # lazy like the exports above: `import grpokit` loads none of grpokit's modules
    from grpokit.errors import RecipeError
    from grpokit.recipe.load import load_recipe
    from grpokit.recipe.schema import Recipe
    from grpokit.runs.records import resolve_resume

    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe, list(overrides))
    elif overrides:
        raise RecipeError("overrides apply to a recipe file; pass the path, or build the Recipe with them applied")
    resume = resolve_resume(recipe, resume)
    # slow import: torch, transformers, trl, only when something trains
    from grpokit.stages import pipeline

    return pipeline.main(recipe, resume=resume)
