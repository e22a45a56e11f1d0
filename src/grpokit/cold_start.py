"""Cold start: a short supervised pass on demonstrations the task writes, before GRPO.

GRPO learns only from groups whose rewards differ. A small model that never writes the tags scores 0
on every completion, so every advantage is zero and nothing moves. A few dozen steps of SFT on the
task's own worked examples (loss on the completion only) teach the format; GRPO then improves
correctness on top of it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from grpokit.config import Recipe, default_report_to
from grpokit.precision import trainer_precision
from grpokit.tasks.base import Task, render_prompt, tokenize_prompts

log = logging.getLogger(__name__)


def build_demonstrations(task: Task, tokenizer: Any, recipe: Recipe) -> list[dict[str, list[int]]]:
    """Tokenized demonstrations from the train split (never the held-out one): `input_ids` (prompt,
    demonstration, EOS) and `completion_mask` (1 on the demonstration and EOS, which the loss covers).

    Tokenized here rather than by TRL: its SFT adds special tokens to a text prompt, a second BOS in front
    of the one a Llama 3, Gemma or Mistral template writes. The prompt ids are the ones GRPO and evaluation
    see (`tokenize_prompts`), and the completion follows them as sampled tokens would.
    """
    examples = [task.example("train", 1_000_000 + i) for i in range(recipe.cold_start.examples)]  # apart from GRPO's
    kwargs = recipe.chat_template_kwargs
    prompts = tokenize_prompts(
        tokenizer, [render_prompt(tokenizer, task.messages(ex, recipe.task.system_prompt), kwargs) for ex in examples]
    )
    answers = tokenizer(text=[task.demonstration(ex) for ex in examples], add_special_tokens=False)["input_ids"]
    rows = []
    for prompt, answer in zip(prompts, answers, strict=True):
        completion = [*answer, tokenizer.eos_token_id]
        rows.append({"input_ids": prompt + completion, "completion_mask": [0] * len(prompt) + [1] * len(completion)})
    return rows


def build_trainer(
    model: Any, tokenizer: Any, task: Task, recipe: Recipe, out_dir: Path, callbacks: list | None = None
) -> Any:
    """TRL's SFTTrainer on the demonstrations, with `model` (already wrapped with LoRA when the recipe asks)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    cfg = recipe.cold_start
    data = Dataset.from_list(build_demonstrations(task, tokenizer, recipe))
    args = SFTConfig(
        output_dir=str(out_dir),
        max_steps=cfg.steps,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=min(3, cfg.steps),
        completion_only_loss=True,  # measured: loss on the whole sequence learns the format ~20x worse
        logging_steps=1,
        save_strategy="no",
        report_to=recipe.grpo.get("report_to", default_report_to()),
        **trainer_precision(recipe.grpo.get("bf16")),
        gradient_checkpointing=False,
        seed=recipe.seed,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )
    log.info(
        "cold start: %d demonstrations, %d steps of %d, lr %g", len(data), cfg.steps, cfg.batch_size, cfg.learning_rate
    )
    return SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer, callbacks=callbacks or [])


def run(model: Any, tokenizer: Any, task: Task, recipe: Recipe, out_dir: Path, callbacks: list | None = None) -> Any:
    """Train `model` on demonstrations; returns the trained model."""
    trainer = build_trainer(model, tokenizer, task, recipe, out_dir, callbacks)
    trainer.train()
    return trainer.model
