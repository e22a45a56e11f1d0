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

from grpokit import console
from grpokit.config import Recipe, default_report_to
from grpokit.precision import trainer_precision
from grpokit.tasks.base import Task, render_prompt

log = logging.getLogger(__name__)


def build_demonstrations(task: Task, tokenizer: Any, recipe: Recipe) -> list[dict[str, str]]:
    """Prompt/completion pairs from the train split (never the held-out one)."""
    rows = []
    for index in range(recipe.cold_start.examples):
        example = task.example("train", 1_000_000 + index)  # indices apart from the GRPO prompts' stream
        prompt = render_prompt(tokenizer, task.messages(example, recipe.task.system_prompt))
        rows.append({"prompt": prompt, "completion": task.demonstration(example)})
    return rows


def run(model: Any, tokenizer: Any, task: Task, recipe: Recipe, out_dir: Path, callbacks: list | None = None) -> Any:
    """Train `model` (already wrapped with LoRA when the recipe asks for it) on demonstrations."""
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
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=data, processing_class=tokenizer, callbacks=callbacks or []
    )
    console.adopt(trainer)  # grpokit's progress line instead of tqdm and metric dicts, when it is in callbacks
    trainer.train()
    return trainer.model
