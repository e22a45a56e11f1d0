"""Reward registry and the one adapter to TRL's batch signature.

A reward is a pure function `(completion_text, example_row) -> float`. Each registered name maps to a
factory `make(task, **params) -> reward`, so parameterised rewards take their settings from the recipe.
`to_trl` wraps a reward for GRPOTrainer and names it, so TRL logs `rewards/<name>/mean`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpokit.parsing import normalize_completion
from grpokit.registry import lookup
from grpokit.tasks.base import Task

Reward = Callable[[str, dict[str, Any]], float]
RewardFactory = Callable[..., Reward]

REWARDS: dict[str, RewardFactory] = {}


def register_reward(name: str) -> Callable[[RewardFactory], RewardFactory]:
    def decorator(factory: RewardFactory) -> RewardFactory:
        if name in REWARDS:
            raise ValueError(f"reward {name!r} is registered twice")
        REWARDS[name] = factory
        return factory

    return decorator


def get_reward_factory(name: str) -> RewardFactory:
    return lookup(REWARDS, name, "reward")


def make_reward(name: str, task: Task, params: dict[str, Any] | None = None) -> Reward:
    from grpokit.config import RecipeError

    try:
        return get_reward_factory(name)(task, **(params or {}))
    except TypeError as err:
        raise RecipeError(f"bad params for reward {name!r}: {err}") from err


def to_trl(name: str, reward: Reward, think_prefilled: bool = False) -> Callable[..., list[float]]:
    """TRL calls reward functions with the batch: prompts, completions and each dataset column as a list."""

    def trl_reward(prompts: list, completions: list, **columns: Any) -> list[float]:
        rows = [
            {key: values[i] for key, values in columns.items() if isinstance(values, list)}
            for i in range(len(completions))
        ]
        return [
            float(reward(normalize_completion(_text(c), think_prefilled), row))
            for c, row in zip(completions, rows, strict=True)
        ]

    trl_reward.__name__ = name
    return trl_reward


def _text(completion: Any) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(str(m.get("content", "")) for m in completion)
    return str(completion)


# Built-in rewards register themselves on import.
from grpokit.rewards import correctness, formats, shaping  # noqa: E402, F401
