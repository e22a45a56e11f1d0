"""Held-out evaluation: greedy accuracy and format rate, scored by the task's own verifier."""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grpokit.kernels import memory
from grpokit.models.load import load_trained
from grpokit.rewards import DEFAULT_TIMEOUT_S
from grpokit.rewards.guarded import Guarded
from grpokit.sandbox.client import configure as configure_sandbox
from grpokit.tasks import task_of
from grpokit.tasks.base import Example, Task, render_prompt, think_prefilled, tokenize_prompts
from grpokit.tasks.parsing import Tags, extract_answer, is_strict_format, normalize_completion

log = logging.getLogger(__name__)


@dataclass
class EvalResult:
    task: str
    n: int
    accuracy: float  # eval/accuracy: greedy, task.score
    format_rate: float  # eval/format_rate: strict <think>…</think><answer>…</answer> in the recipe's tags
    mean_completion_tokens: float
    max_completion_tokens: int
    truncation_rate: float  # completions that hit max_new_tokens without ending
    tokens_per_second: float
    seconds: float
    samples: list[dict[str, Any]] = field(default_factory=list)  # the first problems, right or wrong
    mistakes: list[dict[str, Any]] = field(default_factory=list)  # the greedy completions scored wrong
    # Right or wrong, per problem in evaluation order: two evaluations of the same problems pair up (`paired`).
    correct: list[bool] = field(default_factory=list)
    # Sampled evaluation (eval.samples_per_problem > 0): unbiased pass@k and majority vote @k.
    samples_per_problem: int = 0
    temperature: float | None = None
    pass_at_k: dict[str, float] = field(default_factory=dict)
    maj_at_k: dict[str, float] = field(default_factory=dict)
    sampled_format_rate: float | None = None
    # Completions task.score failed on (raised, ran past its timeout): scored wrong, counted, and the first error.
    score_errors: int = 0
    score_error: str | None = None

    def metrics(self) -> dict[str, float]:
        out = {
            "eval/accuracy": self.accuracy,
            "eval/format_rate": self.format_rate,
            "eval/mean_completion_tokens": self.mean_completion_tokens,
            "eval/truncation_rate": self.truncation_rate,
        }
        out.update({f"eval/pass@{k}": v for k, v in self.pass_at_k.items()})
        out.update({f"eval/maj@{k}": v for k, v in self.maj_at_k.items()})
        return out

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")


def paired(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    """What changed between two saved evaluations (eval_*.json as dicts) of the same problems: `fixed`
    (wrong before, right after), `broke` (right before, wrong after) and McNemar's z, (fixed - broke) /
    sqrt(fixed + broke), which is about 2 or more for a change the problems' draw would rarely make alone.
    None when either file lacks per-problem results (written before they were saved), or the two did
    not evaluate the same problems (their sizes or stored first problems differ).

    >>> paired({"correct": [False, False, True, True]}, {"correct": [True, True, True, False]})
    {'n': 4, 'fixed': 2, 'broke': 1, 'z': 0.58}
    """
    a, b = before.get("correct"), after.get("correct")
    if not a or not b or len(a) != len(b):
        return None
    if [r.get("question") for r in before.get("samples", [])] != [r.get("question") for r in after.get("samples", [])]:
        return None
    fixed = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    broke = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    z = (fixed - broke) / math.sqrt(fixed + broke) if fixed + broke else 0.0
    return {"n": len(a), "fixed": fixed, "broke": broke, "z": round(z, 2)}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021): 1 - C(n-c, k) / C(n, k).

    >>> pass_at_k(8, 0, 4), pass_at_k(8, 8, 1), pass_at_k(8, 1, 1), round(pass_at_k(8, 1, 4), 4)
    (0.0, 1.0, 0.125, 0.5)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def majority_correct(answers: list[str | None], correct: list[float]) -> bool:
    """Majority vote over extracted answers (ties: the first seen); no answer never wins.

    >>> majority_correct(["7", "8", "7", None], [1.0, 0.0, 1.0, 0.0])
    True
    >>> majority_correct([None, None, "8"], [0.0, 0.0, 0.0])
    False
    """
    votes = Counter(" ".join(a.split()) for a in answers if a is not None and a.strip())
    if not votes:
        return False
    winner = votes.most_common(1)[0][0]
    return any(ok for a, ok in zip(answers, correct, strict=True) if a is not None and " ".join(a.split()) == winner)


@dataclass
class _Generations:
    completions: list[list[str]]  # [problem][sample]
    lengths: list[int]
    truncated: int
    seconds: float


def _generate(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    *,
    max_new_tokens: int,
    batch_size: int,
    per_prompt: int = 1,
    temperature: float | None = None,
    label: str = "eval",
    stop_texts: tuple[str, ...] = (),
) -> _Generations:
    """Decode `per_prompt` completions per prompt: greedy when temperature is None, else sampled.

    Decoding runs on grpokit's sampler (each prompt prefilled once for its samples, finished rows leave
    the batch; greedy equals `generate`'s, tested) and, for a LoRA model, on a merged copy in the model's
    own dtype: the adapters' extra matmuls halve decoding speed, the merged weights give the same logits.
    """
    # slow import: torch (under the sampler), only once a model decodes
    from grpokit.rollout.sampler import RolloutCopy, SamplingSettings, finished, sample, wants_copy

    eos_ids = _eos_ids(model, tokenizer)
    sampling = temperature is not None
    dtype = next(model.parameters()).dtype
    runner = RolloutCopy(dtype).get(model, version=0) if wants_copy(model) else model
    settings = SamplingSettings(
        max_new_tokens=max_new_tokens, temperature=temperature or 1.0, top_k=0 if sampling else 1, stop_texts=stop_texts
    )
    ids = tokenize_prompts(tokenizer, prompts)
    completions: list[list[str]] = []
    lengths: list[int] = []
    truncated = 0
    prompts_per_batch = max(1, batch_size // per_prompt)
    start = time.perf_counter()
    for first in range(0, len(prompts), prompts_per_batch):
        rows = [row for row in ids[first : first + prompts_per_batch] for _ in range(per_prompt)]
        out = sample(runner, rows, settings, eos_ids=eos_ids, pad_id=tokenizer.pad_token_id, tokenizer=tokenizer)
        texts = []
        for row in out:  # a row ends with its EOS token or a stop text, or is truncated at max_new_tokens
            lengths.append(len(row))
            truncated += not finished(row, eos_ids, tokenizer, stop_texts)
            texts.append(tokenizer.decode(row, skip_special_tokens=True))
        completions.extend(texts[i : i + per_prompt] for i in range(0, len(texts), per_prompt))
        done, elapsed = len(completions), time.perf_counter() - start
        log.info(
            "%s: %d/%d problems, %.0f tok/s, ETA %.0f s",
            label,
            done,
            len(prompts),
            sum(lengths) / elapsed,
            elapsed / done * (len(prompts) - done),
            extra={"live": True},  # rewritten in place on a terminal
        )
    del runner
    memory.trim()  # the merged copy and the KV caches leave before training resumes
    return _Generations(completions, lengths, truncated, time.perf_counter() - start)


def evaluate(
    model: Any,
    tokenizer: Any,
    task: Task,
    examples: list[Example],
    *,
    max_new_tokens: int = 96,
    batch_size: int = 64,
    samples: int = 16,
    mistakes: int = 100,
    system_prompt: str | None = None,
    label: str = "eval",
    samples_per_problem: int = 0,
    k: list[int] | tuple[int, ...] = (1, 4, 8),
    temperature: float = 1.0,
    stop_texts: tuple[str, ...] = (),
    chat_template_kwargs: dict[str, Any] | None = None,
    prefill: str = "",
    score_timeout: float | None = DEFAULT_TIMEOUT_S,
) -> EvalResult:
    """Greedy-decode every example once and score it with `task.score`; optionally sample for pass@k.

    `stop_texts` end a completion as they end a training rollout (`rollout.stop_at_answer`), so the
    model is evaluated on the completions it is trained on. `task.score` runs under the training
    rewards' isolation (`grpokit.rewards.guarded`): a completion it fails on or that takes longer than
    `score_timeout` seconds scores 0 and is counted in `score_errors`. `prefill` opens the assistant's turn
    as in training (`render_prompt`); a completion after a prefilled thought tag is scored with it put back.
    The result keeps the first `samples` completions and, up to `mistakes`, every one scored wrong.
    """
    prompts = [
        render_prompt(tokenizer, task.messages(ex, system_prompt), chat_template_kwargs, prefill) for ex in examples
    ]
    prefilled = think_prefilled(prompts[0], task.tags) if prompts else False
    was_training = model.training
    model.eval()
    try:
        greedy = _generate(
            model,
            tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            label=label,
            stop_texts=stop_texts,
        )
        sampled = None
        if samples_per_problem:
            sampled = _generate(
                model,
                tokenizer,
                prompts,
                max_new_tokens=max_new_tokens,
                batch_size=batch_size,
                per_prompt=samples_per_problem,
                temperature=temperature,
                label=f"{label} sampled x{samples_per_problem}",
                stop_texts=stop_texts,
            )
    finally:
        model.train(was_training)

    completions = [c[0] for c in greedy.completions]
    texts = [normalize_completion(c, prefilled, task.tags) for c in completions]
    score = Guarded(f"{task.name} score", task.score, score_timeout, give_up_after=3)
    correct = [score(t, ex) or 0.0 for t, ex in zip(texts, examples, strict=True)]
    formatted = [is_strict_format(t, task.tags) for t in texts]
    n = max(len(examples), 1)
    kept = [
        {"question": ex["question"], "answer": ex["answer"], "completion": c, "correct": bool(ok), "format": fmt}
        for ex, c, ok, fmt in zip(examples, completions, correct, formatted, strict=True)
    ]
    result = EvalResult(
        task=task.name,
        n=len(examples),
        accuracy=sum(correct) / n,
        format_rate=sum(formatted) / n,
        mean_completion_tokens=sum(greedy.lengths) / n,
        max_completion_tokens=max(greedy.lengths, default=0),
        truncation_rate=greedy.truncated / n,
        tokens_per_second=sum(greedy.lengths) / max(greedy.seconds, 1e-9),
        seconds=greedy.seconds,
        samples=kept[:samples],
        mistakes=[row for row in kept if not row["correct"]][:mistakes],
        correct=[bool(ok) for ok in correct],
    )
    if sampled is not None:
        _add_sampled(result, score, examples, sampled, prefilled, samples_per_problem, k, temperature, task.tags)
    result.score_errors, result.score_error = score.errors, score.summary()
    if score.errors:
        log.warning("%s: %s; they count as wrong", label, result.score_error)
    return result


def _add_sampled(
    result: EvalResult,
    score: Guarded,
    examples: list[Example],
    sampled: _Generations,
    prefilled: bool,
    per_problem: int,
    ks: list[int] | tuple[int, ...],
    temperature: float,
    tags: Tags,
) -> None:
    scores, answers, formats = [], [], 0
    for group, ex in zip(sampled.completions, examples, strict=True):
        texts = [normalize_completion(c, prefilled, tags) for c in group]
        scores.append([score(t, ex) or 0.0 for t in texts])
        answers.append([extract_answer(t, tags=tags) for t in texts])
        formats += sum(is_strict_format(t, tags) for t in texts)
    n = max(len(examples), 1)
    result.samples_per_problem = per_problem
    result.temperature = temperature
    result.pass_at_k = {
        str(k): sum(pass_at_k(per_problem, int(sum(s)), k) for s in scores) / n for k in sorted(set(ks))
    }
    result.maj_at_k = {
        str(k): sum(majority_correct(a[:k], s[:k]) for a, s in zip(answers, scores, strict=True)) / n
        for k in sorted(set(ks))
    }
    result.sampled_format_rate = formats / max(n * per_problem, 1)
    result.seconds += sampled.seconds


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def main(recipe: Any, model_name: str | None = None) -> EvalResult:
    """`grpokit eval`: evaluate a model folder, hub id, run directory or the recipe's model."""
    configure_sandbox(recipe.sandbox)  # the recipe's sandbox: section, for the scores below
    model, tokenizer = load_trained(
        model_name or recipe.model.name, recipe.model.name, recipe.model.dtype, recipe.model.revision
    )
    task = task_of(recipe)
    return evaluate_recipe(model, tokenizer, task, task.dataset("test", recipe.eval.n), recipe)


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
        mistakes=recipe.eval.mistakes,
        system_prompt=recipe.task.system_prompt,
        label=label,
        samples_per_problem=recipe.eval.samples_per_problem,
        k=recipe.eval.k,
        temperature=recipe.eval.temperature,
        stop_texts=stop_texts(recipe),
        chat_template_kwargs=recipe.chat_template_kwargs,
        prefill=recipe.task.prefill,
        score_timeout=max((spec.timeout for spec in recipe.rewards), default=DEFAULT_TIMEOUT_S) or None,
    )


def stop_texts(recipe: Any) -> tuple[str, ...]:
    """The texts that end a rollout in training, and so an evaluation completion."""
    return (recipe.task.tags.answer_close,) if recipe.rollout.stop_at_answer else ()
