"""Task registry: `@register_task` on each task class; `build_task(name, params)` to get one."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from grpokit.tasks.base import Task

TASKS: dict[str, type[Task]] = {}


def register_task(cls: type[Task]) -> type[Task]:
    if cls.name in TASKS:
        raise ValueError(f"task {cls.name!r} is registered twice ({TASKS[cls.name].__module__}, {cls.__module__})")
    TASKS[cls.name] = cls
    return cls


def get_task_class(name: str) -> type[Task]:
    from grpokit.config import RecipeError

    if name in TASKS:
        return TASKS[name]
    if "." in name:  # escape hatch for user code: "my_package.my_module.MyTask"
        module, _, attr = name.rpartition(".")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise RecipeError(f"cannot import task {name!r}: {err}") from err
    raise RecipeError(f"unknown task {name!r}; known: {', '.join(sorted(TASKS))} (or a dotted import path)")


def build_task(name: str, params: dict[str, Any] | None = None) -> Task:
    from grpokit.config import RecipeError

    cls = get_task_class(name)
    known = {f.name for f in dataclasses.fields(cls.config_class)}
    unknown = sorted(set(params or {}) - known)
    if unknown:
        raise RecipeError(f"unknown key task.params.{unknown[0]} for task {name!r}; known: {', '.join(sorted(known))}")
    try:
        config = cls.config_class(**(params or {}))
        return cls(config)
    except (TypeError, ValueError) as err:
        raise RecipeError(f"task.params for {name!r}: {err}") from err


# Built-in tasks register themselves on import.
from grpokit.tasks import arithmetic, countdown  # noqa: E402, F401
