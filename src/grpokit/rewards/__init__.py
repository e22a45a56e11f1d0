"""Rewards: the built-in rewards register themselves on import; `make_reward` builds one by name and
`to_trl` adapts it to TRL's batch signature.

A reward is a pure function `(completion_text, example_row) -> float`. Each registered name maps to a
factory `make(task, **params) -> reward`, so parameterised rewards take their settings from the recipe.
"""

from __future__ import annotations

from grpokit.rewards import closeness, correctness, formats, shaping, steps, thought
from grpokit.rewards.adapter import (
    DEFAULT_TIMEOUT_S,
    ON_ERROR,
    CompletionTimeoutError,
    Deadline,
    is_completion_timeout,
    to_trl,
)
from grpokit.rewards.registry import (
    BOUNDS,
    REWARDS,
    Reward,
    RewardFactory,
    get_reward_factory,
    make_reward,
    register_reward,
)

__all__ = [
    "BOUNDS",
    "DEFAULT_TIMEOUT_S",
    "ON_ERROR",
    "REWARDS",
    "CompletionTimeoutError",
    "Deadline",
    "Reward",
    "RewardFactory",
    "closeness",
    "correctness",
    "formats",
    "get_reward_factory",
    "is_completion_timeout",
    "make_reward",
    "register_reward",
    "shaping",
    "steps",
    "thought",
    "to_trl",
]
