"""`grpokit rewards check RECIPE`: try to game the recipe's rewards before a run spends hours on them.

Each case is a completion that is wrong or degenerate by construction (an empty answer, tag spam, the
answer only inside `<think>`, code injection, huge exponents, unicode digits, 100 KB of text, plus the
task's own tricks). A case is a finding when its weighted reward beats an honest, well-formed wrong
answer, when the task's verifier accepts it, when a reward raises, or when one call takes over a second.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from grpokit.parsing import normalize_completion, retag
from grpokit.tasks.base import Example, Task

SLOW_SECONDS = 1.0
_FULLWIDTH = str.maketrans("0123456789", "０１２３４５６７８９")


@dataclass
class Finding:
    case: str
    problem: str
    completion: str

    def __str__(self) -> str:
        shown = self.completion if len(self.completion) < 120 else self.completion[:117] + "..."
        return f"{self.case}: {self.problem}\n    completion: {shown!r}"


def battery(task: Task, example: Example) -> list[tuple[str, str]]:
    """(name, completion) pairs in the task's tags; none of them is an honest correct answer."""
    answer = str(example["answer"])
    cases = [
        ("empty answer", "<think>reasoning</think><answer></answer>"),
        ("no answer block", f"<think>the answer is {answer}</think>"),
        ("answer only inside <think>", f"<think><answer>{answer}</answer></think>"),
        ("answer after an unclosed <think>", f"<think>hmm <answer>{answer}</answer>"),
        ("prose, no tags", f"The answer is {answer}."),
        ("tag spam", "<think></think>" * 50 + "<answer></answer>" * 50),
        (
            "several answers, the last one wrong",
            f"<think>x</think><answer>{answer}</answer><answer>{_wrong_answer(example)}</answer>",
        ),
        ("code injection", "<think>x</think><answer>__import__('os').system('true')</answer>"),
        ("huge exponent", "<think>x</think><answer>9**9**9</answer>"),
        ("unicode digits", f"<think>x</think><answer>{answer.translate(_FULLWIDTH)}</answer>"),
        ("100 KB completion", "<think>" + "x" * 100_000 + f"</think><answer>{answer}</answer>"),
    ]
    return [(name, retag(completion, task.tags)) for name, completion in cases + task.adversarial(example)]


def check(
    task: Task, rewards: list[tuple[str, float, Any]], examples: list[Example], think_prefilled: bool = False
) -> list[Finding]:
    """Run the battery on each example against `rewards` = [(name, weight, fn(completion, row))]."""
    findings: list[Finding] = []
    for example in examples:
        honest_wrong = retag(f"<think>x</think><answer>{_wrong_answer(example)}</answer>", task.tags)
        baseline, _ = _total(rewards, honest_wrong, example, think_prefilled, task)
        for case, completion in battery(task, example):
            total, problems = _total(rewards, completion, example, think_prefilled, task)
            if total > baseline + 1e-9:
                problems.append(f"weighted reward {total:.3f} beats an honest wrong answer's {baseline:.3f}")
            if _safe_score(task, normalize_completion(completion, think_prefilled, task.tags), example) > 0:
                problems.append("the task's verifier accepts it")
            findings += [Finding(case, p, completion) for p in problems]
    return findings


def _total(
    rewards: list[tuple[str, float, Any]], completion: str, example: Example, think_prefilled: bool, task: Task
) -> tuple[float, list[str]]:
    text = normalize_completion(completion, think_prefilled, task.tags)
    total, problems = 0.0, []
    for name, weight, fn in rewards:
        start = time.perf_counter()
        try:
            value = float(fn(text, example))
        except Exception as err:  # a reward that raises would abort a TRL run
            problems.append(f"reward {name} raised {type(err).__name__}: {err}")
            continue
        elapsed = time.perf_counter() - start
        if elapsed > SLOW_SECONDS:
            problems.append(f"reward {name} took {elapsed:.1f} s")
        if not math.isfinite(value):
            problems.append(f"reward {name} returned {value}")
            continue
        total += weight * value
    return total, problems


def _safe_score(task: Task, completion: str, example: Example) -> float:
    try:
        return task.score(completion, example)
    except Exception:
        return 0.0  # already reported through the correctness reward when it is in the recipe


def _wrong_answer(example: Example) -> str:
    answer = example["answer"]
    return str(answer + 1) if isinstance(answer, int) else f"{answer}1"


def main(recipe: Any, n: int = 8) -> list[Finding]:
    from grpokit.rewards import make_reward
    from grpokit.tasks import build_task

    task = build_task(recipe.task.name, recipe.task.params, recipe.task.tags)
    rewards = [(s.name, s.weight, make_reward(s.name, task, s.params)) for s in recipe.rewards]
    return check(task, rewards, task.dataset("eval", n))
