"""Dropping zero-advantage rows before the training pass must not change the update."""

import pytest
import torch

from grpokit.config import build_grpo_config, build_recipe
from grpokit.trainer import _select_rows, keep_mask, skipping_is_exact
from tests.conftest import tiny_recipe


def test_keep_mask_keeps_informative_rows_and_at_least_one():
    batch = {"advantages": torch.tensor([0.0, 0.5, -0.5, 0.0])}
    assert keep_mask(batch).tolist() == [False, True, True, False]
    assert keep_mask({"advantages": torch.zeros(4)}).tolist() == [True, False, False, False]


def test_select_rows_filters_per_row_values_only():
    batch = {
        "advantages": torch.tensor([0.0, 1.0, -1.0]),
        "completion_ids": torch.arange(6).view(3, 2),
        "num_items_in_batch": torch.tensor(42),
        "names": ["a", "b", "c"],
    }
    out = _select_rows(batch, keep_mask(batch))
    assert out["completion_ids"].tolist() == [[2, 3], [4, 5]]
    assert out["names"] == ["b", "c"]
    assert out["num_items_in_batch"].item() == 42  # the loss normaliser stays the whole batch's


@pytest.mark.parametrize(
    ("grpo", "exact"),
    [
        ({}, True),
        ({"beta": 0.04}, False),
        ({"loss_type": "grpo"}, False),
        ({"loss_type": "cispo"}, True),
        ({"steps_per_generation": 2}, False),
    ],
)
def test_skipping_only_where_it_is_exact(tiny_model_dir, tmp_path, grpo, exact):
    raw = tiny_recipe(tiny_model_dir, tmp_path)
    raw["grpo"].update(grpo)
    assert skipping_is_exact(build_grpo_config(build_recipe(raw), tmp_path / "g")) is exact


def _train(tiny_model_dir, tmp_path, skip: bool) -> dict[str, torch.Tensor]:
    import transformers

    from grpokit import train
    from grpokit.models import load_model
    from grpokit.tasks import build_task
    from grpokit.trainer import GrpoTrainer

    def half_uniform(prompts, completions, answer, **kwargs):
        # Prompts with an even answer: every completion gets 1 (a zero-advantage group); others: by length.
        return [1.0 if a % 2 == 0 else float(len(c) % 3) for c, a in zip(completions, answer, strict=True)]

    raw = tiny_recipe(tiny_model_dir, tmp_path / str(skip), rewards=[{"name": "format"}])  # one weight
    # 4 groups a step; one step, since later samples depend on float-order-level weight differences
    raw["grpo"].update({"per_device_train_batch_size": 16, "num_generations": 4, "max_steps": 1})
    # Plain SGD: an Adam step is nearly sign(gradient) and would hide a wrongly scaled loss.
    raw["grpo"].update({"optim": "sgd", "learning_rate": 1.0, "warmup_steps": 0})
    recipe = build_recipe(raw)
    transformers.set_seed(0)
    model, tokenizer = load_model(recipe.model.name)
    model = train.attach_lora(model, recipe)
    data = train.build_train_dataset(build_task("arithmetic"), tokenizer, recipe)
    trainer = GrpoTrainer(
        model=model,
        reward_funcs=[half_uniform],
        processing_class=tokenizer,
        args=build_grpo_config(recipe, tmp_path / f"g{skip}"),
        train_dataset=data,
        skip_zero_advantage=skip,
    )
    trainer.train()
    logged = [row for row in trainer.state.log_history if "rows_trained_frac" in row]
    if skip:
        assert any(row["rows_trained_frac"] < 1.0 for row in logged), "some rows were skipped"
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}


def test_skipping_gives_the_same_weights(tiny_model_dir, tmp_path):
    skipped = _train(tiny_model_dir, tmp_path, skip=True)
    full = _train(tiny_model_dir, tmp_path, skip=False)
    moved = [n for n in skipped if "lora_B" in n and skipped[n].abs().sum() > 0]
    assert moved, "the run trained at all"
    for name in skipped:
        torch.testing.assert_close(skipped[name], full[name], rtol=1e-4, atol=1e-6)
