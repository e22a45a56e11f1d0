"""Write data/word_problems.jsonl: small math word problems in the NuminaMath-TIR schema.

The CPU variant of the cookbook recipe trains on these offline (the hub is out of reach here and in
CI). Each row has `problem` and `solution`; the solution is a short worked answer ending in
`\\boxed{...}`, like NuminaMath-TIR. Answers are integers, decimals and fractions, so math-verify's
equivalence (`\\frac{3}{4}` = `0.75` = `3/4`) matters. Deterministic: `python scripts/make_word_problems.py`
rewrites the same file, and a test checks that it does.
"""

from __future__ import annotations

import json
import random
import sys
from fractions import Fraction
from pathlib import Path

ROWS = 3000
OUT = Path(__file__).resolve().parents[1] / "data" / "word_problems.jsonl"


def tex(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def money(value: Fraction) -> str:
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def problem(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(10)
    a, b, c = rng.randint(2, 12), rng.randint(2, 12), rng.randint(1, 20)
    if kind == 0:
        total = a * b
        c = rng.randint(1, total - 1)
        return (
            f"A baker fills {a} trays with {b} cookies each and sells {c} cookies. How many cookies are left?",
            f"${a} \\times {b} = {total}$ and ${total} - {c} = {total - c}$. $\\boxed{{{total - c}}}$",
        )
    if kind == 1:
        return (
            f"Tom reads {a} pages a day for {b} days, then {c} more pages. How many pages does he read in all?",
            f"${a} \\times {b} + {c} = {a * b + c}$. $\\boxed{{{a * b + c}}}$",
        )
    if kind == 2:
        share = Fraction(b, a)
        return (
            f"{a} friends share {b} pizzas equally. How many pizzas does each friend get?",
            f"Each gets $\\frac{{{b}}}{{{a}}} = {tex(share)}$. $\\boxed{{{tex(share)}}}$",
        )
    if kind == 3:
        price, off = rng.randint(2, 40) * 4, rng.choice([10, 20, 25, 50, 75])
        sale = Fraction(price * (100 - off), 100)
        return (
            f"A shirt costs ${price} and is on sale for {off}% off. What is the sale price in dollars?",
            f"${price} \\times {100 - off}\\% = {money(sale)}$. $\\boxed{{{money(sale)}}}$",
        )
    if kind == 4:
        small, large = sorted(rng.sample(range(1, 40), 2))
        return (
            f"The sum of two numbers is {small + large} and their difference is {large - small}. "
            "What is the larger number?",
            f"$({small + large} + {large - small}) / 2 = {large}$. $\\boxed{{{large}}}$",
        )
    if kind == 5:
        x = Fraction(c - b, a)
        return (
            f"Solve for $x$: ${a}x + {b} = {c}$.",
            f"${a}x = {c - b}$, so $x = {tex(x)}$. $\\boxed{{{tex(x)}}}$",
        )
    if kind == 6:
        return (
            f"A rectangle is {a} cm long and {b} cm wide. What is its perimeter in cm?",
            f"$2 \\times ({a} + {b}) = {2 * (a + b)}$. $\\boxed{{{2 * (a + b)}}}$",
        )
    if kind == 7:
        pct, base = rng.choice([10, 20, 25, 50, 5]), rng.randint(1, 30) * 4
        value = Fraction(pct * base, 100)
        return (
            f"What is ${pct}\\%$ of ${base}$?",
            f"${base} \\times {pct}/100 = {tex(value)}$. $\\boxed{{{tex(value)}}}$",
        )
    if kind == 8:
        x, y, z = (rng.randint(1, 20) for _ in range(3))
        mean = Fraction(x + y + z, 3)
        return (
            f"What is the average of {x}, {y} and {z}?",
            f"$({x} + {y} + {z}) / 3 = {x + y + z}/3 = {tex(mean)}$. $\\boxed{{{tex(mean)}}}$",
        )
    d = rng.randint(2, 6)
    value = Fraction(a, d) + Fraction(b, d + 1)
    return (
        f"Compute $\\frac{{{a}}}{{{d}}} + \\frac{{{b}}}{{{d + 1}}}$.",
        f"$\\frac{{{a * (d + 1)}}}{{{d * (d + 1)}}} + \\frac{{{b * d}}}{{{d * (d + 1)}}} = {tex(value)}$. "
        f"$\\boxed{{{tex(value)}}}$",
    )


def rows(n: int = ROWS, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        question, solution = problem(rng)
        if question not in seen:
            seen.add(question)
            out.append({"problem": question, "solution": solution})
    return out


def render(data: list[dict[str, str]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(rows()), encoding="utf-8")
    print(f"wrote {ROWS} problems to {target}")
