"""Lookup shared by the task and reward registries: plain dicts, with a dotted import path for user code."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from typing import Any

from grpokit.errors import RecipeError


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the known name closest to a misspelt `name`, else an empty string: the end
    of an error message that lists the known names.

    >>> did_you_mean("arithmetc", ["arithmetic", "countdown"])
    "; did you mean 'arithmetic'?"
    >>> did_you_mean("zzz", ["arithmetic"])
    ''
    """
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def lookup(registry: dict[str, Any], name: str, kind: str) -> Any:
    """`registry[name]`, else `package.module.attr` imported, else an error listing the known names."""
    if name in registry:
        return registry[name]
    if "." in name:  # escape hatch for user code: "my_package.my_module.thing"
        module, _, attr = name.rpartition(".")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise RecipeError(f"cannot import {kind} {name!r}: {err}") from err
    raise RecipeError(
        f"unknown {kind} {name!r}; known: {', '.join(sorted(registry))} (or a dotted import path)"
        f"{did_you_mean(name, registry)}"
    )
