"""Differential test of grpokit's math scorer against math-verify's documented use.

The reference is `verify(parse(gold), parse(answer))` on LaTeX (`$...$`), as math-verify's README
writes it. Golds are NuminaMath-TIR-style `\\boxed{}` contents; each gets right rewritings and wrong
answers (last-number tricks, hedges, partial lists, near misses) built by the test. grpokit must accept
every right one, reject every wrong one, and differ from the reference only where the reference pays
a wrong answer.
"""

import random
from fractions import Fraction
from functools import cache

import pytest

from grpokit.sandbox import scorers
from grpokit.tasks import build_task
from grpokit.tasks.math_problems import math_score
from tests.data_files import build_test_task, write_jsonl

N_PAIRS = 1000


def golds(rng: random.Random) -> list[tuple[str, list[str], list[str]]]:
    """(gold, right rewritings, wrong answers) in the shapes NuminaMath-TIR's boxed answers take."""
    out = []
    for _ in range(10):
        n = rng.randint(2, 999) * rng.choice([1, 1, -1])
        out.append((str(n), [f"{n}.0", f"\\frac{{{2 * n}}}{{2}}", f"{n}^{{1}}"], [str(n + 1), f"{n}.01", f"{-n}"]))
    for _ in range(10):
        a, b = rng.randint(1, 40), rng.randint(2, 12)
        if Fraction(a, b).denominator == 1:
            continue
        f = Fraction(a, b)
        right = [f"{f.numerator}/{f.denominator}", f"\\dfrac{{{f.numerator}}}{{{f.denominator}}}"]
        right += [f"\\frac{{{3 * f.numerator}}}{{{3 * f.denominator}}}"]
        if 10**6 % f.denominator == 0:
            right.append(str(float(f)))
        wrong = [f"\\frac{{{f.denominator}}}{{{f.numerator}}}", f"\\frac{{{f.numerator + 1}}}{{{f.denominator}}}"]
        out.append((f"\\frac{{{f.numerator}}}{{{f.denominator}}}", right, wrong))
    for _ in range(5):
        a, b = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7])
        out.append(
            (
                f"{a}\\sqrt{{{b}}}",
                [f"\\sqrt{{{a * a * b}}}", f"{a} \\sqrt{{{b}}}"],
                [f"{a + 1}\\sqrt{{{b}}}", str(a * b)],
            )
        )
        out.append((f"{a} + {b}\\sqrt{{2}}", [f"{b}\\sqrt{{2}} + {a}"], [f"{a} - {b}\\sqrt{{2}}", f"{a + b}"]))
    for _ in range(5):
        a, b = sorted(rng.sample(range(-9, 10), 2))
        out.append((f"({a}, {b}]", [f"({a},{b}]", f"\\left({a}, {b}\\right]"], [f"[{a}, {b}]", f"({a}, {b})", str(b)]))
        out.append((f"(-\\infty, {b}]", [f"(-\\infty,{b}]"], [f"(-\\infty, {b})", f"[{b}, \\infty)", str(b)]))
    for _ in range(6):
        items = sorted(rng.sample(range(-9, 10), 3))
        text = ", ".join(map(str, items))
        shuffled = rng.sample(items, 3)
        right = [", ".join(map(str, shuffled)), "\\{" + text + "\\}"]
        wrong = [", ".join(map(str, items[:2])), str(items[-1]), ", ".join(map(str, [*items, 10]))]
        out.append((text, right, wrong))
    for _ in range(5):
        k = rng.randint(11, 2023)
        out.append((f"2^{{{k}}}", [f"2^{k}"], [f"2^{{{k + 1}}}", "2", str(k)]))
    for _ in range(3):
        v = rng.randint(2, 9)
        out.append((f"x = {v}", [str(v), f"x={v}"], [f"x = {v + 1}", f"x = -{v}"]))
        out.append(((f"(x+{v})^2"), [f"x^2 + {2 * v}x + {v * v}"], [f"x^2 + {v * v}", f"(x-{v})^2"]))
        out.append((f"{v}\\pi", [f"\\pi {v}", f"{2 * v}\\pi/2"], [f"{v + 1}\\pi", str(v)]))
    return out


def tricks(gold: str) -> list[str]:
    """Answers a last-number or hedge reader pays: each is wrong for the gold."""
    out = [f"{gold}1 \\approx {gold}", f"{gold}1 > {gold}", f"\\pm {gold}", f"{gold}1 or {gold}", f"-1000, {gold}"]
    out += [f"1000 \\text{{ or }} {gold}", f"{gold}1; {gold}", f"43 \\neq {gold}"]
    if "=" not in gold:  # a number or expression: wrap it in something that means another thing
        out += [f"12 \\cdot {gold}", f"({gold})x", f"3\\sqrt{{{gold}}}", f"x^2 + 2x + {gold}", f"(-\\infty, {gold}]"]
    return out


def pairs() -> list[tuple[str, str, bool]]:
    rng = random.Random(0)
    out = []
    for gold, right, wrong in golds(rng):
        out += [(gold, gold, True), (gold, f"\\boxed{{{gold}}}", True), (gold, f"${gold}$", True)]
        out += [(gold, answer, True) for answer in right]
        out += [(gold, answer, False) for answer in [*wrong, *tricks(gold)]]
    return out


@cache
def _reference_gold(gold: str) -> list:
    from math_verify import parse

    return parse(f"${gold}$")


def reference(gold: str, answer: str) -> bool:
    from math_verify import parse, verify

    return verify(_reference_gold(gold), parse(answer if "$" in answer else f"${answer}$"))


def test_grpokit_agrees_with_math_verify_and_pays_no_wrong_answer():
    cases = pairs()
    assert len(cases) >= N_PAIRS, len(cases)
    wrong_accepted, right_rejected, reference_paid_wrong, reference_refused_right = [], [], [], []
    for gold, answer, right in cases:
        ours, theirs = scorers.math_equal(answer, gold), reference(gold, answer)
        if right and not ours:
            right_rejected.append((gold, answer))
        if not right and ours:
            wrong_accepted.append((gold, answer))
        if right and not theirs:
            reference_refused_right.append((gold, answer))
        if not right and theirs:
            reference_paid_wrong.append((gold, answer))
    assert not wrong_accepted, f"{len(wrong_accepted)} wrong answers accepted: {wrong_accepted[:10]}"
    assert not right_rejected, f"{len(right_rejected)} right answers rejected: {right_rejected[:10]}"
    # The labels are math-verify's own: every right rewriting is one the reference accepts too.
    assert not reference_refused_right, reference_refused_right[:10]
    # Where the reference differs, it pays a hedge, a relation or a list: that is what the screen is for.
    assert all(
        any(mark in answer for mark in ("\\approx", ">", "\\pm", " or ", ";", "\\neq", ","))
        for _, answer in reference_paid_wrong
    ), reference_paid_wrong


def test_the_sandboxed_path_gives_the_same_verdicts():
    cases = pairs()[::40]
    assert [math_score(answer, gold) for gold, answer, _ in cases] == [float(r) for _, _, r in cases]


def test_numina_demonstrations_score_one(tmp_path):
    rows = [
        {"problem": f"Problem {i}", "solution": f"We find $\\boxed{{{gold}}}$.", "messages": []}
        for i, (gold, _, _) in enumerate(golds(random.Random(1)))
    ]
    task = build_task(
        "math",
        {"source": str(write_jsonl(tmp_path / "numina.jsonl", rows)), "validation_fraction": 0.1, "test_fraction": 0.5},
    )
    for split, split_rows in task.checked.rows.items():
        for index in range(len(split_rows)):
            row = task.example(split, index)
            assert task.score(task.demonstration(row), row) == 1.0, row["answer"]
    assert task.notes() == []


@pytest.mark.parametrize("task_name", ["arithmetic", "countdown", "math", "custom", "reasoning_gym"])
def test_every_task_demonstration_scores_one(task_name, tmp_path):
    task = build_test_task(task_name, tmp_path)
    rows = task.dataset("test", 5)
    demonstrated = [row for row in rows if task.demonstration(row) is not None]
    assert demonstrated or task_name == "custom"
    for row in demonstrated:
        assert task.score(task.demonstration(row), row) == 1.0, row
