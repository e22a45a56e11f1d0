"""Correctness: the task's own verifier, so training reward and evaluation accuracy cannot disagree."""

from __future__ import annotations

from grpokit.rewards.registry import Reward, register_reward
from grpokit.tasks.base import Task


@register_reward("correctness")
def make_correctness(task: Task) -> Reward:
    """1.0 when `task.score` accepts the answer, else 0.0.

    >>> from grpokit.tasks import build_task
    >>> task = build_task("arithmetic")
    >>> make_correctness(task)("<think></think><answer>7</answer>", {"answer": 7})
    1.0
    """

    def correctness_reward(completion: str, example: dict) -> float:
        return task.score(completion, example)

    if type(task).score_many is not Task.score_many:  # the task batches its verifier: TRL's batch goes whole
        correctness_reward.batch = task.score_many
    return correctness_reward
