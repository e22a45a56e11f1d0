"""The real embedded model: GGUF found in the installed package, converted once, trainable. Slow."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "recipe_name", ["arithmetic_grpo", "arithmetic_r1_zero", "countdown_grpo", "math_grpo", "reasoning_gym_grpo"]
)
def test_embedded_model_converts_loads_and_trains_two_steps(tmp_path, recipe_name, monkeypatch):
    import json

    import torch

    from grpokit.models.load import embedded_model_dir, load_model
    from grpokit.recipe.load import load_recipe
    from grpokit.stages import pipeline as train

    folder = embedded_model_dir()  # converted into the user cache once; later runs reuse it
    assert (folder / "model.safetensors").is_file() and (folder / "chat_template.jinja").is_file()
    model, tokenizer = load_model("embedded")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.dtype == torch.float32 and not getattr(model, "is_quantized", False)
    assert tokenizer.eos_token == "<|im_end|>"

    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # recipes name data files from the repository root
    path = Path(__file__).resolve().parents[2] / "recipes" / "smollm2" / f"{recipe_name}.yaml"
    # The recipe, shrunk: 2 steps per stage (sft: 32 demonstrations, batches of 8), a 16-problem eval.
    shrink = [
        f"output.dir={tmp_path}",
        "cold_start.steps=2",
        "cold_start.examples=32",
        "cold_start.batch_size=8",
        "grpo.max_steps=2",
        "grpo.per_device_train_batch_size=8",
        "grpo.num_generations=4",
        "grpo.max_completion_length=24",
        "eval.n=16",
        "eval.max_new_tokens=24",
        "eval.every=0",
    ]
    recipe = load_recipe(path)
    if recipe.dynamic_sampling.downsample_to:  # the shrunk groups of 4 train their 2 most varied rows
        shrink.append("dynamic_sampling.downsample_to=2")
    staged = recipe.stages
    for i, stage in enumerate(staged):
        shrink += [f"stages.{i}.steps=2"] + ([f"stages.{i}.examples=32"] if stage.kind == "sft" else [])
    run_dir = train.main(load_recipe(path, shrink))
    summary = json.loads((run_dir / "summary.json").read_text())
    if recipe_name == "arithmetic_grpo":
        assert summary["evals"]["before"]["format_rate"] == 0.0  # it never writes the tags on its own
    names = [stage.name for stage in staged] or ["cold_start", "grpo"]
    assert [row["name"] for row in summary["stages"]] == ["before", *names]
    assert set(summary["evals"]) == {"before", *names, "after"}
    assert (run_dir / "adapter" / "adapter_model.safetensors").is_file()
