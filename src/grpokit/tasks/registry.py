"""The task registry: `@register_task` on each task class, `build_task(name, params)` to get one."""

from __future__ import annotations

import dataclasses
from typing import Any

from grpokit.errors import RecipeError
from grpokit.registry import did_you_mean, lookup
from grpokit.tasks.base import Task
from grpokit.tasks.parsing import THINK_TAGS, Tags

TASKS: dict[str, type[Task]] = {}

# Keys earlier recipes used, and what replaced them.
RENAMED = {
    "eval_fraction": "the held-out share is now two, validation_fraction (watched during training) and "
    "test_fraction (reported); set those instead",
    "eval_split": "the hub split that is reported is now test_split",
}


def register_task(cls: type[Task]) -> type[Task]:
    """Register a task class under `cls.name`; a name registered twice raises."""
    if cls.name in TASKS:
        raise ValueError(f"task {cls.name!r} is registered twice ({TASKS[cls.name].__module__}, {cls.__module__})")
    TASKS[cls.name] = cls
    return cls


def get_task_class(name: str) -> type[Task]:
    """The class registered as `name`, or the one a dotted import path names; else a `RecipeError`."""
    return lookup(TASKS, name, "task")


def build_task(name: str, params: dict[str, Any] | None = None, tags: Tags = THINK_TAGS) -> Task:
    """The task `name` with its config from `params`, reading and writing completions in `tags`."""
    cls = get_task_class(name)
    known = {f.name for f in dataclasses.fields(cls.config_class)}
    for old, new in RENAMED.items():
        if old in (params or {}) and old not in known:
            raise RecipeError(f"task.params.{old} for task {name!r} is gone: {new}")
    unknown = sorted(set(params or {}) - known)
    if unknown:
        raise RecipeError(
            f"unknown key task.params.{unknown[0]} for task {name!r}; known: {', '.join(sorted(known))}"
            f"{did_you_mean(unknown[0], known)}"
        )
    try:
        config = cls.config_class(**(params or {}))
        task = cls(config)
    except (TypeError, ValueError) as err:
        raise RecipeError(f"task.params for {name!r}: {err}") from err
    task.tags = tags  # set after construction, so a task's __init__ keeps the one-argument signature
    return task
