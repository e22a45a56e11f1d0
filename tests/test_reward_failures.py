"""A reward that fails on a sample leaves that sample out of its group's statistics (recipe default)."""

import torch

from grpokit.config import build_grpo_config, build_recipe
from grpokit.rewards import to_trl
from tests.conftest import tiny_recipe


def _scored_batch(tiny_model_dir, tmp_path, on_error):
    from grpokit import train
    from grpokit.models import load_model
    from grpokit.tasks import build_task
    from grpokit.trainer import GrpoTrainer

    calls = {"n": 0}

    def verifier(completion, example):  # fails on the first completion of every group of 4
        calls["n"] += 1
        if calls["n"] % 4 == 1:
            raise TimeoutError("verifier timed out")
        return 1.0

    def length(prompts, completions, **kw):
        return [float(len(c) % 5) for c in completions]

    raw = tiny_recipe(tiny_model_dir, tmp_path, rewards=[{"name": "format"}, {"name": "correctness"}])
    recipe = build_recipe(raw)
    model, tokenizer = load_model(recipe.model.name)
    trainer = GrpoTrainer(
        model=model,
        reward_funcs=[to_trl("verifier", verifier, on_error=on_error), length],
        processing_class=tokenizer,
        args=build_grpo_config(recipe, tmp_path / "g"),
        train_dataset=train.build_train_dataset(build_task("arithmetic"), tokenizer, recipe),
        skip_zero_advantage=False,
    )
    inputs = next(iter(trainer.get_train_dataloader()))
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(inputs)
    texts = tokenizer.batch_decode(batch["completion_ids"] * batch["completion_mask"], skip_special_tokens=True)
    return batch["advantages"], torch.tensor([float(len(t) % 5) for t in texts])


def test_a_failed_sample_is_left_out_of_its_group(tiny_model_dir, tmp_path):
    advantages, length = _scored_batch(tiny_model_dir, tmp_path, "exclude")
    groups, lengths = advantages.view(-1, 4), length.view(-1, 4)
    assert torch.all(groups[:, 0] == 0)  # the failed samples teach nothing either way
    for adv, rewards in zip(groups, lengths, strict=True):
        scored = rewards[1:] + 1.0  # the verifier's 1.0 plus the length reward, weights 1 and 1
        expected = (scored - scored.mean()) / (scored.std() + 1e-4)
        torch.testing.assert_close(adv[1:], expected, rtol=1e-3, atol=1e-3)


def test_on_error_zero_scores_the_failed_sample_zero(tiny_model_dir, tmp_path):
    advantages, length = _scored_batch(tiny_model_dir, tmp_path, "zero")
    for adv, rewards in zip(advantages.view(-1, 4), length.view(-1, 4), strict=True):
        scored = rewards + torch.tensor([0.0, 1.0, 1.0, 1.0])
        expected = (scored - scored.mean()) / (scored.std() + 1e-4)
        torch.testing.assert_close(adv, expected, rtol=1e-3, atol=1e-3)
