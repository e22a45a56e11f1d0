"""A GRPO stage's wiring: the rewards it hands the trainer read completions as the recipe's prompts shape them."""

import pytest

from grpokit.recipe.load import build_recipe
from grpokit.runs.checkpoints import StopOnSignal
from grpokit.stages.callbacks import MetricsLog
from tests.conftest import tiny_recipe

REWARDS = [{"name": "format_partial"}, {"name": "format"}, {"name": "correctness"}]


@pytest.mark.parametrize("prefill_think", [True, False])
def test_rewards_read_a_completion_that_starts_inside_the_prefilled_thought(tiny_model_dir, tmp_path, prefill_think):
    from grpokit.models.load import load_model
    from grpokit.stages.grpo import build_trainer

    recipe = build_recipe(tiny_recipe(tiny_model_dir, tmp_path, rewards=REWARDS, task={"prefill_think": prefill_think}))
    model, tokenizer = load_model(recipe.model.name)
    metrics = MetricsLog(tmp_path / "metrics.jsonl")
    trainer = build_trainer("grpo", model, tokenizer, recipe, tmp_path, [], metrics, StopOnSignal())
    row = trainer.train_dataset[0]
    # What the policy writes after the prompt: from inside the thought when the prompt opened it.
    completion = f"{row['question']} is {row['answer']}.</think><answer>{row['answer']}</answer>"
    scores = [reward([row["prompt"]], [completion], answer=[row["answer"]]) for reward in trainer.reward_funcs]
    assert row["prompt"].endswith("<think>") == prefill_think
    # Without the prefill, `</think>` has no `<think>` before it and earns nothing (issue 53): 0.5 from tag_count.
    assert scores == ([[1.0], [1.0], [1.0]] if prefill_think else [[0.5], [0.0], [1.0]])
