"""The task contract: a seeded generator or loader, the prompt it builds, and a strict 0/1 verifier.

Correctness has one source of truth: the correctness reward, evaluation accuracy and pass@k all call
`Task.score`. Shaping (partial credit, length, format) lives in rewards, never here.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Any, ClassVar

from grpokit.tasks.parsing import THINK_TAGS, Tags


def default_system_prompt(tags: Tags = THINK_TAGS) -> str:
    """The R1-style instruction, naming the recipe's tags."""
    return (
        f"Think step by step inside {tags.think_open} {tags.think_close} tags, "
        f"then give only the final answer inside {tags.answer_open} {tags.answer_close} tags."
    )


DEFAULT_SYSTEM_PROMPT = default_system_prompt()

Example = dict[str, Any]  # one row: at least "question" and "answer"; tasks may add fields

# `train` is trained on, `validation` watched and tuned on (in-training evaluations), `test` reported.
SPLITS = ("train", "validation", "test")


class Task:
    """Base class of every task. Subclasses set `name` and `config_class` and implement `example`/`score`.

    Synthetic tasks are deterministic per index (`random.Random(seed + index)`). The splits (`SPLITS`)
    never share a problem: `split_of` assigns each problem by a stable hash of its canonical form
    (`key`), so the forms of one computation or question fall on one side.

    `tags` are the recipe's thought and answer tags (`build_task` sets them): `score`, `demonstration`
    and the default system prompt use them.
    """

    name: ClassVar[str]
    config_class: ClassVar[type]
    system_prompt: ClassVar[str | None] = None  # a task's own instruction; None: `default_system_prompt(tags)`
    tags: Tags = THINK_TAGS
    # True when scoring runs a verifier in the sandbox worker (grpokit.sandbox.client), which needs the
    # kernel's confinement or the recipe's sandbox.allow_unconfined.
    uses_sandbox: bool = False
    # True when every problem carries its worked solution as `x op y = z.` lines (a column of column
    # addition: `4 + 2 + 1 = 7.`) in `example["steps"]`, which the `steps` reward checks the thought against.
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

    def demonstration_hint(self) -> str:
        """How a user makes a task that wrote no demonstration write them ("" when nothing can), for the error
        that refuses its sft stage."""
        return ""

    def notes(self) -> list[str]:
        """Things a user should know about the data, e.g. rows skipped for an unreadable gold answer."""
        return []

    def adversarial(self, example: Example) -> list[tuple[str, str]]:
        """Task-specific (name, completion) tricks that must score 0, for `grpokit rewards check`.

        Written in the default `<think>`/`<answer>` tags; the check puts them in the recipe's (`retag`)."""
        return []

    def key(self, example: Example) -> str:
        """The problem's canonical form: two rows with one key are the same problem, and share a split.

        The default is the normalised question text (`normalise_question`); tasks whose problems can be
        written several ways (a computation's commuted forms) override it."""
        return normalise_question(str(example["question"]))

    def dataset(self, split: str, n: int, distinct: bool = True) -> list[Example]:
        """The first `n` problems of a split (distinct canonical forms by default), in a fixed order."""
        check_split(split)
        if not distinct:
            return [self.example(split, i) for i in range(n)]
        rows: list[Example] = []
        seen: set[str] = set()
        index = 0
        # Bounded: a small problem space ends the search instead of looping forever.
        while len(rows) < n and index < 50 * n + 1000:
            row = self.example(split, index)
            index += 1
            key = self.key(row)
            if key not in seen:
                seen.add(key)
                rows.append(row)
        if len(rows) < n:
            raise ValueError(
                f"task {self.name!r} has only {len(rows)} distinct {split} problems, fewer than the {n} "
                "asked for; ask for fewer (eval.n) or give the task more problems (wider ranges, more rows"
                f"{'' if split == 'train' else f', a larger {split}_fraction'})"
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


def check_split(split: str) -> None:
    """Refuse a split name that is not one of `SPLITS`, naming them."""
    if split not in SPLITS:
        hint = (
            " (the held-out split is now 'validation' for tuning and 'test' for reporting)" if split == "eval" else ""
        )
        raise ValueError(f"split={split!r}; use one of {', '.join(SPLITS)}{hint}")


def check_fractions(validation_fraction: float, test_fraction: float) -> None:
    """Refuse held-out shares that leave a split empty: each in (0, 1), together below 1."""
    for name, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name}={value}; it must be in (0, 1)")
    if validation_fraction + test_fraction >= 1.0:
        raise ValueError(
            f"validation_fraction + test_fraction = {validation_fraction + test_fraction:g} leaves nothing to "
            "train on; keep their sum below 1"
        )


def split_of(key: str, validation_fraction: float, test_fraction: float) -> str:
    """The split of the problem whose canonical form is `key`: 'test' for a stable `test_fraction` of all
    keys, 'validation' for the next `validation_fraction`, 'train' for the rest.

    >>> from collections import Counter
    >>> sorted(Counter(split_of(str(i), 0.1, 0.2) for i in range(10_000)).items())
    [('test', 2052), ('train', 6939), ('validation', 1009)]
    """
    digest = hashlib.sha256(key.encode()).digest()
    where = int.from_bytes(digest[:8], "big") / 2**64
    if where < test_fraction:
        return "test"
    return "validation" if where < test_fraction + validation_fraction else "train"


def partition(items: list, key: Any, validation_fraction: float, test_fraction: float) -> dict[str, list]:
    """`items` split into {"train": [...], "validation": [...], "test": [...]} by `split_of(key(item))`,
    order kept.

    >>> splits = partition(list("abcdefgh"), str, 0.25, 0.25)
    >>> sorted(sum(splits.values(), [])) == list("abcdefgh"), splits["train"] == sorted(splits["train"])
    (True, True)
    """
    splits: dict[str, list] = {split: [] for split in SPLITS}
    for item in items:
        splits[split_of(key(item), validation_fraction, test_fraction)].append(item)
    return splits


def normalise_question(text: str) -> str:
    """A question's text as a split key: Unicode-normalised (NFKC), case-folded, without blanks or
    closing punctuation, so that copies differing only in spacing, case or a final `?` share a split.

    >>> normalise_question("What is  2+2?") == normalise_question("what is 2 + 2")
    True
    >>> normalise_question("What is 2+2?") == normalise_question("What is 2-2?")
    False
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(text.split()).rstrip(".?!:;,")


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
