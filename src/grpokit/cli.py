"""grpokit command line: parses arguments and dispatches to one stage module each."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from grpokit.config import RecipeError, load_recipe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grpokit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a recipe: eval before, cold start, GRPO, eval after")
    train.add_argument("recipe")
    train.add_argument("overrides", nargs="*", help="key.sub=value, e.g. grpo.max_steps=10")

    ev = sub.add_parser("eval", help="greedy held-out accuracy and format rate")
    ev.add_argument("recipe")
    ev.add_argument("overrides", nargs="*")
    ev.add_argument("--model", help="model folder, hub id or run directory (default: the recipe's model)")

    rep = sub.add_parser("report", help="draw a run's curves and before/after numbers (curves.png)")
    rep.add_argument("run_dir")

    sub.add_parser("tasks", help="list registered tasks and their parameters")
    rw = sub.add_parser("rewards", help="list registered rewards, or red-team a recipe's: rewards check RECIPE")
    rw.add_argument("action", nargs="?", choices=["list", "check"], default="list")
    rw.add_argument("recipe", nargs="?")
    rw.add_argument("--n", type=int, default=8, help="held-out problems to build the battery from")

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    try:
        return COMMANDS[args.command](args)
    except (RecipeError, FileNotFoundError, OSError) as err:
        print(f"grpokit: error: {err}", file=sys.stderr)
        return 2


def cmd_train(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe, args.overrides)  # every check runs before a model loads
    from grpokit import train

    run_dir = train.main(recipe)
    print(f"run directory: {run_dir}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe, args.overrides)
    from grpokit import evaluate

    result = evaluate.main(recipe, args.model)
    for key, value in result.metrics().items():
        print(f"{key:<28} {value:.4f}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from grpokit import report

    print(report.main(args.run_dir))
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from grpokit.tasks import TASKS

    for name, cls in sorted(TASKS.items()):
        doc = ((cls.__module__ and sys.modules[cls.__module__].__doc__) or "").strip().splitlines()[0]
        params = ", ".join(f"{f.name}={_default(f)}" for f in dataclasses.fields(cls.config_class))
        print(f"{name:<14} {doc}\n{'':<14} params: {params}")
    return 0


def cmd_rewards(args: argparse.Namespace) -> int:
    from grpokit.rewards import REWARDS

    if args.action == "check":
        if not args.recipe:
            raise RecipeError("usage: grpokit rewards check RECIPE.yaml")
        from grpokit import redteam

        findings = redteam.main(load_recipe(args.recipe), args.n)
        for finding in findings:
            print(finding)
        print(
            f"{len(findings)} finding(s): degenerate completions that the rewards pay for"
            if findings
            else "no findings: no degenerate completion beat an honest wrong answer"
        )
        return 1 if findings else 0

    for name, factory in sorted(REWARDS.items()):
        doc = (factory.__doc__ or "").strip().splitlines()[0]
        print(f"{name:<16} {doc}")
    return 0


def _default(f: dataclasses.Field) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return "?"


COMMANDS = {"train": cmd_train, "eval": cmd_eval, "report": cmd_report, "tasks": cmd_tasks, "rewards": cmd_rewards}

if __name__ == "__main__":
    sys.exit(main())
