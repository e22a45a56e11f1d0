"""Differential test: grpokit's screened math scorer against math-verify unscreened, on answer forms
from GSM8K and MATH (money, percents, units, intervals, sets, matrices, primes, text, unicode).

The reference is `verify(parse(gold), parse(answer))` on the same reading grpokit gives math-verify
(`read_math`, then `$...$` unless the text has its own delimiters), with no screen: every
disagreement is a right answer the screen refused or a wrong one it let through. Attacks (hedges,
relations the gold lacks, a top-level `;`) are built apart and must score 0. The full set is slow;
the default suite runs every seventh pair.
"""

import random

import pytest

from grpokit.sandbox import scorers
from grpokit.sandbox.math_notation import read_math

N_PAIRS = 2000


def _forms(rng: random.Random) -> list[tuple[str, list[str], list[str]]]:
    """(gold, answers that should agree, answers that should not) per answer form."""
    out = []
    for _ in range(60):  # GSM8K: integer golds, money and thousands
        n = rng.choice([rng.randint(1, 99), rng.randint(100, 999), rng.randint(1000, 99999)])
        right = [str(n), f"{n:,}", f"\\${n}", f"\\${n:,}", f"{n}.00", f"\\${n}.00", f"{n} \\text{{ dollars}}"]
        right += [f"{n:,}".replace(",", "\\,"), f"{n:,}".replace(",", "{,}"), f"\\boxed{{{n}}}", f"${n}$"]
        wrong = [str(n + 1), f"\\${n + 1}", str(n * 10), f"{n}.5", f"-{n}", f"{n}1"]
        out.append((str(n), right, wrong))
    for _ in range(15):  # percents: the sign is a label
        p = rng.randint(1, 99)
        out.append((str(p), [f"{p}\\%", f"{p}%", f"{p} \\%"], [f"{p + 1}\\%", str(p / 100), f"{p}0\\%"]))
        out.append((f"{p}\\%", [str(p), f"{p}\\%"], [str(p + 1), f"{p + 1}\\%"]))
    units = ["in", "cm", "m", "inches", "feet", "km", "hours", "minutes", "degrees", "cm^2"]
    for _ in range(15):  # units and degrees
        v, unit = rng.randint(2, 500), rng.choice(units)
        right = [f"{v}\\text{{ {unit}}}", f"{v} \\text{{{unit}}}", f"{v}\\mbox{{ {unit}}}", f"{v}^\\circ", f"{v}°"]
        out.append((str(v), right, [f"{v + 1}\\text{{ {unit}}}", f"{2 * v}^\\circ"]))
    for _ in range(20):  # fractions, decimals, roots, pi
        a, b = rng.randint(1, 30), rng.choice([2, 3, 4, 5, 6, 7, 8, 9, 11])
        if a % b == 0:
            continue
        right = [f"{a}/{b}", f"\\dfrac{{{a}}}{{{b}}}", f"\\frac{{{2 * a}}}{{{2 * b}}}", f"\\tfrac{{{a}}}{{{b}}}"]
        out.append((f"\\frac{{{a}}}{{{b}}}", right, [f"\\frac{{{b}}}{{{a}}}", f"{a}/{b + 1}", f"{a * b}"]))
        k, r = rng.randint(2, 9), rng.choice([2, 3, 5, 7])
        right = [f"{k}\\sqrt{{{r}}}", f"\\sqrt{{{k * k * r}}}", f"{k}√{r}", f"{k} \\sqrt{r}"]
        out.append((f"{k}\\sqrt{{{r}}}", right, [f"{k + 1}\\sqrt{{{r}}}", f"\\sqrt{{{k * r}}}", str(k * r)]))
        out.append((f"{k}\\pi", [f"{k}π", f"\\pi {k}", f"{2 * k}\\pi/2"], [f"{k + 1}\\pi", str(k), f"{k}\\pi^2"]))
    for _ in range(12):  # intervals and inequalities
        a, b = sorted(rng.sample(range(-9, 10), 2))
        out.append((f"({a}, {b}]", [f"({a},{b}]", f"\\left({a}, {b}\\right]"], [f"[{a}, {b}]", f"({a}, {b})"]))
        out.append((f"(-\\infty, {b}]", [f"(-∞, {b}]", f"(-\\infty,{b}]"], [f"(-\\infty, {b})", f"[{b}, \\infty)"]))
        out.append((f"x \\geq {a}", [f"x >= {a}", f"x ≥ {a}", f"{a} \\leq x"], [f"x \\geq {a + 1}", f"x \\leq {a}"]))
        out.append((f"[{a}, {b}]", [f"x ∈ [{a}, {b}]", f"x \\in [{a}, {b}]", f"[{a},{b}]"], [f"[{a}, {b + 1}]"]))
    for _ in range(12):  # sets, tuples and pairs
        items = sorted(rng.sample(range(-9, 10), 3))
        text, shuffled = ", ".join(map(str, items)), ", ".join(map(str, rng.sample(items, 3)))
        wrong = [", ".join(map(str, items[:2])), ", ".join(map(str, [*items, 10]))]
        out.append((f"\\{{{text}\\}}", [shuffled, f"\\{{{shuffled}\\}}"], wrong))
        a, b = items[:2]
        out.append((f"({a}, {b})", [f"({a};{b})", f"({a},{b})", f"\\left({a}, {b}\\right)"], [f"({b}, {a})"]))
    for _ in range(8):  # matrices and vectors
        a, b, c, d = (rng.randint(-9, 9) for _ in range(4))
        gold = f"\\begin{{pmatrix}} {a} & {b} \\\\ {c} & {d} \\end{{pmatrix}}"
        right = [f"\\begin{{pmatrix}}{a}&{b}\\\\{c}&{d}\\end{{pmatrix}}", gold.replace("pmatrix", "bmatrix")]
        out.append((gold, right, [f"\\begin{{pmatrix}} {b} & {a} \\\\ {c} & {d} \\end{{pmatrix}}"]))
        vector, swapped = (f"\\begin{{pmatrix}} {x} \\\\ {y} \\end{{pmatrix}}" for x, y in ((a, b), (b, a)))
        out.append((vector, [vector.replace(" ", ""), vector.replace("pmatrix", "bmatrix")], [swapped]))
    for _ in range(8):  # primes, angles, functions, powers
        v = rng.randint(2, 9)
        out.append((f"{v}x^2", [f"f'(x) = {v}x^2", f"y' = {v}x^2", f"{v}x²"], [f"f'(x) = {v + 1}x^2", f"{v}x^3"]))
        out.append((f"{v * 5}'", [f"{v * 5}'", f"{v * 5}"], [f"{v * 5 + 1}'"]))
        out.append((f"\\exp(x^{v})", [f"e^{{x^{v}}}", f"e^{{x^{{{v}}}}}"], [f"e^{{x^{v + 1}}}", f"\\exp(x)^{v}"]))
        out.append((str(v), [f"\\log_2({2**v})", f"\\log_{{2}} {2**v}"], [f"\\log_2({2 ** (v + 1)})"]))
        out.append((f"\\operatorname{{arccot}}({v})", [f"arccot({v})", f"\\cot^{{-1}}({v})"], [f"arccot({v + 1})"]))
        out.append((f"\\frac{{{v}}}{{9}}", [f"0.\\overline{{{v}}}", f"0.\\bar{{{v}}}", f"0.{str(v) * 12}"], ["0.1"]))
        out.append((f"{v} \\cdot 10^{{3}}", [f"{v}000", f"{v} \\times 10^3", f"{v},000"], [f"{v} \\cdot 10^{{4}}"]))
    texts = ["\\text{St. Louis}", "\\text{Tuesday}", "\\text{(A)}", "\\text{even}", "10:30 \\text{ a.m.}", "\\#3", "∠A"]
    for gold in texts:  # text answers: equal text passes, other text does not
        out.append((gold, [gold, f" {gold} "], [t for t in texts if t != gold][:3]))
    for v in range(2, 6):  # unicode fractions, signs and symbols
        out.append(("\\frac{1}{2}", ["½", "0.5", "1/2"], ["⅓", "¼"]))
        out.append((f"-{v}", [f"−{v}", f"-{v}.0"], [str(v), f"−{v + 1}"]))
        out.append(("\\infty", ["∞", "\\infty"], ["-∞", "0"]))
        out.append((f"x^{{{v}}}", [f"x^{v}", f"x{'²³⁴⁵'[v - 2]}"], [f"x^{{{v + 1}}}"]))
    return out


def pairs() -> list[tuple[str, str]]:
    """(gold, answer) pairs, none of them an attack; deterministic."""
    rng = random.Random(53)
    out = [(gold, answer) for gold, right, wrong in _forms(rng) for answer in [*right, *wrong]]
    assert len(out) >= N_PAIRS, len(out)
    return rng.sample(out, N_PAIRS)  # every form, in a fixed random order


def attacks(gold: str) -> list[str]:
    return [f"{gold}1 \\approx {gold}", f"\\pm {gold}", f"{gold}1; {gold}", f"1000 \\text{{ or }} {gold}"]


def _delimited(text: str) -> str:
    return text if any(mark in text.replace("\\$", "") for mark in ("$", "\\(", "\\[", "\\boxed")) else f"${text}$"


def reference(gold: str, answer: str) -> bool:
    from math_verify import parse, verify

    parsed_gold, parsed = parse(_delimited(read_math(gold))), parse(_delimited(read_math(answer)))
    return bool(parsed_gold and parsed and verify(parsed_gold, parsed))


def _agreement(cases: list[tuple[str, str]]) -> None:
    disagreements = [(g, a) for g, a in cases if scorers.math_equal(a, g) != reference(g, a)]
    agreed = 1 - len(disagreements) / len(cases)
    assert agreed >= 0.999, f"{len(disagreements)} of {len(cases)} disagree: {disagreements[:10]}"
    golds = sorted({g for g, _ in cases})
    assert not [(g, a) for g in golds for a in attacks(g) if scorers.math_equal(a, g)], "an attack was paid"


def test_the_pairs_cover_right_and_wrong_answers():
    cases = pairs()
    assert len(cases) >= N_PAIRS
    verdicts = [reference(g, a) for g, a in cases[::7]]
    assert 0.3 < sum(verdicts) / len(verdicts) < 0.8  # both kinds, in numbers


def test_screened_scorer_agrees_with_unscreened_math_verify_on_a_sample():
    _agreement(pairs()[::7])


@pytest.mark.slow
def test_screened_scorer_agrees_with_unscreened_math_verify_on_every_pair():
    _agreement(pairs())
