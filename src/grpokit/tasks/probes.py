"""Universal answers: text that a verifier must not pay on more than one problem.

A strict verifier pays an answer only on the problems it solves. A constant (`0`, `nan`, `banana`), a
shape (`[]`, a list of NaN as long as the gold), a near miss (the gold off by one) or an arithmetic
expression of small numbers solves no problem by construction; when one is paid on two or more problems,
the verifier pays something other than the answer: a tolerance that swallows a wrong value, `bool` of
any string, `exp(-nan)`, prefix partial credit, a count of numbers that never checks which ones. The same
battery audits every reasoning-gym dataset (`grpokit tasks`) and every recipe's task (`grpokit rewards
check`).

>>> [name for name, _ in probes("[1, 2, 3]", "7")][:3]
['empty', '0', '1']
>>> dict(probes("[1, 2, 3]", "7"))["the gold off by one"], dict(probes("[1, 2, 3]", "7"))["a list of NaN"]
('[1, 2, 4]', '[NaN, NaN, NaN]')
>>> [dict(probes(gold, "7"))["the gold off by one"] for gold in ("97.45", "-0.5", "897303639322.6", "x = 0")]
['98.45', '0.5', '898303639322.6', 'x = 1']
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

SLOW_SECONDS = 1.0  # a scoring call slower than this stalls a run: a finding of its own
CONSTANTS = ("", "0", "1", "nan", "inf", "[]", "True", "False", "banana")
EXPRESSIONS = ("1*2*3*4", "(1+1+1)*8")  # in-range numbers that make 24, none of them the problem's
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def probes(gold: str, other_gold: str) -> list[tuple[str, str]]:
    """(name, answer) pairs for one problem whose gold answer is `gold`; `other_gold` is another problem's."""
    cases = [(c or "empty", c) for c in CONSTANTS]
    cases.append(("another problem's gold", other_gold))
    numbers = list(_NUMBER.finditer(gold))
    if numbers:
        last = numbers[-1]
        value = Decimal(last.group())
        # One more; for a number of 4 digits or more, one more in its third significant figure, so that an
        # answer asked for to 3 significant figures is still wrong (897303639322.6 -> 898303639322.6).
        bump = Decimal(10) ** max(0, value.copy_abs().adjusted() - 2) if value else Decimal(1)
        cases.append(("the gold off by one", gold[: last.start()] + str(value + bump) + gold[last.end() :]))
    cases.append(("a list of NaN", "[" + ", ".join(["NaN"] * _length(gold)) + "]"))
    cases += [("an expression of in-range numbers", e) for e in EXPRESSIONS]
    return cases


def same_answer(probe: str, gold: str) -> bool:
    """True when `probe` is the gold written another way (case, spacing, `0` for `0.0`): paying it is right."""
    if " ".join(probe.split()).casefold() == " ".join(gold.split()).casefold():
        return True
    try:
        a, b = float(probe), float(gold)
    except (ValueError, OverflowError):
        return False
    return math.isfinite(a) and a == b


@dataclass
class Audit:
    """What a verifier paid: for each probe, the problems it paid on; and its slowest calls."""

    problems: int
    paid: dict[str, list[int]] = field(default_factory=dict)
    slow: dict[str, float] = field(default_factory=dict)  # probe -> seconds of its slowest call over the bound
    answers: dict[str, str] = field(default_factory=dict)  # probe -> the answer text it was paid (or slow) for

    def universal(self) -> dict[str, int]:
        """Probes paid on more than one problem: probe name -> how many problems."""
        return {name: len(set(where)) for name, where in self.paid.items() if len(set(where)) > 1}

    def findings(self) -> list[str]:
        found = [f"pays {name!r} on {n} of {self.problems} problems" for name, n in self.universal().items()]
        return found + [f"{name!r} took {seconds:.1f} s to score" for name, seconds in self.slow.items()]


def audit(
    score: Callable[[str, int], float],
    golds: list[str],
    threshold: float = 1.0,
    slow_seconds: float | None = SLOW_SECONDS,
) -> Audit:
    """Score every probe on every problem: `score(answer, i)` is the verifier's value for problem `i`,
    whose gold answer is `golds[i]`. A value >= `threshold` is paid, unless the probe is the gold itself."""
    result = Audit(problems=len(golds))
    for i, gold in enumerate(golds):
        other = golds[(i + 1) % len(golds)]
        for name, answer in probes(gold, other):
            if same_answer(answer, gold):
                continue
            start = time.perf_counter()
            try:
                value = float(score(answer, i))
            except Exception:  # a verifier that raises pays nothing here; the caller reports raising itself
                value = 0.0
            elapsed = time.perf_counter() - start
            if slow_seconds is not None and elapsed > slow_seconds:
                result.slow[name] = max(result.slow.get(name, 0.0), elapsed)
                result.answers.setdefault(name, answer)
            if value >= threshold or math.isnan(value):
                result.paid.setdefault(name, []).append(i)
                result.answers.setdefault(name, answer)
    return result


def _length(gold: str) -> int:
    """How many items the gold lists (1 when it is not a list)."""
    try:
        parsed = json.loads(gold.replace("'", '"'))
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, list):
        return max(len(parsed), 1)
    return max(len([part for part in gold.strip("[]() ").split(",") if part.strip()]), 1)
