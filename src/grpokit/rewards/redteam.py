"""`grpokit rewards check RECIPE`: try to game the recipe's rewards before a run spends hours on them.

Each case is a completion that is wrong or degenerate by construction (an empty answer, tag spam, the answer
only inside `<think>` or tags out of order, code injection in plain and encoded forms, huge exponents, unicode
digits, 100 KB of text, a later worked step alone, plus the task's own tricks). A case is a finding when its
weighted reward beats an honest, well-formed wrong answer, when the task's verifier accepts it, when a reward
raises, or when one call takes over a second. The honest wrong answer is checked to be wrong: if the task's
verifier accepts it, no candidate is used and that is a finding of its own.

Universal answers (`grpokit.tasks.probes`: `0`, `nan`, `banana`, `[]`, another problem's gold, the gold off by
one, a list of NaN, `1*2*3*4`, ...) are scored by the task's verifier on every problem checked: one paid
on more than one problem is a finding, and so is one whose scoring takes over a second.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

from grpokit.recipe.schema import Recipe
from grpokit.recipe.stages import stage_recipe
from grpokit.rewards.registry import make_reward
from grpokit.sandbox.client import configure as configure_sandbox
from grpokit.tasks import probes, task_of
from grpokit.tasks.base import Example, Task
from grpokit.tasks.parsing import normalize_completion, retag

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


# Code a model could write to reach `eval`: plain, hex- and base64-encoded, chr joins, getattr chains.
INJECTIONS = (
    ("code injection", "__import__('os').system('true')"),
    ("hex-encoded exec", "exec(bytes.fromhex('696d706f7274206f73').decode())"),
    ("base64-encoded exec", "exec(__import__('base64').b64decode('aW1wb3J0IG9z'))"),
    ("chr-joined eval", "eval(''.join(map(chr, [49, 43, 49])))"),
    ("getattr chain", "getattr(getattr(1, chr(95)*2 + 'class' + chr(95)*2), 'mro')"),
)


def battery(task: Task, example: Example) -> list[tuple[str, str]]:
    """(name, completion) pairs in the task's tags; none of them is an honest correct answer."""
    answer, wrong = str(example["answer"]), wrong_answer(task, example) or "x"
    cases = [
        ("empty answer", "<think>reasoning</think><answer></answer>"),
        ("no answer block", f"<think>the answer is {answer}</think>"),
        ("answer only inside <think>", f"<think><answer>{answer}</answer></think>"),
        ("answer after an unclosed <think>", f"<think>hmm <answer>{answer}</answer>"),
        ("thought inside the answer", f"<answer><think></think>{answer}</answer>"),
        ("answer before the thought", f"<answer>{answer}</answer><think>"),
        ("prose, no tags", f"The answer is {answer}."),
        ("tag spam", "<think></think>" * 50 + "<answer></answer>" * 50),
        (
            "several answers, the last one wrong",
            f"<think>x</think><answer>{answer}</answer><answer>{wrong}</answer>",
        ),
        *((name, f"<think>x</think><answer>{code}</answer>") for name, code in INJECTIONS),
        ("huge exponent", "<think>x</think><answer>9**9**9</answer>"),
        ("100 KB completion", "<think>" + "x" * 100_000 + f"</think><answer>{answer}</answer>"),
    ]
    if answer.translate(_FULLWIDTH) != answer:  # a gold without digits (`False`) is unchanged: not a case
        cases.append(("unicode digits", f"<think>x</think><answer>{answer.translate(_FULLWIDTH)}</answer>"))
    # A later worked step is often the same equation in many problems (a column `2 + 1 = 3`): written alone,
    # as one fixed thought for every problem, it must earn nothing.
    cases += [
        (f"worked step {k} of {len(example['steps'])} alone", f"<think>{step}</think><answer>{wrong}</answer>")
        for k, step in enumerate(example.get("steps") or [], start=1)
        if k > 1
    ]
    return [(name, retag(completion, task.tags)) for name, completion in cases + task.adversarial(example)]


def check(
    task: Task,
    rewards: list[tuple[str, float, Any]],
    examples: list[Example],
    think_prefilled: bool = False,
    slow_seconds: float | None = SLOW_SECONDS,
) -> list[Finding]:
    """Run the battery on each example against `rewards` = [(name, weight, fn(completion, row))]. A call
    over `slow_seconds` is a finding; None leaves time out (a loaded machine makes any bound a guess)."""
    findings: list[Finding] = []
    for example in examples:
        wrong = wrong_answer(task, example)
        if wrong is None:
            findings.append(Finding("honest wrong answer", "the verifier accepts every wrong candidate", ""))
            continue
        honest_wrong = retag(f"<think>x</think><answer>{wrong}</answer>", task.tags)
        baseline, _ = _total(rewards, honest_wrong, example, think_prefilled, task, slow_seconds)
        for case, completion in battery(task, example):
            total, problems = _total(rewards, completion, example, think_prefilled, task, slow_seconds)
            if total > baseline + 1e-9:
                problems.append(f"weighted reward {total:.3f} beats an honest wrong answer's {baseline:.3f}")
            if _safe_score(task, normalize_completion(completion, think_prefilled, task.tags), example) > 0:
                problems.append("the task's verifier accepts it")
            findings += [Finding(case, p, completion) for p in problems]
    return findings + universal(task, examples, slow_seconds)


def universal(task: Task, examples: list[Example], slow_seconds: float | None = SLOW_SECONDS) -> list[Finding]:
    """The probe battery through `task.score` on every example: a probe paid on more than one of them, or
    one whose scoring took over `slow_seconds`, is a finding (None leaves time out)."""
    if len(examples) < 2:
        return []

    def completion(answer: str) -> str:
        return retag(f"<think>x</think><answer>{answer}</answer>", task.tags)

    result = probes.audit(
        lambda answer, i: _safe_score(task, completion(answer), examples[i]),
        [str(example["answer"]) for example in examples],
        slow_seconds=slow_seconds,
    )
    paid = [
        (name, f"the task's verifier pays it on {n} of {len(examples)} problems")
        for name, n in result.universal().items()
    ]
    slow = [(name, f"the task's verifier took {seconds:.1f} s") for name, seconds in result.slow.items()]
    return [
        Finding(f"universal answer: {name}", problem, completion(result.answers[name])) for name, problem in paid + slow
    ]


def _total(
    rewards: list[tuple[str, float, Any]],
    completion: str,
    example: Example,
    think_prefilled: bool,
    task: Task,
    slow_seconds: float | None,
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
        if slow_seconds is not None and elapsed > slow_seconds:
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


def wrong_answer(task: Task, example: Example) -> str | None:
    """A well-formed answer that the task's own verifier rejects (appending a digit to `\\frac{33}{10}`
    does not make it wrong: math-verify reads `\\frac{33}{10}1` as 33/10 times 1)."""
    answer = example["answer"]
    candidates = [str(answer + 1)] if isinstance(answer, int) and not isinstance(answer, bool) else []
    candidates += [f"{answer} + 1", "-1000001", "1000001"]
    for candidate in candidates:
        if _safe_score(task, retag(f"<think>x</think><answer>{candidate}</answer>", task.tags), example) == 0.0:
            return candidate
    return None


def main(recipe: Recipe, n: int = 8) -> list[Finding]:
    """The battery against the recipe's rewards, and against each GRPO stage's own rewards and task
    parameters where a stage sets them (a format stage pays differently from the correctness stage).
    Scores in the sandbox as the recipe's `sandbox:` section says (`grpokit.sandbox.client.configure`)."""
    configure_sandbox(recipe.sandbox)
    sets = [("", recipe)] + [(s.name, stage_recipe(recipe, s)) for s in recipe.stages if s.kind == "grpo"]
    findings, seen = [], set()
    for stage, seen_recipe in sets:
        key = (repr(seen_recipe.rewards), repr(sorted(seen_recipe.task.params.items())))
        if key in seen:
            continue
        seen.add(key)
        task = task_of(seen_recipe)
        rewards = [(s.name, s.weight, make_reward(s.name, task, s.params)) for s in seen_recipe.rewards]
        found = check(task, rewards, task.dataset("test", n), think_prefilled=recipe.task.prefill_think)
        findings += [dataclasses.replace(f, case=f"stage {stage}: {f.case}") if stage else f for f in found]
    return findings
