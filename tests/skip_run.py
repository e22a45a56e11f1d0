"""GRPO on fixed completions, for the zero-advantage skip's equality tests: in the test's own process, or
as each rank of `python -m torch.distributed.run --nproc_per_node N -m tests.skip_run MODEL_DIR OUT_DIR SKIP`.

The completions depend only on the prompt and the row's place in its group, never on the weights or the
random state, so runs with and without the skip, on one process or several, train on the same rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from grpokit.stages.trainer import GrpoOptions, GrpoTrainer


class FixedRollouts(GrpoTrainer):
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        out = []
        for row, ids in enumerate(prompt_ids):  # each rank's rows start at a group boundary
            seed = sum(ids) * 31 + row % num_generations
            length = 3 + seed % 9
            out.append([3 + (seed * 7 + 13 * t) % 300 for t in range(length)])  # past the special tokens 0..2
        return out, None


def half_uniform(prompts, completions, answer, **kwargs):
    """Prompts with an even answer: every completion gets 1 (a zero-advantage group); others: by length."""
    return [1.0 if a % 2 == 0 else float(len(c) % 3) for c, a in zip(completions, answer, strict=True)]


def train(model_dir: Path, out_dir: Path, skip: bool, processes: int = 1) -> dict[str, torch.Tensor]:
    """Two SGD steps with gradient accumulation 2 and no clipping; the LoRA weights at the end."""
    import transformers

    from grpokit.models.load import load_model
    from grpokit.recipe.load import build_recipe
    from grpokit.recipe.trl_args import build_grpo_config
    from grpokit.stages import pipeline as grpokit_train
    from grpokit.tasks import build_task
    from tests.conftest import tiny_recipe

    raw = tiny_recipe(model_dir, out_dir, rewards=[{"name": "format"}])  # one reward weight
    raw["grpo"].update(
        {
            "per_device_train_batch_size": 16 // processes,  # 4 groups of 4 per micro-batch, over all processes
            "gradient_accumulation_steps": 2,  # two micro-batches, each its own generation, per step
            "steps_per_generation": 1,
            "max_steps": 2,
            # Plain SGD without clipping: an Adam step is nearly sign(gradient), and clipping rescales the
            # gradient to a fixed norm; both would hide a wrongly scaled loss.
            "optim": "sgd",
            "learning_rate": 1.0,
            "warmup_steps": 0,
            "max_grad_norm": 0.0,
        }
    )
    recipe = build_recipe(raw)
    transformers.set_seed(0)
    model, tokenizer = load_model(recipe.model.name)
    model = grpokit_train.attach_lora(model, recipe)
    trainer = FixedRollouts(
        model=model,
        reward_funcs=[half_uniform],
        processing_class=tokenizer,
        args=build_grpo_config(recipe, out_dir / "grpo"),
        train_dataset=grpokit_train.build_train_dataset(build_task("arithmetic"), tokenizer, recipe),
        options=GrpoOptions(skip_zero_advantage=skip),
    )
    trainer.train()
    logged = [row["rows_trained_frac"] for row in trainer.state.log_history if "rows_trained_frac" in row]
    assert not skip or processes > 1 or min(logged) < 1.0, "some rows were skipped"
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}


if __name__ == "__main__":
    import os

    model_dir, out_dir, skip = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "skip"
    weights = train(model_dir, out_dir, skip, processes=int(os.environ["WORLD_SIZE"]))
    if os.environ["RANK"] == "0":
        torch.save(weights, out_dir / "weights.pt")
