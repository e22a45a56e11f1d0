"""The KL reference of a GRPO stage is the policy as that stage starts, not the checkpoint it came from."""

import pytest
import torch

from grpokit.recipe.load import build_recipe
from grpokit.recipe.trl_args import build_grpo_config
from tests.conftest import tiny_recipe


@pytest.mark.parametrize("lora", [True, False])
def test_kl_is_zero_at_the_first_step_of_a_stage(tiny_model_dir, tmp_path, lora):
    import transformers

    from grpokit.models.load import load_model
    from grpokit.stages import pipeline as train
    from grpokit.stages.trainer import GrpoTrainer
    from grpokit.tasks import build_task

    raw = tiny_recipe(
        tiny_model_dir, tmp_path, lora={"enabled": lora, "r": 4, "alpha": 8}, rewards=[{"name": "format"}]
    )
    raw["grpo"].update({"beta": 0.5, "max_steps": 1, "learning_rate": 1e-3})
    recipe = build_recipe(raw)
    transformers.set_seed(0)
    model, tokenizer = load_model(recipe.model.name)
    if lora:
        model = train.attach_lora(model, recipe)
    with torch.no_grad():  # an earlier stage moved the trained weights away from the checkpoint on disk
        for name, param in model.named_parameters():
            if param.requires_grad and ("lora_B" in name or not lora):
                param.add_(0.05 * torch.randn_like(param))
    trainer = GrpoTrainer(
        model=model,
        reward_funcs=[lambda prompts, completions, **kw: [float(len(c) % 3) for c in completions]],
        processing_class=tokenizer,
        args=build_grpo_config(recipe, tmp_path / "g"),
        train_dataset=train.build_train_dataset(build_task("arithmetic"), tokenizer, recipe),
    )
    trainer.train()
    (first,) = [row for row in trainer.state.log_history if "kl" in row]
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)
