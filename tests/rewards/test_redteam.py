import functools
import time
from pathlib import Path

import pytest

from grpokit.cli.commands import main
from grpokit.rewards import make_reward, redteam
from grpokit.rewards.redteam import battery, check
from grpokit.tasks import TASKS, build_task, task_of
from grpokit.tasks.equations import equations
from grpokit.tasks.parsing import Tags
from tests.data_files import build_test_task

SAFE_REWARDS = ["format", "format_lenient", "format_partial", "tag_count", "correctness"]


@pytest.mark.parametrize("task_name", sorted(TASKS))
def test_every_task_and_safe_reward_pays_nothing_for_degenerate_answers(task_name, tmp_path):
    task = build_test_task(task_name, tmp_path)
    rewards = [(name, 1.0, make_reward(name, task)) for name in SAFE_REWARDS]
    # Time left out: math-verify's call on the 100 KB case nears the 1 s bound on a loaded machine.
    findings = check(task, rewards, task.dataset("test", 3), slow_seconds=None)
    assert findings == [], "\n".join(map(str, findings))


def test_a_naive_reward_is_caught():
    task = build_task("arithmetic")

    def substring(completion, example):  # the classic mistake: "the right number appears somewhere"
        return 1.0 if str(example["answer"]) in completion else 0.0

    findings = check(task, [("substring", 1.0, substring)], task.dataset("test", 2))
    cases = {f.case for f in findings}
    assert {"no answer block", "answer only inside <think>", "prose, no tags"} <= cases


def test_raising_and_non_finite_rewards_are_caught():
    task = build_task("arithmetic")

    def broken(completion, example):
        if "__import__" in completion:
            raise RuntimeError("boom")
        return float("inf") if "9**9" in completion else 0.0

    problems = {f.problem for f in check(task, [("broken", 1.0, broken)], task.dataset("test", 1))}
    assert any("raised RuntimeError: boom" in p for p in problems)
    assert any("returned inf" in p for p in problems)


def test_a_slow_reward_call_is_reported():
    """A call over the bound is a finding: a reward that takes seconds on a long completion stalls a run."""
    task = build_task("arithmetic")

    def slow_on_long_text(completion, example):
        if len(completion) > 10_000:
            time.sleep(0.2)
        return 0.0

    findings = check(task, [("slow", 1.0, slow_on_long_text)], task.dataset("test", 1), slow_seconds=0.05)
    assert [(f.case, f.problem[: len("reward slow took")]) for f in findings] == [
        ("100 KB completion", "reward slow took")
    ]


def test_length_reward_paying_for_padding_is_reported():
    """Cosine length pays a long wrong answer more than a short one: the check says so."""
    task = build_task("arithmetic")
    rewards = [
        ("correctness", 1.0, make_reward("correctness", task)),
        ("length_cosine", 1.0, make_reward("length_cosine", task, {"max_chars": 1000})),
    ]
    findings = check(task, rewards, task.dataset("test", 1))
    assert any(f.case == "100 KB completion" for f in findings)


def test_cli_check(capsys):
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "smollm2" / "arithmetic_grpo.yaml"
    assert main(["rewards", "check", str(recipe), "--n", "3"]) == 0
    assert "no findings" in capsys.readouterr().out
    assert main(["rewards", "check"]) == 2


REASONING = Tags(think="reasoning")


@pytest.mark.parametrize("task_name", sorted(TASKS))
def test_the_battery_speaks_the_recipes_tags(task_name, tmp_path):
    task = build_test_task(task_name, tmp_path, REASONING)
    cases = battery(task, task.dataset("test", 1)[0])
    assert all("<think>" not in completion for _, completion in cases)
    assert any("<reasoning>" in completion for _, completion in cases)
    rewards = [(name, 1.0, make_reward(name, task)) for name in SAFE_REWARDS]
    # Time left out: math-verify's call on the 100 KB case nears the 1 s bound on a loaded machine.
    findings = check(task, rewards, task.dataset("test", 3), slow_seconds=None)
    assert findings == [], "\n".join(map(str, findings))


def test_the_battery_in_other_tags_still_catches_a_naive_reward():
    task = build_task("arithmetic", tags=REASONING)

    def substring(completion, example):
        return 1.0 if str(example["answer"]) in completion else 0.0

    cases = {f.case for f in check(task, [("substring", 1.0, substring)], task.dataset("test", 2))}
    assert {"no answer block", "answer only inside <think>"} <= cases


def test_cli_check_of_a_recipe_with_reasoning_tags(tmp_path, capsys):
    import yaml

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "smollm2" / "arithmetic_grpo.yaml"
    raw = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    raw["task"]["tags"] = {"think": "reasoning"}
    path = tmp_path / "reasoning.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert main(["rewards", "check", str(path), "--n", "3"]) == 0
    assert "no findings" in capsys.readouterr().out


RECIPES = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "recipes").rglob("*.yaml")
    if p.parent.name != "accelerate" and not p.name.startswith("accelerate")  # launch configs, not recipes
)


@pytest.mark.parametrize("recipe", RECIPES, ids=[str(p.relative_to(p.parents[1])) for p in RECIPES])
def test_rewards_check_passes_on_every_shipped_recipe(recipe, capsys, monkeypatch):
    """`grpokit rewards check` on each recipe whose data this offline machine can build."""
    from grpokit.recipe.load import load_recipe

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(recipe.parents[2])  # recipes name their data files from the repository root
    loaded = load_recipe(recipe)
    try:
        task_of(loaded).dataset("test", 1)
    except ValueError as err:
        if "could not load" in str(err) or "hub cannot be reached" in str(err):
            pytest.skip(f"its data set is on the hub, out of reach offline: {err}"[:200])
        raise
    # Time left out: under load math-verify's call on the 100 KB case passes the bound (a guess, not a finding).
    monkeypatch.setattr(redteam, "check", functools.partial(redteam.check, slow_seconds=None))
    assert main(["rewards", "check", str(recipe), "--n", "2"]) == 0, capsys.readouterr().out


def test_rewards_check_reads_each_stage_s_own_rewards(tmp_path, capsys):
    """A stage that pays for length (correctness + length_cosine) is caught though the top-level rewards are safe."""
    import yaml

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "smollm2" / "arithmetic_grpo.yaml"
    raw = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    raw["stages"][1]["rewards"] = [{"name": "correctness"}, {"name": "length_cosine", "params": {"max_chars": 1000}}]
    path = tmp_path / "staged.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert main(["rewards", "check", str(path), "--n", "1"]) == 1
    out = capsys.readouterr().out
    assert "stage grpo: 100 KB completion" in out


def test_worked_step_rewards_pay_nothing_for_listed_equations():
    """Listing `x + p = ...` for every p holds the real step: `steps` and `steps_attempted` cap the count."""
    task = build_task("arithmetic")
    rewards = [(name, 1.0, make_reward(name, task)) for name in ("steps", "steps_attempted", "correctness")]
    assert check(task, rewards, task.dataset("test", 3)) == []

    def uncapped(completion, example):  # the share of steps written right, however many equations
        written = set(equations(completion.split("</think>")[0]))
        wanted = [step for line in example["steps"] for step in equations(line)]
        return sum(step in written for step in wanted) / len(wanted)

    examples = task.dataset("test", 2)
    findings = check(task, [("uncapped", 1.0, uncapped)], examples)
    assert {f.case for f in findings} == {"true equations listed until one is a step"} | _later_steps_alone(examples)


@pytest.mark.parametrize("split_sums", ["columns", "every_column"])
@pytest.mark.parametrize("addends", [(1, 10), (1, 50), (51, 99)])
def test_worked_step_rewards_with_column_steps_pay_nothing_for_degenerate_answers(addends, split_sums):
    """`split_sums: columns` (`7 + 4 = 11. 4 + 2 + 1 = 7. 47 + 24 = 71.`) and `every_column` on the trained
    and the shifted ranges of added terms: the battery finds nothing, and its listing case still holds a
    real step."""
    params = {"split_sums": split_sums, "addend_min": addends[0], "addend_max": addends[1]}
    task = build_task("arithmetic", params)
    names = ("format", "steps", "steps_attempted", "correctness")
    rewards = [(name, 1.0, make_reward(name, task)) for name in names]
    examples = task.dataset("test", 8)
    assert all(len(example["steps"]) >= 3 for example in examples[:2])  # sums written in columns
    findings = check(task, rewards, examples, slow_seconds=None)  # time left out: a loaded machine
    assert findings == [], "\n".join(map(str, findings))

    def uncapped(completion, example):  # the share of two-term steps written right, however many equations
        written = set(equations(completion.split("</think>")[0]))
        wanted = [step for line in example["steps"] for step in equations(line)]
        return sum(step in written for step in wanted) / len(wanted)

    findings = check(task, [("uncapped", 1.0, uncapped)], examples[:2], slow_seconds=None)
    assert {f.case for f in findings} == {"true equations listed until one is a step"} | _later_steps_alone(
        examples[:2]
    )


def _later_steps_alone(examples):
    """The battery's cases of one later two-term worked step alone (what `uncapped` reads): a reward that pays
    each step written right, wherever it stands, pays these, and they recur across problems (`2 + 1 = 3`)."""
    return {
        f"worked step {k} of {len(e['steps'])} alone"
        for e in examples
        for k, step in enumerate(e["steps"], start=1)
        if k > 1 and equations(step)
    }


def test_cli_check_of_the_default_recipe_with_column_steps(tmp_path, capsys):
    import yaml

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "smollm2" / "arithmetic_grpo.yaml"
    raw = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    raw["task"]["params"]["split_sums"] = "columns"
    path = tmp_path / "columns.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert main(["rewards", "check", str(path), "--n", "3"]) == 0, capsys.readouterr().out
    assert "no findings" in capsys.readouterr().out


@pytest.mark.parametrize("partial", ["closeness", "true_steps"])
def test_countdown_partial_credit_pays_nothing_for_degenerate_answers(partial):
    task = build_task("countdown")
    rewards = [(name, 1.0, make_reward(name, task)) for name in (partial, "correctness")]
    assert check(task, rewards, task.dataset("test", 3)) == []


FIVE_PROBES = {
    "puzzle24": "an expression of in-range numbers",
    "complex_arithmetic": "nan",
    "number_sorting": "a list of NaN",
    "game_of_life_halting": "banana",
    "coin_flip": "0",
}


@pytest.mark.parametrize("dataset", sorted(FIVE_PROBES))
def test_rewards_check_finds_the_universal_answers_reasoning_gym_s_scorer_pays(dataset, monkeypatch):
    """With grpokit's verifier off (the task scored by reasoning-gym's own scorer), the check reports the
    universal answer; with it on, nothing."""
    from grpokit.tasks.parsing import extract_answer

    task = build_task(
        "reasoning_gym", {"dataset": dataset, "validation_fraction": 0.1, "test_fraction": 0.5}
    )  # puzzle24 generates slowly
    rows = task.dataset("test", 8)
    rewards = [("correctness", 1.0, make_reward("correctness", task))]
    assert check(task, rewards, rows) == []

    def raw(completion, example):  # reasoning-gym's score_answer, at grpokit's threshold
        answer = extract_answer(completion, tags=task.tags)
        entry = task.entry(int(example["gym_index"]))
        return 1.0 if answer is not None and task.data.score_answer(answer, entry) >= 1.0 else 0.0

    # The universal-answer part of the check only: the rest of the battery (code, `9**9**9`) would run
    # reasoning-gym's parse_expr unconfined in this process.
    monkeypatch.setattr(task, "score", raw)
    cases = {f.case for f in redteam.universal(task, rows)}
    assert f"universal answer: {FIVE_PROBES[dataset]}" in cases


def test_a_universal_answer_or_a_slow_verifier_is_a_finding():
    task = build_task("arithmetic")
    rows = task.dataset("test", 4)

    def zero_is_right(completion, example):  # a verifier that pays `0` everywhere, and sleeps on `banana`
        if "banana" in completion:
            time.sleep(0.06)
        return 1.0 if "<answer>0</answer>" in completion else 0.0

    task.score = zero_is_right  # an instance attribute: this task object only
    findings = redteam.universal(task, rows, slow_seconds=0.05)
    problems = {(f.case, f.problem.split(" on ")[0].split(" took ")[0]) for f in findings}
    assert ("universal answer: 0", "the task's verifier pays it") in problems
    assert ("universal answer: banana", "the task's verifier") in problems


@pytest.mark.parametrize("dataset", ["complex_arithmetic", "number_sorting", "game_of_life_halting", "coin_flip"])
def test_rewards_check_on_a_recipe_reports_the_universal_answer_only_without_grpokit_s_verifier(
    dataset, tmp_path, capsys, monkeypatch
):
    """`grpokit rewards check` on the shipped reasoning-gym recipe set to each dataset: no findings; with
    the task scored by reasoning-gym's own scorer (these four read the answer as data: safe in-process),
    the universal answer is reported. puzzle24's raw scorer is exercised above, not here: its parse_expr
    would run the battery's code cases unconfined."""
    import yaml

    from grpokit.tasks.gym import ReasoningGymTask
    from grpokit.tasks.parsing import extract_answer

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "smollm2" / "reasoning_gym_grpo.yaml"
    raw = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    raw["task"]["params"] = {"dataset": dataset, "validation_fraction": 0.1, "test_fraction": 0.5}
    path = tmp_path / f"{dataset}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert main(["rewards", "check", str(path), "--n", "8"]) == 0, capsys.readouterr().out
    assert "no findings" in capsys.readouterr().out

    def reasoning_gym_score(self, completion, example):
        answer = extract_answer(completion, tags=self.tags)
        entry = self.entry(int(example["gym_index"]))
        return 1.0 if answer is not None and self.data.score_answer(answer, entry) >= 1.0 else 0.0

    monkeypatch.setattr(ReasoningGymTask, "score", reasoning_gym_score)
    assert main(["rewards", "check", str(path), "--n", "8"]) == 1
    assert f"universal answer: {FIVE_PROBES[dataset]}: the task's verifier pays it on" in capsys.readouterr().out
