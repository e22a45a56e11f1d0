"""The task contract: a seeded generator or loader, the prompt it builds, and a strict 0/1 verifier.

Correctness has one source of truth: the correctness reward, evaluation accuracy and pass@k all call
`Task.score`. Shaping (partial credit, length, format) lives in rewards, never here.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from grpokit.parsing import THINK_TAGS, Tags


def default_system_prompt(tags: Tags = THINK_TAGS) -> str:
    """The R1-style instruction, naming the recipe's tags."""
    return (
        f"Think step by step inside {tags.think_open} {tags.think_close} tags, "
        f"then give only the final answer inside {tags.answer_open} {tags.answer_close} tags."
    )


DEFAULT_SYSTEM_PROMPT = default_system_prompt()

Example = dict[str, Any]  # one row: at least "question" and "answer"; tasks may add fields


class Task:
    """Base class of every task. Subclasses set `name` and `config_class` and implement `example`/`score`.

    Synthetic tasks are deterministic per index (`random.Random(seed + index)`), and the train and
    eval splits never share a problem (`split_of` partitions the problem space by a stable hash).

    `tags` are the recipe's thought and answer tags (`build_task` sets them): `score`, `demonstration`
    and the default system prompt use them.
    """

    name: ClassVar[str]
    config_class: ClassVar[type]
    system_prompt: ClassVar[str | None] = None  # a task's own instruction; None: `default_system_prompt(tags)`
    tags: Tags = THINK_TAGS
    # True when scoring runs a verifier in the sandbox worker (grpokit.sandbox), which needs the
    # kernel's confinement or the recipe's sandbox.allow_unconfined.
    uses_sandbox: bool = False
    # True when every problem carries its worked solution as `x op y = z.` lines in `example["steps"]`,
    # which the `steps` reward checks the thought against.
    worked_steps: ClassVar[bool] = False

    def __init__(self, config: Any) -> None:
        config.validate()
        self.config = config

    def example(self, split: str, index: int) -> Example:
        raise NotImplementedError

    def score(self, completion: str, example: Example) -> float:
        """1.0 if the completion's answer is correct, else 0.0. Never raises on model output."""
        raise NotImplementedError

    def score_many(self, completions: list[str], examples: list[Example]) -> list[float]:
        """`score` for each pair. A task whose verifier costs a round trip per call (the sandbox) overrides
        this to batch the calls; it must return what `score` returns, item by item."""
        return [self.score(c, e) for c, e in zip(completions, examples, strict=True)]

    def demonstration(self, example: Example) -> str | None:
        """A worked completion in the target format, for the cold-start stage; None if unavailable."""
        return None

    def notes(self) -> list[str]:
        """Things a user should know about the data, e.g. rows skipped for an unreadable gold answer."""
        return []

    def adversarial(self, example: Example) -> list[tuple[str, str]]:
        """Task-specific (name, completion) tricks that must score 0, for `grpokit rewards check`.

        Written in the default `<think>`/`<answer>` tags; the check puts them in the recipe's (`retag`)."""
        return []

    def dataset(self, split: str, n: int, distinct: bool = True) -> list[Example]:
        """The first `n` problems of a split (distinct ones by default), in a fixed order."""
        if not distinct:
            return [self.example(split, i) for i in range(n)]
        rows: list[Example] = []
        seen: set[str] = set()
        index = 0
        # Bounded: a small problem space ends the search instead of looping forever.
        while len(rows) < n and index < 50 * n + 1000:
            row = self.example(split, index)
            index += 1
            if row["question"] not in seen:
                seen.add(row["question"])
                rows.append(row)
        if len(rows) < n:
            raise ValueError(
                f"task {self.name!r} has only {len(rows)} distinct {split} problems, fewer than the {n} "
                "asked for; ask for fewer (eval.n) or give the task more problems (wider ranges, more rows)"
            )
        return rows

    @classmethod
    def instruction(cls, tags: Tags = THINK_TAGS) -> str:
        """The system prompt when the recipe sets none: the task's own, or the default naming `tags`."""
        return cls.system_prompt or default_system_prompt(tags)

    def messages(self, example: Example, system_prompt: str | None = None) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": system_prompt or self.instruction(self.tags)},
            {"role": "user", "content": example["question"]},
        ]


def split_of(key: str, eval_fraction: float) -> str:
    """'eval' for a stable `eval_fraction` of all problem keys, else 'train'."""
    digest = hashlib.sha256(key.encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction else "train"


def partition(items: list, key: Any, eval_fraction: float) -> dict[str, list]:
    """`items` split into {"train": [...], "eval": [...]} by `split_of(key(item))`, order kept.

    >>> splits = partition(list("abcdefgh"), str, 0.5)
    >>> sorted(splits["train"] + splits["eval"]) == list("abcdefgh"), splits["train"] == sorted(splits["train"])
    (True, True)
    """
    splits: dict[str, list] = {"train": [], "eval": []}
    for item in items:
        splits[split_of(key(item), eval_fraction)].append(item)
    return splits


def render_prompt(
    tokenizer: Any,
    messages: list[dict[str, str]],
    chat_template_kwargs: dict[str, Any] | None = None,
    prefill: str = "",
) -> str:
    """The exact text the model sees, shared by training, evaluation, the cold start and chat.

    `chat_template_kwargs` are the template's own switches (Qwen3's `enable_thinking`), from the recipe's
    `grpo.chat_template_kwargs`: grpokit renders prompts to text itself, so TRL never sees them.
    `prefill` opens the assistant's turn (the recipe's `task.prefill`, `<think>` under `task.prefill_think`),
    unless the template's generation prompt already ends with it.
    """
    prompt = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )
    if prefill and not prompt.rstrip().endswith(prefill):
        prompt += prefill
    return prompt


def tokenize_prompts(tokenizer: Any, prompts: list[str]) -> list[list[int]]:
    """Token ids of rendered prompts, the one tokenization every stage uses.

    The chat template writes the BOS token itself where the model wants one (Llama 3, Gemma, Mistral);
    a tokenizer that also adds special tokens would put a second BOS in front. Without special tokens the
    ids equal `apply_chat_template(..., tokenize=True)`'s, which is what vLLM and plain chat callers see.
    """
    return tokenizer(text=list(prompts), add_special_tokens=False)["input_ids"]


def think_prefilled(prompt: str, tags: Tags = THINK_TAGS) -> bool:
    """True when the chat template opens the thought itself (its generation prompt ends in <think>)."""
    return prompt.rstrip().endswith(tags.think_open)
