"""`grpokit chat RUN_OR_MODEL`: talk to a model in the terminal with the task's system prompt, streaming.

`--prompt TEXT` answers once and exits; otherwise each line you type is a turn (empty line or Ctrl-D
ends). A run directory loads its base model with the trained adapter; an exported folder or any model
name loads as is.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from grpokit.models.load import load_trained
from grpokit.recipe.load import load_recipe
from grpokit.tasks import get_task_class
from grpokit.tasks.base import render_prompt, tokenize_prompts


def load(target: str, task_name: str | None) -> tuple[Any, Any, str, dict[str, Any]]:
    """(model, tokenizer, system prompt, rendering) for a run directory or a model: `rendering` are the
    keyword arguments of `reply` that render prompts as the run trained on them (switches, prefill)."""
    recipe_path = Path(target) / "recipe.yaml"
    if recipe_path.is_file():
        recipe = load_recipe(recipe_path)
        model, tokenizer = load_trained(target, recipe.model.name, recipe.model.dtype, recipe.model.revision)
        task_class = get_task_class(task_name or recipe.task.name)
        system = recipe.task.system_prompt or task_class.instruction(recipe.task.tags)
        rendering = {"chat_template_kwargs": recipe.chat_template_kwargs, "prefill": recipe.task.prefill}
    else:  # an exported folder's chat template has the run's switches and prefill built in
        model, tokenizer = load_trained(target, target)
        system = get_task_class(task_name or "arithmetic").instruction()
        rendering = {}
    model.eval()
    return model, tokenizer, system, rendering


def reply(
    model: Any,
    tokenizer: Any,
    messages: list[dict[str, str]],
    out: TextIO,
    max_new_tokens: int,
    chat_template_kwargs: dict[str, Any] | None = None,
    prefill: str = "",
) -> str:
    """Generate the assistant's turn greedily, writing tokens to `out` as they come; the turn opens with
    `prefill` (`<think>` under the recipe's `task.prefill_think`), which is written and returned too."""
    # slow imports: torch, transformers, only once a model answers
    import torch
    from transformers import TextIteratorStreamer

    prompt = render_prompt(tokenizer, messages, chat_template_kwargs, prefill)
    ids = tokenize_prompts(tokenizer, [prompt])  # as training saw it
    inputs = {"input_ids": torch.tensor(ids, device=model.device)}
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)

    def generate() -> None:
        with torch.inference_mode():
            model.generate(
                **inputs,
                streamer=streamer,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                temperature=None,
                top_p=None,
                top_k=None,
            )

    worker = threading.Thread(target=generate, daemon=True)
    worker.start()
    pieces = [prefill]
    out.write(prefill)
    for piece in streamer:
        pieces.append(piece)
        out.write(piece)
        out.flush()
    worker.join()
    out.write("\n")
    return "".join(pieces)


def main(
    target: str,
    prompt: str | None = None,
    task_name: str | None = None,
    max_new_tokens: int = 256,
    stdin: TextIO = sys.stdin,
    stdout: TextIO = sys.stdout,
) -> int:
    model, tokenizer, system, rendering = load(target, task_name)
    messages = [{"role": "system", "content": system}]
    if prompt is not None:
        reply(model, tokenizer, [*messages, {"role": "user", "content": prompt}], stdout, max_new_tokens, **rendering)
        return 0
    stdout.write(f"system: {system}\n(empty line or Ctrl-D to quit)\n")
    while True:
        stdout.write("> ")
        stdout.flush()
        line = stdin.readline()
        if not line.strip():
            return 0
        messages.append({"role": "user", "content": line.strip()})
        answer = reply(model, tokenizer, messages, stdout, max_new_tokens, **rendering)
        messages.append({"role": "assistant", "content": answer})
