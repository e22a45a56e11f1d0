"""Any reasoning-gym dataset, scored by reasoning-gym's own `score_answer` inside the sandbox.

    task:
      name: reasoning_gym
      params:
        dataset: countdown                  # any name in reasoning_gym.factory.DATASETS
        config: {min_numbers: 3, max_numbers: 4, max_target: 100}   # the dataset's difficulty settings

`config` takes the dataset's own config fields (difficulty, ranges; `grpokit tasks` lists the datasets);
an unknown field fails at load time with the known ones listed. A generated problem belongs to the
train, validation or test split by a stable hash of its normalised question, so the splits never share
a problem.

Correctness is strict: 1.0 when `score_answer` returns at least `threshold` (1.0 by default), else 0.0;
reasoning-gym's partial credit (0.01 for a malformed answer, 0.05 for a wrong one) is not paid.
Several reasoning-gym scorers hand the answer to sympy's `parse_expr` or to Python `eval`. Each
dataset has a scoring path (`grpokit tasks` lists them, `grpokit.sandbox.scorers.GYM_PATHS` defines them):
countdown and puzzle24 are decided by grpokit's own AST evaluator (`grpokit.sandbox.expressions`) in the
trainer; scorers that parse sympy or Python literals get a screen for that language first; every
reasoning-gym scorer runs only in the confined sandbox worker.

Every dataset is audited by probes (`grpokit.tasks.gym_audit`): answers that solve nothing (`0`, `nan`,
`banana`, the gold off by one, a list of NaN, ...). Where reasoning-gym's scorer pays one on more than
one problem, grpokit decides with its own strict verifier (`grpokit.tasks.gym_verifiers`: puzzle24,
complex_arithmetic, number_sorting, game_of_life_halting, coin_flip), or refuses the dataset with a
message naming the probe; `grpokit tasks` shows each dataset's result.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from grpokit.errors import SandboxError
from grpokit.registry import did_you_mean
from grpokit.sandbox.client import shared_sandbox
from grpokit.sandbox.scorers import IN_TRAINER, gym_path, gym_refusal
from grpokit.tasks.base import SPLITS, Example, Task, check_fractions, check_split, normalise_question, split_of
from grpokit.tasks.gym_audit import refusal
from grpokit.tasks.gym_verifiers import VERIFIERS, verify
from grpokit.tasks.parsing import extract_answer
from grpokit.tasks.registry import register_task

logger = logging.getLogger(__name__)

SCORE_TIMEOUT_S = 10.0
INSTALL_HINT = "install it with: pip install 'grpokit[gym]' (or pip install reasoning-gym)"


def available_datasets() -> list[str]:
    if importlib.util.find_spec("reasoning_gym") is None:
        return []
    # optional dependency: reasoning-gym
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


@dataclass
class ReasoningGymConfig:
    dataset: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    size: int = 20000  # problems generated (both splits together)
    seed: int = 0
    validation_fraction: float = 0.05  # shares of the problems (by normalised question) held out
    test_fraction: float = 0.05
    threshold: float = 1.0

    def validate(self) -> None:
        if importlib.util.find_spec("reasoning_gym") is None:
            raise ValueError(f"the reasoning_gym task needs the reasoning-gym package; {INSTALL_HINT}")
        # optional dependency: reasoning-gym
        from reasoning_gym.factory import DATASETS

        if not self.dataset:
            raise ValueError("task.params.dataset is required: a reasoning-gym dataset name, e.g. countdown")
        if self.dataset not in DATASETS:
            raise ValueError(
                f"unknown reasoning-gym dataset {self.dataset!r}; known: {', '.join(sorted(DATASETS))}"
                f"{did_you_mean(self.dataset, DATASETS)}"
            )
        refused = refusal(self.dataset)
        if refused:
            raise ValueError(f"reasoning-gym dataset {self.dataset!r} is refused: {refused}")
        if not isinstance(self.config, dict):
            raise ValueError(f"task.params.config must be a mapping of {self.dataset}'s settings")
        config_class = DATASETS[self.dataset][1]
        known = {f.name for f in dataclasses.fields(config_class)} - {"seed", "size"}
        unknown = sorted(set(self.config) - known)
        if unknown:
            raise ValueError(
                f"unknown setting {unknown[0]!r} for reasoning-gym dataset {self.dataset!r}; "
                f"known: {', '.join(sorted(known))}"
            )
        if self.size < 20:
            raise ValueError(f"size={self.size}; generate at least 20 problems")
        check_fractions(self.validation_fraction, self.test_fraction)
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold={self.threshold}; it must be in (0, 1]")


@register_task
class ReasoningGymTask(Task):
    name = "reasoning_gym"
    config_class = ReasoningGymConfig

    @property
    def uses_sandbox(self) -> bool:
        return gym_path(self.config.dataset) not in IN_TRAINER

    def __init__(self, config: ReasoningGymConfig) -> None:
        super().__init__(config)
        # optional dependency: reasoning-gym
        import reasoning_gym

        self.params_key = tuple(sorted({**config.config, "seed": config.seed, "size": config.size}.items()))
        try:
            self.data = reasoning_gym.create_dataset(config.dataset, **dict(self.params_key))
        except Exception as err:  # reasoning-gym validates its config with asserts and ValueErrors
            raise ValueError(
                f"reasoning-gym rejected the config for {config.dataset!r}: {err or type(err).__name__}"
            ) from err
        self.indices: dict[str, list[int]] = {split: [] for split in SPLITS}
        self.scanned = 0
        self.score_errors = 0

    @lru_cache(maxsize=100_000)  # noqa: B019 - one task object per run; entries are deterministic per index
    def entry(self, index: int) -> dict[str, Any]:
        return self.data[index]

    def example(self, split: str, index: int) -> Example:
        check_split(split)
        indices, cfg = self.indices[split], self.config
        while len(indices) <= index and self.scanned < cfg.size:
            key = normalise_question(self.entry(self.scanned)["question"])
            self.indices[split_of(key, cfg.validation_fraction, cfg.test_fraction)].append(self.scanned)
            self.scanned += 1
        if not indices:
            raise ValueError(f"reasoning-gym {self.config.dataset}: no {split} problems among {self.config.size}")
        gym_index = indices[index % len(indices)]
        entry = self.entry(gym_index)
        return {"question": entry["question"], "answer": str(entry["answer"]), "gym_index": gym_index}

    def score(self, completion: str, example: Example) -> float:
        answer = extract_answer(completion, tags=self.tags)
        if answer is None:
            return 0.0
        index = int(example["gym_index"])
        if self.config.dataset in VERIFIERS:
            return verify(self.config.dataset, answer, self.entry(index))
        if gym_refusal(self.config.dataset, answer) is not None:
            return 0.0
        try:
            value = shared_sandbox().score(
                "grpokit.sandbox.scorers:gym_score",
                self.config.dataset,
                dict(self.params_key),
                index,
                self.plain_entry(index),
                answer,
                timeout=SCORE_TIMEOUT_S,
            )
        except SandboxError as err:
            self.score_errors += 1
            logger.debug("reasoning-gym score failed: %s", err)
            return 0.0
        return 1.0 if value >= self.config.threshold else 0.0

    @lru_cache(maxsize=10_000)  # noqa: B019 - as `entry`
    def plain_entry(self, index: int) -> dict[str, Any] | None:
        """The entry as JSON data for the worker, or None when JSON would change it (the worker then
        generates it again from its index)."""
        entry = self.entry(index)
        try:
            return entry if json.loads(json.dumps(entry, allow_nan=False)) == entry else None
        except (TypeError, ValueError):
            return None

    def demonstration(self, example: Example) -> str | None:
        """Format only: reasoning-gym gives answers, not worked solutions, so the thought is brief."""
        t, answer = self.tags, example["answer"]
        return f"{t.think_open}\nThe answer is {answer}.\n{t.think_close}\n{t.answer_open}{answer}{t.answer_close}"

    def adversarial(self, example: Example) -> list[tuple[str, str]]:
        return [
            ("python payload", "<think>x</think><answer>__import__('os').system('touch pwned.txt')</answer>"),
            ("file write", "<think>x</think><answer>open('pwned.txt', 'w').write('x')</answer>"),
            ("nested power", "<think>x</think><answer>9**9**9**9</answer>"),
            ("hex-encoded exec", "<think>x</think><answer>exec(bytes.fromhex('6f70656e').decode())</answer>"),
            ("chr join", "<think>x</think><answer>eval(''.join(map(chr, [49, 43, 49])))</answer>"),
        ]
