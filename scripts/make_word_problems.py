"""Write data/word_problems.jsonl: small math word problems in the NuminaMath-TIR schema.

The CPU variant of the cookbook recipe trains on these offline (the hub is out of reach here and in
CI). Each row has `problem` and `solution`; the solution is a worked answer ending in `\\boxed{...}`, like
NuminaMath-TIR. The answers take the forms GSM8K and NuminaMath use: integers, fractions (`\\frac{3}{2}`),
money (`7.5` dollars) and percents (`25\\%`), so math-verify's equivalence (`\\frac{3}{4}` = `0.75`,
`25\\%` = `25`, `7.50` = `7.5`) matters.

Every step of a solution is one operation a 135M model can learn in a CPU run: factors and divisors 2..9,
a one-digit number added or taken away, results under 100, each step its own `$x = y$`, as a worked
GSM8K answer has one calculation per line. Deterministic: `python scripts/make_word_problems.py` rewrites
the same file, and a test checks that it does and that every step's equation is true.
"""

from __future__ import annotations

import json
import random
import sys
from fractions import Fraction
from pathlib import Path

ROWS = 3000
OUT = Path(__file__).resolve().parents[1] / "data" / "word_problems.jsonl"
NAMES = ["Tom", "Ana", "Sam", "Mia", "Leo", "Zoe", "Ben", "Ivy"]
SHARED = ["pizzas", "cakes", "pies", "melons", "loaves of bread", "bars of chocolate"]
PRICED = ["notebooks", "pens", "sandwiches", "tickets", "mugs", "toy cars", "plants", "books"]
HABITS = ["walk to school", "wear glasses", "play chess", "have a dog", "ride a bike", "sing in a choir"]
WORN = ["shirt", "jacket", "pair of shoes", "hat", "bag", "scarf"]
SHAPES = [("rectangle", "cm"), ("garden", "m"), ("table top", "cm"), ("field", "m"), ("photo", "cm")]


def frac(p: int, q: int) -> str:
    """`\\frac{p}{q}` as written, not reduced."""
    return f"\\frac{{{p}}}{{{q}}}"


def tex(value: Fraction) -> str:
    """An integer as itself, any other fraction as `\\frac{p}{q}` in lowest terms."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return sign + frac(abs(value.numerator), value.denominator)


def decimal(value: Fraction) -> str:
    """A money amount in dollars: `7.5`, `12`, `0.25`."""
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def divide(p: int, q: int) -> str:
    """`p / q` as a step: `12 / 4 = 3`; `\\frac{6}{4} = \\frac{3}{2}` when q does not divide p; the bare
    `\\frac{9}{7}` when that is already in lowest terms."""
    value = Fraction(p, q)
    if value.denominator == 1:
        return f"{p} / {q} = {value.numerator}"
    raw = frac(p, q)
    return raw if tex(value) == raw else f"{raw} = {tex(value)}"


def solution(steps: list[str], answer: str) -> str:
    return " ".join(f"${step}$." for step in steps) + f" $\\boxed{{{answer}}}$"


def problem(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(12)
    name = rng.choice(NAMES)
    a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 9)
    if kind == 0:  # integer: a product, less a digit
        total = a * b
        c = rng.randint(1, min(9, total - 1))
        return (
            f"A baker fills {a} trays with {b} cookies each and sells {c} cookies. How many cookies are left?",
            solution([f"{a} \\times {b} = {total}", f"{total} - {c} = {total - c}"], str(total - c)),
        )
    if kind == 1:  # integer: a product, plus a digit
        return (
            f"{name} reads {a} pages a day for {b} days, then {c} more pages. How many pages does {name} read in all?",
            solution([f"{a} \\times {b} = {a * b}", f"{a * b} + {c} = {a * b + c}"], str(a * b + c)),
        )
    if kind == 2:  # fraction: an equal share
        pizzas = rng.randint(1, 9)
        return (
            f"{a} friends share {pizzas} {(item := rng.choice(SHARED))} equally. How many {item} does each friend get?",
            solution([divide(pizzas, a)], tex(Fraction(pizzas, a))),
        )
    if kind == 3:  # money: a price in dollars and a half
        price, count = Fraction(2 * rng.randint(1, 9) + 1, 2), rng.choice([3, 5, 7])  # odd: cents left
        whole, half = int(price), decimal(Fraction(count, 2))
        return (
            f"{name} buys {count} {rng.choice(PRICED)} at ${float(price):.2f} each. "
            f"How much does {name} pay, in dollars?",
            solution(
                [
                    f"{count} \\times {whole} = {count * whole}",
                    f"{count} \\times 0.5 = {half}",
                    f"{count * whole} + {half} = {decimal(count * price)}",
                ],
                decimal(count * price),
            ),
        )
    if kind == 4:  # money: a whole-dollar price after a discount
        off = rng.choice([10, 20, 50])
        price = 10 * rng.randint(1, 9)
        tenth = price // 10
        steps = {
            10: [f"{price} / 10 = {tenth}"],
            20: [f"{price} / 10 = {tenth}", f"2 \\times {tenth} = {2 * tenth}"],
            50: [f"{price} / 2 = {price // 2}"],
        }[off]
        discount = price * off // 100
        return (
            f"A {rng.choice(WORN)} costs ${price} and is on sale for {off}% off. What is the sale price in dollars?",
            solution([*steps, f"{price} - {discount} = {price - discount}"], str(price - discount)),
        )
    if kind == 5:  # integer: a percent of a number
        pct = rng.choice([10, 20, 25, 50])
        step = {10: 10, 20: 10, 25: 4, 50: 2}[pct]
        base = step * rng.randint(1, 9)
        part = base // step
        steps = [f"{base} / {step} = {part}"] + ([f"2 \\times {part} = {2 * part}"] if pct == 20 else [])
        question = rng.choice(
            [
                f"What is ${pct}\\%$ of ${base}$?",
                f"A tank holds {base} liters and is {pct}% full. How many liters of water are in it?",
                f"A school has {base} pupils and {pct}% of them are in the band. How many pupils are in the band?",
            ]
        )
        return question, solution(steps, str(base * pct // 100))
    if kind == 6:  # percent: a part of a whole
        whole = rng.choice([2, 4, 5, 10, 20, 25, 50])
        part = rng.randint(1, whole - 1)
        while (100 * part) % whole:
            part = rng.randint(1, whole - 1)
        pct = 100 * part // whole
        return (
            f"A club has {whole} members and {part} of them {(habit := rng.choice(HABITS))}. "
            f"What percent of the members {habit}?",
            solution([f"100 / {whole} = {100 // whole}", f"{part} \\times {100 // whole} = {pct}"], f"{pct}\\%"),
        )
    if kind == 7:  # integer: two numbers from their sum and difference
        small = rng.randint(1, 40)
        large = small + rng.randint(1, 9)
        s, d = small + large, large - small
        return (
            f"The sum of two numbers is {s} and their difference is {d}. What is the larger number?",
            solution([f"{s} + {d} = {s + d}", f"{s + d} / 2 = {large}"], str(large)),
        )
    if kind == 8:  # fraction or integer: a linear equation
        c = b + rng.randint(1, 9 * a)
        return (
            f"Solve for $x$: ${a}x + {b} = {c}$.",
            solution([f"{c} - {b} = {c - b}", f"x = {divide(c - b, a)}"], tex(Fraction(c - b, a))),
        )
    if kind == 9:  # integer: a perimeter
        return (
            f"A {(shape := rng.choice(SHAPES))[0]} is {a} {shape[1]} long and {b} {shape[1]} wide. "
            f"What is its perimeter in {shape[1]}?",
            solution([f"{a} + {b} = {a + b}", f"2 \\times {a + b} = {2 * (a + b)}"], str(2 * (a + b))),
        )
    if kind == 10:  # fraction or integer: an average
        x, y, z = (rng.randint(1, 9) for _ in range(3))
        return (
            f"What is the average of {x}, {y} and {z}?",
            solution(
                [f"{x} + {y} = {x + y}", f"{x + y} + {z} = {x + y + z}", divide(x + y + z, 3)],
                tex(Fraction(x + y + z, 3)),
            ),
        )
    d = rng.randint(3, 9)  # fraction: a sum of two with one denominator
    p, q = rng.randint(1, d - 1), rng.randint(1, d - 1)
    value = Fraction(p + q, d)
    steps = [f"{frac(p, d)} + {frac(q, d)} = {frac(p + q, d)}"]
    if tex(value) != frac(p + q, d):
        steps.append(f"{frac(p + q, d)} = {tex(value)}")
    return f"Compute ${frac(p, d)} + {frac(q, d)}$.", solution(steps, tex(value))


def rows(n: int = ROWS, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        question, worked = problem(rng)
        if question not in seen:
            seen.add(question)
            out.append({"problem": question, "solution": worked})
    return out


def render(data: list[dict[str, str]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(rows()), encoding="utf-8")
    print(f"wrote {ROWS} problems to {target}")
