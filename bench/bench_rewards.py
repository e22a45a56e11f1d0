"""`make bench-rewards`: math rewards per second on 1,024 completions, inline vs grpokit's sandbox; one table.

The completions are made here, deterministic per index: 128 problems (integer, fraction and decimal
golds) x 8 completions each, in the order a GRPO batch holds them: the right answer boxed, as an
unreduced fraction, as a decimal and as a plain number; two wrong answers; junk (an empty answer,
prose, a tag mess); and an adversarial answer (code, a power tower, a hedge, a list ending in the gold).
TRL hands a reward the completions of one step at a time; every contender gets them `--per-call` at a
time. Contenders:

- (a) inline: math-verify in the trainer's process, `verify(parse(solution), parse(completion))` per
  completion, as a TRL user's reward function calls it (no screen, no confinement, no timeout off the
  main thread);
- (b) grpokit, one sandbox round trip per completion: the correctness reward without its batch form
  (what `to_trl` did before batching);
- (c) grpokit batched: the math task's correctness reward as `to_trl` now calls it, one round trip per
  call of up to 256 completions;
- (ref) grpokit's own check (screen + math-verify) run in the trainer's process without the sandbox:
  not a contender (model output must not be scored there), a floor that shows what the sandbox costs.

It checks that (b) and (c) agree on every completion, and counts where (a) and (c) differ, by kind.
Numbers go to bench/results/results_rewards.json as well.

Run: `make bench-rewards` (or python bench/bench_rewards.py [--per-call 64,256] [--out PATH]).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

from grpokit.kernels.precision import cpu_name

PROBLEMS, PER_PROBLEM, SEED = 128, 8, 15
KINDS = ("right boxed", "right fraction", "right decimal", "right plain", "wrong", "wrong boxed", "junk", "adversarial")


def gold_value(index: int) -> Fraction:
    rng = random.Random(SEED + index)
    if index % 3 == 0:
        return Fraction(rng.randint(-50, 999))
    value = Fraction(rng.randint(1, 399), rng.choice((2, 4, 5, 8)))
    return value if value.denominator > 1 else value + Fraction(1, 2)


def latex(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def decimal(value: Fraction) -> str:
    return str(value.numerator) + ".0" if value.denominator == 1 else f"{float(value):g}"


def plain(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def answer_for(kind: str, value: Fraction, rng: random.Random) -> str:
    gold = latex(value)
    k = rng.randint(2, 9)
    junk = ["", "I am not sure.", "\\text{unknown}", "<answer>", "the answer is in the thought", "x"]
    adversarial = [
        "__import__('os').system('true')",
        "9**9**9**9",
        f"{plain(value + 1)} \\approx {plain(value)}",
        f"-1000, {plain(value)}",
        ", ".join(str(n) for n in range(-5, 101)),
        f"{plain(value)} or {plain(value + 1)}",
    ]
    return {
        "right boxed": f"\\boxed{{{gold}}}",
        "right fraction": f"\\frac{{{value.numerator * k}}}{{{value.denominator * k}}}",
        "right decimal": decimal(value),
        "right plain": plain(value),
        "wrong": plain(value + rng.randint(1, 5)),
        "wrong boxed": f"\\boxed{{{latex(value * 2 + 1)}}}",
        "junk": rng.choice(junk),
        "adversarial": rng.choice(adversarial),
    }[kind]


def build_completions() -> tuple[list[dict], list[str], list[str]]:
    """(problems as numina rows, completions, kind of each completion), deterministic."""
    problems, completions, kinds = [], [], []
    for i in range(PROBLEMS):
        value = gold_value(i)
        problems.append({"problem": f"Problem {i}: what is the value?", "solution": f"So $\\boxed{{{latex(value)}}}$."})
        for j, kind in enumerate(KINDS[:PER_PROBLEM]):
            rng = random.Random(SEED * 1000 + i * PER_PROBLEM + j)
            a, b = rng.randint(2, 30), rng.randint(2, 30)
            thought = f"First {a} + {b} = {a + b}, then I check the units."
            completions.append(f"<think>{thought}</think>\n<answer>{answer_for(kind, value, rng)}</answer>")
            kinds.append(kind)
    return problems, completions, kinds


def inline_reward(completions: list[str], solution: list[str], **kwargs: object) -> list[float]:
    """A TRL reward function the way TRL users write one with math-verify: parse both sides, verify."""
    from math_verify import parse, verify

    return [float(verify(parse(gold), parse(text))) for text, gold in zip(completions, solution, strict=True)]


def unsandboxed_reward(completions: list[str], answer: list[str], **kwargs: object) -> list[float]:
    """grpokit's own check (the screen, then math-verify) in the trainer's process, with no sandbox: not a
    way to score model output (the screen would be the only layer), only a floor that splits (c)'s time."""
    from grpokit.sandbox.scorers import math_equal
    from grpokit.tasks.parsing import extract_answer

    answers = [extract_answer(text) for text in completions]
    return [float(a is not None and math_equal(a, str(g))) for a, g in zip(answers, answer, strict=True)]


def timed(reward, completions: list[str], rows: list[dict], per_call: int) -> tuple[list[float], float]:
    scores: list[float] = []
    start = time.perf_counter()
    for i in range(0, len(completions), per_call):
        chunk = rows[i : i + per_call]
        columns = {key: [row[key] for row in chunk] for key in ("answer", "solution")}
        scores += reward(prompts=[""] * len(chunk), completions=completions[i : i + per_call], **columns)
    return scores, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-call", default="64,256", help="completions per reward call for (c), comma-separated")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "results_rewards.json"))
    args = parser.parse_args()

    from grpokit.rewards import make_reward, to_trl
    from grpokit.sandbox.client import shared_sandbox
    from grpokit.tasks import build_task

    problems, completions, kinds = build_completions()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "problems.jsonl"
        source.write_text("".join(json.dumps(p) + "\n" for p in problems))
        task = build_task("math", {"source": str(source), "eval_fraction": 0.5})
        by_question = {row["question"]: row for split in task.checked.rows.values() for row in split}
        rows = [by_question[p["problem"]] for p in problems for _ in range(PER_PROBLEM)]
        box = shared_sandbox()
        task.score(completions[0], rows[0])  # starts the worker (preloads its verifiers) before any clock runs
        inline_reward([completions[0]], [rows[0]["solution"]])  # math-verify's lazy imports, here too
        empty = []  # what a round trip costs with no verifier work: the fork, confinement, JSON and pipes
        for _ in range(50):
            start = time.perf_counter()
            box.call("operator:add", 1, 2)
            empty.append(time.perf_counter() - start)

        correctness = make_reward("correctness", task)
        contenders = [("(a) math-verify inline, in the trainer", inline_reward, 64)]
        contenders.append(
            ("(b) grpokit, one round trip per completion", to_trl("c", lambda t, r: task.score(t, r)), 64)
        )
        for per_call in (int(n) for n in args.per_call.split(",")):
            contenders.append((f"(c) grpokit batched, {per_call} per call", to_trl("c", correctness), per_call))
        contenders.append(("(ref) grpokit's check in the trainer, no sandbox", unsandboxed_reward, 64))
        results = []
        for name, reward, per_call in contenders:
            before = box.requests
            scores, seconds = timed(reward, completions, rows, per_call)
            round_trips = box.requests - before
            results.append(dict(name=name, per_call=per_call, seconds=seconds, round_trips=round_trips, scores=scores))
            print(f"  {name}: {seconds:.1f} s", flush=True)

    load = (load_before, os.getloadavg()[0])
    report(results, kinds, statistics.median(empty), load, args.out)


def report(results: list[dict], kinds: list[str], empty_s: float, load: tuple[float, float], out: str) -> None:
    n, base = len(kinds), results[1]["seconds"]
    inline, batched = results[0]["scores"], results[2]["scores"]
    print(f"\nMath rewards on {n} completions ({PROBLEMS} problems x {PER_PROBLEM}); CPU: {cpu_name()}, "
          f"{os.cpu_count()} cores; 1-min load average {load[0]:.2f} before, {load[1]:.2f} after "
          "(this benchmark alone adds about 1)")  # fmt: skip
    print("| contender | completions per call | round trips | seconds | rewards/s | vs (b) | scored right |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        trips = r["round_trips"] if r["name"].startswith(("(b)", "(c)")) else "-"
        r["rewards_per_s"], r["scored_right"] = n / r["seconds"], sum(1 for s in r["scores"] if s == 1.0)
        cells = [r["name"], r["per_call"], trips, f"{r['seconds']:.2f}", f"{r['rewards_per_s']:.0f}"]
        print("| " + " | ".join(map(str, [*cells, f"{base / r['seconds']:.1f}x", r["scored_right"]])) + " |")
    sandboxed = [r for r in results if r["name"].startswith(("(b)", "(c)"))]
    same = sum(all(r["scores"][i] == batched[i] for r in sandboxed) for i in range(n))
    floor = sum(a == c for a, c in zip(results[-1]["scores"], batched, strict=True))
    # Where (a) and (c) differ: the completion's kind and who said right.
    differ = Counter(
        f"{kind}: {'inline' if a == 1.0 else 'grpokit'} right"
        for kind, a, c in zip(kinds, inline, batched, strict=True)
        if a != c
    )
    agree = n - sum(differ.values())
    print(f"\nOne round trip with no verifier work (operator:add), median of 50: {empty_s * 1000:.1f} ms")
    print(f"(b) and every (c) agree on {same} of {n} completions" + ("" if same == n else "  <-- NOT ALL"))
    print(f"(ref) and (c) agree on {floor} of {n}")
    print(f"(a) inline and (c) batched agree on {agree} of {n} ({agree / n:.1%}); they differ on:")
    for what, count in sorted(differ.items()):
        print(f"  {what}: {count}")
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "load_average_before_after": load,
        "completions": n,
        "contenders": [
            {k: r[k] for k in ("name", "per_call", "seconds", "round_trips", "rewards_per_s", "scored_right")}
            for r in results
        ],
        "empty_round_trip_ms": empty_s * 1000,
        "b_and_c_agree": same,
        "ref_and_c_agree": floor,
        "a_and_c_agree": agree,
        "a_and_c_differ": dict(sorted(differ.items())),
    }
    Path(out).write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
