"""Write data/shop_math.jsonl: one- and two-step word problems with integer answers and worked solutions.

The example data of the `custom` task (recipes/smollm2/custom_qa.yaml): a question/answer file as a user
would bring, written here from templates, not copied from any data set. Each row has `question`,
`answer` (an integer, as text) and `solution`, the arithmetic in the steps the arithmetic task's
demonstrations use (`4 * 3 = 12. 12 + 5 = 17.`), so the embedded model can imitate it. Shopping totals,
change, unit prices, sharing, ages, distances, wages, time and stock, each in several wordings.
The numbers stay in the range the default arithmetic task trains (factors and divisors 2..9, a one-digit
number added to or taken from a result under 100): a range a 135M model learns to compute in one CPU run,
so what GRPO adds over the warm-up can show. Wider numbers (two-digit products, two-digit differences) left
the embedded model's errors in its arithmetic facts, which no run of this size taught.
Deterministic: `python scripts/make_shop_math.py` rewrites the same file, and a test checks that it does.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

ROWS = 800
OUT = Path(__file__).resolve().parents[1] / "data" / "shop_math.jsonl"

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Leo", "Maya", "Nils"]
ITEMS = ["pen", "notebook", "apple", "mug", "ticket", "bagel", "candle", "ball", "plant", "hat", "book", "lamp"]
THINGS = ["stickers", "marbles", "cards", "beads", "stamps", "shells", "coins", "cookies"]

Problem = tuple[str, str, int]  # (question, worked solution, answer)


def step(x: int, op: str, y: int) -> tuple[str, int]:
    """`x op y = z.` and z, for +, -, * and an exact /."""
    z = {"+": x + y, "-": x - y, "*": x * y, "/": x // y}[op]
    assert op != "/" or x % y == 0, (x, y)
    return f"{x} {op} {y} = {z}.", z


def total(rng: random.Random) -> Problem:
    name, item, n, price = rng.choice(NAMES), rng.choice(ITEMS), rng.randint(2, 9), rng.randint(2, 9)
    text, cost = step(n, "*", price)
    question = rng.choice(
        [
            f"{name} buys {n} {item}s at {price} dollars each. How many dollars does {name} spend?",
            f"One {item} costs {price} dollars. What do {n} {item}s cost in dollars?",
            f"A shop sells {item}s for {price} dollars each. How much do {n} of them cost?",
        ]
    )
    return question, text, cost


def total_plus(rng: random.Random) -> Problem:
    name, item, other = rng.choice(NAMES), *rng.sample(ITEMS, 2)
    n, price, extra = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 9)
    first, cost = step(n, "*", price)
    second, spent = step(cost, "+", extra)
    question = rng.choice(
        [
            f"{name} buys {n} {item}s at {price} dollars each and one {other} for {extra} dollars. "
            f"How much does {name} spend in all?",
            f"{n} {item}s cost {price} dollars each, and a {other} costs {extra} dollars. What is the total "
            f"cost of the {item}s and the {other}?",
        ]
    )
    return question, f"{first} {second}", spent


def change(rng: random.Random) -> Problem:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    n, price = rng.randint(2, 4), rng.randint(2, 4)
    bill = rng.choice([b for b in (10, 20) if b > n * price])
    first, cost = step(n, "*", price)
    second, back = step(bill, "-", cost)
    question = rng.choice(
        [
            f"{name} buys {n} {item}s at {price} dollars each and pays with a {bill}-dollar bill. "
            f"How much change does {name} get?",
            f"{n} {item}s cost {price} dollars each. {name} hands over {bill} dollars. How many dollars come back?",
        ]
    )
    return question, f"{first} {second}", back


def unit_price(rng: random.Random) -> Problem:
    item, n, price = rng.choice(ITEMS), rng.randint(2, 9), rng.randint(2, 9)
    text, each = step(n * price, "/", n)
    question = rng.choice(
        [
            f"{n} {item}s cost {n * price} dollars. How much does one {item} cost?",
            f"A pack of {n} {item}s is sold for {n * price} dollars. What is the price of one {item} in dollars?",
        ]
    )
    return question, text, each


def share(rng: random.Random) -> Problem:
    name, thing, friends, each = rng.choice(NAMES), rng.choice(THINGS), rng.randint(2, 9), rng.randint(2, 9)
    text, got = step(friends * each, "/", friends)
    question = rng.choice(
        [
            f"{name} shares {friends * each} {thing} equally among {friends} friends. How many {thing} does "
            "each friend get?",
            f"{friends * each} {thing} are split evenly into {friends} bags. How many {thing} are in each bag?",
        ]
    )
    return question, text, got


def share_kept(rng: random.Random) -> Problem:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    kept, friends, each = rng.randint(1, 9), rng.randint(2, 9), rng.randint(2, 9)
    start = kept + friends * each
    first, rest = step(start, "-", kept)
    second, got = step(rest, "/", friends)
    question = (
        f"{name} has {start} {thing}, keeps {kept} and shares the rest equally among {friends} friends. "
        f"How many {thing} does each friend get?"
    )
    return question, f"{first} {second}", got


def ages(rng: random.Random) -> Problem:
    a, b = rng.sample(NAMES, 2)
    age, gap, years = rng.randint(10, 60), rng.randint(2, 9), rng.randint(2, 9)
    kind = rng.randrange(3)
    if kind == 0:
        text, older = step(age, "+", gap)
        return f"{a} is {age} years old. {b} is {gap} years older than {a}. How old is {b}?", text, older
    if kind == 1:
        child, factor = rng.randint(2, 9), rng.randint(2, 9)
        text, value = step(child, "*", factor)
        return f"{b} is {child} years old. {b}'s aunt is {factor} times as old. How old is the aunt?", text, value
    first, younger = step(age, "-", gap)
    second, later = step(younger, "+", years)
    return (
        f"{a} is {age} years old and {b} is {gap} years younger. How old will {b} be in {years} years?",
        f"{first} {second}",
        later,
    )


def distance(rng: random.Random) -> Problem:
    speed, hours = rng.randint(2, 9), rng.randint(2, 9)
    kind = rng.randrange(3)
    if kind == 0:
        text, far = step(speed, "*", hours)
        vehicle = rng.choice(["A walker", "A boat", "A cyclist"])
        return f"{vehicle} travels at {speed} km per hour for {hours} hours. How many km does it go?", text, far
    if kind == 1:
        text, fast = step(speed * hours, "/", hours)
        return f"A boat covers {speed * hours} km in {hours} hours. What is its speed in km per hour?", text, fast
    name, morning, evening, days = rng.choice(NAMES), rng.randint(1, 5), rng.randint(1, 5), rng.randint(2, 9)
    first, daily = step(morning, "+", evening)
    second, far = step(daily, "*", days)
    return (
        f"{name} cycles {morning} km every morning and {evening} km every evening. How many km does {name} "
        f"cycle in {days} days?",
        f"{first} {second}",
        far,
    )


def wages(rng: random.Random) -> Problem:
    name, rate, hours, bonus = rng.choice(NAMES), rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 9)
    first, pay = step(rate, "*", hours)
    if rng.random() < 0.5:
        return f"{name} earns {rate} dollars an hour and works {hours} hours. How much does {name} earn?", first, pay
    second, paid = step(pay, "+", bonus)
    return (
        f"{name} works {hours} hours at {rate} dollars an hour and gets a {bonus}-dollar tip. How many dollars "
        f"does {name} get in all?",
        f"{first} {second}",
        paid,
    )


def days(rng: random.Random) -> Problem:
    weeks, extra = rng.randint(2, 9), rng.randint(1, 6)
    first, whole = step(weeks, "*", 7)
    second, length = step(whole, "+", extra)
    what = rng.choice(["A holiday", "A school trip", "A building job", "A festival"])
    return f"{what} lasts {weeks} weeks and {extra} days. How many days is that?", f"{first} {second}", length


def stock(rng: random.Random) -> Problem:
    item = rng.choice(ITEMS)
    morning, afternoon = rng.randint(1, 5), rng.randint(1, 5)
    start = morning + afternoon + rng.randint(1, 40)
    first, sold = step(morning, "+", afternoon)
    second, left = step(start, "-", sold)
    question = rng.choice(
        [
            f"A shop has {start} {item}s. It sells {morning} in the morning and {afternoon} in the afternoon. "
            f"How many {item}s are left?",
            f"There are {start} {item}s in a store room. {morning} are taken on Monday and {afternoon} on "
            "Tuesday. How many remain?",
        ]
    )
    return question, f"{first} {second}", left


def packs(rng: random.Random) -> Problem:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    count, size, given = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 9)
    first, have = step(count, "*", size)
    given = min(given, have - 1)
    second, left = step(have, "-", given)
    return (
        f"{name} buys {count} packs of {size} {thing} and gives away {given} {thing}. How many {thing} does "
        f"{name} have now?",
        f"{first} {second}",
        left,
    )


def discount(rng: random.Random) -> Problem:
    item, sale, off, n = rng.choice(ITEMS), rng.randint(2, 9), rng.randint(1, 5), rng.randint(2, 9)
    price = sale + off
    first, sale = step(price, "-", off)
    second, cost = step(sale, "*", n)
    return (
        f"A {item} costs {price} dollars, and today every {item} is {off} dollars cheaper. What do {n} {item}s "
        "cost today?",
        f"{first} {second}",
        cost,
    )


def savings(rng: random.Random) -> Problem:
    name, weekly, weeks = rng.choice(NAMES), rng.randint(2, 9), rng.randint(2, 9)
    text, needed = step(weekly * weeks, "/", weekly)
    return (
        f"{name} saves {weekly} dollars every week. How many weeks does it take to save {weekly * weeks} dollars?",
        text,
        needed,
    )


KINDS: list[Callable[[random.Random], Problem]] = [
    total,
    total_plus,
    change,
    unit_price,
    share,
    share_kept,
    ages,
    distance,
    wages,
    days,
    stock,
    packs,
    discount,
    savings,
]


def rows(n: int = ROWS, seed: int = 0) -> list[dict[str, str]]:
    """`n` distinct questions, the kinds taken in turn, each drawn by `random.Random(f"{seed}:{index}")`."""
    out, seen, index = [], set(), 0
    while len(out) < n:
        rng = random.Random(f"{seed}:{index}")
        question, solution, answer = KINDS[index % len(KINDS)](rng)
        index += 1
        if question not in seen:
            seen.add(question)
            out.append({"question": question, "answer": str(answer), "solution": solution})
    return out


def render(data: list[dict[str, str]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(rows()), encoding="utf-8")
