"""Tasks: each built-in task registers itself on import; `build_task(name, params)` or `task_of(recipe)` gets one."""

from __future__ import annotations

from typing import Any

from grpokit.recipe.schema import Recipe
from grpokit.tasks import arithmetic, countdown, custom, gym, math_problems
from grpokit.tasks.base import Task
from grpokit.tasks.registry import RENAMED, TASKS, build_task, get_task_class, register_task

__all__ = [
    "RENAMED",
    "TASKS",
    "Task",
    "arithmetic",
    "build_task",
    "countdown",
    "custom",
    "get_task_class",
    "gym",
    "math_problems",
    "register_task",
    "task_of",
]


def task_of(recipe: Recipe, params: dict[str, Any] | None = None) -> Task:
    """The recipe's task: `task.name` with `task.params` (and `params` laid over them: a suite, a curriculum
    level), reading and writing completions in `task.tags`."""
    return build_task(recipe.task.name, {**recipe.task.params, **(params or {})}, recipe.task.tags)
