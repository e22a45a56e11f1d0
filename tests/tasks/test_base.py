"""What every task shares through the base class: the recipe's tags reach demonstrations, scoring and prompts."""

import pytest

from grpokit.rewards import make_reward
from grpokit.tasks import TASKS, build_task
from grpokit.tasks.base import DEFAULT_SYSTEM_PROMPT, render_prompt, think_prefilled
from grpokit.tasks.parsing import THINK_TAGS, Tags, is_strict_format
from tests.data_files import build_test_task

REASONING = Tags(think="reasoning")


@pytest.mark.parametrize("task_name", sorted(TASKS))
@pytest.mark.parametrize("tags", [REASONING, Tags(think="reasoning", answer="final")], ids=["reasoning", "final"])
def test_demonstrations_are_written_in_the_recipes_tags_and_score(task_name, tags, tmp_path):
    task = build_test_task(task_name, tmp_path, tags)
    correctness, fmt = make_reward("correctness", task), make_reward("format", task)
    demos = [(row, task.demonstration(row)) for row in task.dataset("train", 5)]
    demos = [(row, demo) for row, demo in demos if demo is not None]
    if not demos:
        pytest.skip(f"{task_name} writes no demonstrations")
    for row, demo in demos:
        assert demo.lstrip().startswith(tags.think_open) and "<think>" not in demo
        assert is_strict_format(demo, tags)
        assert task.score(demo, row) == correctness(demo, row) == fmt(demo, row) == 1.0


def test_the_system_prompt_names_the_recipes_tags():
    task = build_task("arithmetic", tags=REASONING)
    system = task.messages(task.example("test", 0))[0]["content"]
    assert "<reasoning> </reasoning>" in system and "<answer> </answer>" in system and "<think>" not in system
    assert task.messages(task.example("test", 0), "Be brief.")[0]["content"] == "Be brief."  # the recipe's own wins
    default = build_task("arithmetic")
    assert default.tags == THINK_TAGS
    assert default.messages(default.example("test", 0))[0]["content"] == DEFAULT_SYSTEM_PROMPT
    assert "<think> </think>" in DEFAULT_SYSTEM_PROMPT


def test_countdown_questions_name_the_recipes_answer_tag():
    final = Tags(think="reasoning", answer="final")
    row = build_task("countdown", tags=final).example("train", 3)
    assert "<final>" in row["question"] and "<answer>" not in row["question"]
    assert build_task("countdown").example("train", 3)["question"] == row["question"].replace("final>", "answer>")


def test_prefill_detection_follows_the_tags():
    prompt = "<|im_start|>assistant\n<reasoning>\n"
    assert think_prefilled(prompt, REASONING) and not think_prefilled(prompt)
    assert think_prefilled("<|im_start|>assistant\n<think>\n") and not think_prefilled("<think>\n", REASONING)


class _Template:
    """A chat template whose generation prompt is `opening`."""

    def __init__(self, opening: str) -> None:
        self.opening = opening

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, **switches):
        assert not tokenize and add_generation_prompt
        return "".join(f"[{m['role']}] {m['content']}\n" for m in messages) + self.opening


@pytest.mark.parametrize(
    ("opening", "prefill", "ends"),
    [
        ("[assistant]\n", "<think>", "[assistant]\n<think>"),  # task.prefill_think opens the thought
        ("[assistant]\n<think>\n", "<think>", "[assistant]\n<think>\n"),  # the template did: no second tag
        ("[assistant]\n", "<reasoning>", "[assistant]\n<reasoning>"),
        ("[assistant]\n", "", "[assistant]\n"),  # off: the template's prompt as it is
    ],
)
def test_the_prefill_opens_the_assistants_turn_once(opening, prefill, ends):
    messages = [{"role": "system", "content": "Think inside <think> </think>."}, {"role": "user", "content": "1 + 1"}]
    prompt = render_prompt(_Template(opening), messages, None, prefill)
    assert prompt == "[system] Think inside <think> </think>.\n[user] 1 + 1\n" + ends


def test_task_of_builds_the_recipes_task():
    from grpokit.recipe.load import build_recipe
    from grpokit.tasks import task_of

    recipe = build_recipe(
        {
            "task": {"name": "arithmetic", "params": {"max_value": 20}, "tags": {"think": "reasoning"}},
            "rewards": [{"name": "format"}],
            "grpo": {"bf16": False},
        }
    )
    task = task_of(recipe)
    assert (task.name, task.config.max_value, task.tags) == ("arithmetic", 20, REASONING)
