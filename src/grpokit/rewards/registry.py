"""The reward registry: each name maps to a factory `make(task, **params) -> reward`.

A reward is a pure function `(completion_text, example_row) -> float`; parameterised rewards take their
settings from the recipe through the factory's keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpokit.errors import RecipeError
from grpokit.registry import lookup
from grpokit.tasks.base import Task

Reward = Callable[[str, dict[str, Any]], float]
RewardFactory = Callable[..., Reward]

REWARDS: dict[str, RewardFactory] = {}
BOUNDS: dict[str, tuple[float, float]] = {}  # each reward's range with its default parameters


def register_reward(name: str, bounds: tuple[float, float] = (0.0, 1.0)) -> Callable[[RewardFactory], RewardFactory]:
    """Register the decorated factory as `name`, its rewards ranging over `bounds`; a name registered twice raises."""

    def decorator(factory: RewardFactory) -> RewardFactory:
        if name in REWARDS:
            raise ValueError(f"reward {name!r} is registered twice")
        REWARDS[name] = factory
        BOUNDS[name] = bounds
        return factory

    return decorator


def get_reward_factory(name: str) -> RewardFactory:
    """The factory registered as `name`, or the one a dotted import path names; else a `RecipeError`."""
    return lookup(REWARDS, name, "reward")


def make_reward(name: str, task: Task, params: dict[str, Any] | None = None) -> Reward:
    """The reward `name` for `task`, built with `params`; parameters its factory does not take raise a `RecipeError`."""
    try:
        return get_reward_factory(name)(task, **(params or {}))
    except TypeError as err:
        raise RecipeError(f"bad params for reward {name!r}: {err}") from err
