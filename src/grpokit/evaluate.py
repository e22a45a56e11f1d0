"""Held-out evaluation: greedy accuracy and format rate, scored by the task's own verifier."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grpokit.parsing import is_strict_format, normalize_completion
from grpokit.tasks.base import Example, Task, render_prompt, think_prefilled

log = logging.getLogger(__name__)


@dataclass
class EvalResult:
    task: str
    n: int
    accuracy: float  # eval/accuracy: greedy, task.score
    format_rate: float  # eval/format_rate: strict <think>…</think><answer>…</answer>
    mean_completion_tokens: float
    max_completion_tokens: int
    truncation_rate: float  # completions that hit max_new_tokens without ending
    tokens_per_second: float
    seconds: float
    samples: list[dict[str, Any]] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        return {
            "eval/accuracy": self.accuracy,
            "eval/format_rate": self.format_rate,
            "eval/mean_completion_tokens": self.mean_completion_tokens,
            "eval/truncation_rate": self.truncation_rate,
        }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")


def evaluate(
    model: Any,
    tokenizer: Any,
    task: Task,
    examples: list[Example],
    *,
    max_new_tokens: int = 96,
    batch_size: int = 64,
    samples: int = 16,
    system_prompt: str | None = None,
    label: str = "eval",
) -> EvalResult:
    """Greedy-decode every example once and score it with `task.score`."""
    import torch

    prompts = [render_prompt(tokenizer, task.messages(ex, system_prompt)) for ex in examples]
    prefilled = think_prefilled(prompts[0]) if prompts else False
    eos_ids = _eos_ids(model, tokenizer)
    was_training = model.training
    model.eval()
    completions: list[str] = []
    lengths: list[int] = []
    truncated = 0
    start = time.perf_counter()
    for first in range(0, len(prompts), batch_size):
        batch = tokenizer(
            prompts[first : first + batch_size], return_tensors="pt", padding=True, add_special_tokens=False
        ).to(model.device)
        with torch.inference_mode():
            out = model.generate(
                **batch,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos_ids,
                temperature=None,
                top_p=None,
                top_k=None,
            )
        new = out[:, batch["input_ids"].shape[1] :]  # [B, T_new]
        for row in new.tolist():
            ended = next((i for i, t in enumerate(row) if t in eos_ids), None)
            lengths.append(len(row) if ended is None else ended + 1)
            truncated += ended is None
            completions.append(tokenizer.decode(row[: lengths[-1]], skip_special_tokens=True))
        done, elapsed = len(completions), time.perf_counter() - start
        log.info(
            "%s: %d/%d problems, %.0f tok/s, ETA %.0f s",
            label,
            done,
            len(prompts),
            sum(lengths) / elapsed,
            elapsed / done * (len(prompts) - done),
        )
    seconds = time.perf_counter() - start
    model.train(was_training)

    texts = [normalize_completion(c, prefilled) for c in completions]
    correct = [task.score(t, ex) for t, ex in zip(texts, examples, strict=True)]
    formatted = [is_strict_format(t) for t in texts]
    n = max(len(examples), 1)
    kept = [
        {"question": ex["question"], "answer": ex["answer"], "completion": c, "correct": bool(ok), "format": fmt}
        for ex, c, ok, fmt in zip(examples, completions, correct, formatted, strict=True)
    ]
    return EvalResult(
        task=task.name,
        n=len(examples),
        accuracy=sum(correct) / n,
        format_rate=sum(formatted) / n,
        mean_completion_tokens=sum(lengths) / n,
        max_completion_tokens=max(lengths, default=0),
        truncation_rate=truncated / n,
        tokens_per_second=sum(lengths) / max(seconds, 1e-9),
        seconds=seconds,
        samples=kept[:samples],
    )


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def main(recipe: Any, model_name: str | None = None) -> EvalResult:
    """`grpokit eval`: evaluate a model folder, hub id, run directory or the recipe's model."""
    from grpokit.models import load_model
    from grpokit.tasks import build_task

    name = model_name or recipe.model.name
    adapter = Path(name) / "adapter"
    if adapter.is_dir():  # a run directory: base model + trained adapter
        from peft import PeftModel

        model, tokenizer = load_model(recipe.model.name, recipe.model.dtype, recipe.model.revision)
        model = PeftModel.from_pretrained(model, str(adapter))
    else:
        model, tokenizer = load_model(name, recipe.model.dtype, recipe.model.revision)
    task = build_task(recipe.task.name, recipe.task.params)
    return evaluate_recipe(model, tokenizer, task, task.dataset("eval", recipe.eval.n), recipe)


def evaluate_recipe(
    model: Any, tokenizer: Any, task: Task, examples: list[Example], recipe: Any, label: str = "eval"
) -> EvalResult:
    """`evaluate` with the recipe's eval settings and system prompt."""
    return evaluate(
        model,
        tokenizer,
        task,
        examples,
        max_new_tokens=recipe.eval.max_new_tokens,
        batch_size=recipe.eval.batch_size,
        samples=recipe.eval.samples,
        system_prompt=recipe.task.system_prompt,
        label=label,
    )
