"""The sft stage (R1's "cold start"): a short supervised pass on demonstrations the task writes.

GRPO learns only from groups whose rewards differ. A small model that never writes the tags scores 0
on every completion, so every advantage is zero and nothing moves. A few dozen steps of SFT on the
task's own worked examples (loss on the completion only) teach the format; GRPO then improves
correctness on top of it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trl.trainer.utils as trl_utils
from datasets import Dataset
from transformers import TrainerCallback
from trl import SFTConfig, SFTTrainer

from grpokit.kernels import fused_lora, memory
from grpokit.kernels.precision import trainer_precision
from grpokit.recipe.schema import Recipe
from grpokit.recipe.trackers import report_to, run_name
from grpokit.runs.checkpoints import mark_complete
from grpokit.tasks import task_of
from grpokit.tasks.base import Task, render_prompt, think_prefilled, tokenize_prompts
from grpokit.tasks.parsing import THINK_TAGS, Tags

log = logging.getLogger(__name__)


def build_demonstrations(task: Task, tokenizer: Any, recipe: Recipe, first: int = 0) -> list[dict[str, list[int]]]:
    """Tokenized demonstrations from the train split (never the held-out one): `input_ids` (prompt,
    demonstration, EOS) and `completion_mask` (1 on the demonstration and EOS, which the loss covers).
    `first`: the index of the first one drawn (a later sft stage starts after the earlier stages' draws).

    Tokenized here rather than by TRL: its SFT adds special tokens to a text prompt, a second BOS in front
    of the one a Llama 3, Gemma or Mistral template writes. The prompt ids are the ones GRPO and evaluation
    see (`tokenize_prompts`), and the completion follows them as sampled tokens would.
    """
    count = recipe.cold_start.examples
    examples = [task.example("train", 1_000_000 + i) for i in range(first, first + count)]  # apart from GRPO's
    kwargs, prefill = recipe.chat_template_kwargs, recipe.task.prefill
    texts = [render_prompt(tokenizer, task.messages(ex, recipe.task.system_prompt), kwargs, prefill) for ex in examples]
    prompts = tokenize_prompts(tokenizer, texts)
    demonstrations = [
        opened_by_prompt(task.demonstration(ex), text, task.tags) for ex, text in zip(examples, texts, strict=True)
    ]
    answers = tokenizer(text=demonstrations, add_special_tokens=False)["input_ids"]
    rows = []
    for prompt, answer in zip(prompts, answers, strict=True):
        completion = [*answer, tokenizer.eos_token_id]
        rows.append({"input_ids": prompt + completion, "completion_mask": [0] * len(prompt) + [1] * len(completion)})
    return rows


def opened_by_prompt(demonstration: str, prompt: str, tags: Tags = THINK_TAGS) -> str:
    """The demonstration as the completion of `prompt`: without its opening thought tag when the prompt
    already ends with it (`task.prefill_think`, or a template that opens the thought), as sampled text would be.

    >>> opened_by_prompt("<think>x</think><answer>6</answer>", "assistant\\n<think>")
    'x</think><answer>6</answer>'
    """
    if think_prefilled(prompt, tags):
        return demonstration.lstrip().removeprefix(tags.think_open)
    return demonstration


def build_trainer(
    model: Any, tokenizer: Any, recipe: Recipe, out_dir: Path, callbacks: list | None = None, first_example: int = 0
) -> Any:
    """An SFTTrainer for `model` (already wrapped with LoRA when the recipe asks for it) on demonstrations
    (from the `first_example`-th on), saving complete checkpoints into `out_dir` every output.save_every
    steps (a run resumes inside it)."""
    cfg = recipe.cold_start
    data = Dataset.from_list(build_demonstrations(task_of(recipe), tokenizer, recipe, first_example))
    args = SFTConfig(
        output_dir=str(out_dir),
        max_steps=cfg.steps,
        per_device_train_batch_size=cfg.micro_batch or cfg.batch_size,
        gradient_accumulation_steps=cfg.batch_size // (cfg.micro_batch or cfg.batch_size),
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=min(3, cfg.steps),
        completion_only_loss=True,  # the loss on the demonstration: on the whole sequence the format is learned worse
        logging_steps=1,
        save_strategy="steps" if recipe.output.save_every else "no",
        save_steps=recipe.output.save_every or 500,
        save_total_limit=recipe.output.keep,
        report_to=report_to(recipe.grpo),  # the grpo stages' trackers
        run_name=recipe.grpo.get("run_name") or run_name(recipe.output.name, out_dir),
        **trainer_precision(recipe.grpo.get("bf16")),
        gradient_checkpointing=False,
        seed=recipe.seed,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )
    log.info("sft: %d demonstrations, %d steps of %d, lr %g", len(data), cfg.steps, cfg.batch_size, cfg.learning_rate)

    class _Housekeeping(TrainerCallback):  # checkpoints marked complete; memory returned
        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                mark_complete(Path(args.output_dir) / f"checkpoint-{state.global_step}", state.global_step)

        def on_step_end(self, args, state, control, **kwargs):
            # The step's freed activations and logits go back to the system (glibc keeps them in its heap
            # otherwise); once per step: after every micro-batch the pages would be faulted in again.
            memory.trim()

    trainer = CompactSftTrainer(
        model=model,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[*(callbacks or []), _Housekeeping()],
    )
    fused_lora.install_on(trainer)
    return trainer


class CompactSftTrainer(SFTTrainer):
    """TRL's SFTTrainer, its loss's LM head run on the demonstration tokens only (see `compact_lm_head`)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        with compact_lm_head():
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


@contextmanager
def compact_lm_head() -> Iterator[None]:
    """Within it, TRL's fused LM head scores only the positions that have a label on a CPU too.

    TRL's SFT loss projects through the vocabulary in tiles (`add_fused_lm_head`); on a Triton device it
    tiles only the labelled positions, elsewhere every position (fixed tile shapes for compilers such as
    Neuron's). A CPU in eager mode compiles nothing, and the other positions (prompt, padding) are work the
    loss masks out. The loss, its gradient and the logged entropy and token accuracy are the same sums over
    the labelled positions (tested). With a TRL that has no such switch it changes nothing.
    """
    triton = getattr(trl_utils, "_use_triton", None)
    if triton is None:
        yield
        return
    trl_utils._use_triton = lambda device: device.type == "cpu" or triton(device)
    try:
        yield
    finally:
        trl_utils._use_triton = triton
