"""Lookup shared by the task and reward registries: plain dicts, with a dotted import path for user code."""

from __future__ import annotations

import importlib
from typing import Any


def lookup(registry: dict[str, Any], name: str, kind: str) -> Any:
    """`registry[name]`, else `package.module.attr` imported, else an error listing the known names."""
    from grpokit.config import RecipeError

    if name in registry:
        return registry[name]
    if "." in name:  # escape hatch for user code: "my_package.my_module.thing"
        module, _, attr = name.rpartition(".")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise RecipeError(f"cannot import {kind} {name!r}: {err}") from err
    raise RecipeError(f"unknown {kind} {name!r}; known: {', '.join(sorted(registry))} (or a dotted import path)")
