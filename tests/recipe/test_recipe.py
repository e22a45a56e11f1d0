from pathlib import Path

import pytest

from grpokit.errors import RecipeError
from grpokit.recipe.load import apply_override, build_recipe, load_recipe
from grpokit.tasks.arithmetic import ArithmeticTask

ALL_YAML = sorted(Path(__file__).resolve().parents[2].joinpath("recipes").rglob("*.yaml"))
# accelerate launch configs (DDP, DeepSpeed, FSDP), not recipes.
LAUNCH_CONFIGS = [p for p in ALL_YAML if p.name.startswith("accelerate") or p.parent.name == "accelerate"]
RECIPES = [p for p in ALL_YAML if p not in LAUNCH_CONFIGS]
MINIMAL = {
    "rewards": [{"name": "format"}, {"name": "correctness"}],
    "grpo": {"num_generations": 4, "per_device_train_batch_size": 8, "bf16": False},
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_shipped_recipe_loads_and_validates(path):
    recipe = load_recipe(path)
    assert recipe.rewards
    first_line = path.read_text(encoding="utf-8").splitlines()[0]
    assert first_line.startswith("#"), "each recipe opens with a comment: purpose, hardware, command"
    assert "Run:" in path.read_text(encoding="utf-8") or "grpokit train" in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", LAUNCH_CONFIGS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_launch_config_loads_in_accelerate(path):
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(str(path))  # unknown keys and bad values raise here
    assert path.read_text(encoding="utf-8").startswith("#"), "each launch config opens with what it is for"
    kind = config.distributed_type.value
    if kind == "DEEPSPEED":
        assert config.deepspeed_config["zero_stage"] in (2, 3)
    elif kind == "FSDP":
        assert config.fsdp_config["fsdp_version"] == 2
    else:
        assert kind == "MULTI_GPU"
    assert config.num_processes >= 2


def test_the_launch_configs_users_are_promised_exist():
    names = {p.name for p in LAUNCH_CONFIGS if p.parent.name == "accelerate"}
    assert {"ddp.yaml", "zero2.yaml", "zero3.yaml", "fsdp2.yaml"} <= names


def test_shipped_recipes_exist():
    assert any(p.name == "arithmetic_grpo.yaml" for p in RECIPES)


def test_grpo_section_becomes_grpo_config():
    from grpokit.recipe.trl_args import build_grpo_config

    recipe = build_recipe({**MINIMAL, "rewards": [{"name": "format", "weight": 0.5}, {"name": "correctness"}]})
    args = build_grpo_config(recipe, "out")
    assert args.num_generations == 4
    assert args.reward_weights == [0.5, 1.0]
    assert args.bf16 is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "must hold a mapping"),
        ("modle: {name: x}\n", "unknown key 'modle'; known keys in the recipe: .*model"),
        ("lora: {rank: 8}\n", r"unknown key 'lora.rank'; known keys in lora: .*\br\b"),
        ("lora: {r: eight}\n", "lora.r='eight' should be int"),
        ("lora: {r: 0}\n", "lora.r=0"),
        ("lora: {dropout: 1.5}\n", "lora.dropout=1.5"),
        ("task: {name: arithmatic}\n", "unknown task 'arithmatic'; known: arithmetic"),
        ("task: {params: {operands: 1}}\n", "task.params for 'arithmetic'"),
        ("rewards: [{name: formt}]\n", "unknown reward 'formt'; known: .*format"),
        ("rewards: []\n", "the recipe has no rewards"),
        ("rewards: [{weight: 1}]\n", "rewards.0"),
        ("rewards: [{name: format, params: {answer_regex: '[0-9'}}]\n", "rewards.0 .format.: answer_regex '\\[0-9'"),
        ("rewards: [{name: format, params: {answer_rgx: x}}]\n", "bad params for reward 'format'"),
        ("task: {name: countdown}\nrewards: [{name: steps}]\n", "rewards.0 .steps.: .*worked steps"),
        ("grpo: {learning_rat: 1e-5}\n", "unknown key grpo.learning_rat"),
        ("grpo: {learning_rate: -1e-5}\n", "grpo.learning_rate=-1e-05"),
        ("grpo: {num_generations: 1}\n", "at least 2 generations"),
        ("grpo: {num_generations: 3, per_device_train_batch_size: 8}\n", "divisible by num_generations"),
        ("grpo: {reward_weights: [1, 2]}\n", "rewards\\[\\*\\].weight"),
        ("eval: {n: 0}\n", "eval.n=0"),
        ("cold_start: {enabled: true, steps: 0}\n", "cold_start.steps=0"),
        ("sandbox: {batch: 0}\n", "sandbox.batch=0"),
        ("train_pass: {micro_batch_rows: 0}\n", "train_pass.micro_batch_rows=0"),
        ("dynamic_sampling: {replay: 2}\n", "dynamic_sampling.replay draws prompts again.*enabled: true"),
        ("dynamic_sampling: {enabled: true, replay: -1}\n", "dynamic_sampling.replay=-1"),
        ("dynamic_sampling: {retry: 1}\n", "dynamic_sampling.retry rolls failed prompts.*enabled: true"),
        ("dynamic_sampling: {enabled: true, retry: -1}\n", "dynamic_sampling.retry=-1"),
        ("dynamic_sampling: {enabled: true, retry: 1}\n", "success_reward='correctness' is not one of.*format"),
        ("dynamic_sampling: {enabled: true, guide: true}\n", "guide puts a demonstration.*retry >= 1"),
        ("dynamic_sampling: {enabled: true, replay: 1, upfront: true}\n", "upfront draws the extra prompts before"),
        ("dynamic_sampling: {downsample_to: 1}\n", "downsample_to=1; use >= 2"),
        ("dynamic_sampling: {downsample_to: 4}\n", "downsample_to=4 keeps every one of grpo.num_generations=4"),
        ("launch: {processes: 2}\ndynamic_sampling: {downsample_to: 2}\n", "downsample_to runs in one process"),
        (
            "grpo: {num_generations: 4, per_device_train_batch_size: 8, bf16: false, multi_objective_aggregation: "
            "normalize_then_sum}\ndynamic_sampling: {downsample_to: 2}\n",
            "downsample_to computes advantages from the summed reward",
        ),
        (
            "rewards: [{name: correctness}]\ndynamic_sampling: {enabled: true, retry: 1, guide: true}\n"
            "train_pass: {sampler_logprobs: true}\n",
            "guide: a demonstration row has no sampler log-probabilities",
        ),
        ("train_pass: {importance_sampling_cap: 0.5}\n", r"importance_sampling_cap=0.5; use a number >= 1"),
        (
            "train_pass: {importance_sampling_cap: 2, sampler_logprobs: true}\n",
            "importance_sampling_cap with train_pass.sampler_logprobs: both correct for the sampler",
        ),
        (
            "grpo: {num_generations: 4, per_device_train_batch_size: 8, bf16: false, use_vllm: true}\n"
            "train_pass: {importance_sampling_cap: 2}\n",
            "importance_sampling_cap needs grpokit's sampler.*vllm_importance_sampling_mode: token_truncate",
        ),
        (
            "rollout: {engine: trl}\ntrain_pass: {importance_sampling_cap: 2}\n",
            "importance_sampling_cap needs grpokit's sampler",
        ),
    ],
)
def test_bad_recipes_fail_with_the_key_named(tmp_path, text, message):
    base = "rewards: [{name: format}]\ngrpo: {num_generations: 4, per_device_train_batch_size: 8, bf16: false}\n"
    # Later keys of the same section replace the base's; the bad key is what the message must name.
    merged = text if text.startswith(("- ", "model: [")) else base + text
    with pytest.raises(RecipeError, match=message):
        load_recipe(write(tmp_path, merged))


def test_missing_file_and_non_utf8(tmp_path):
    with pytest.raises(RecipeError, match="recipe file not found"):
        load_recipe(tmp_path / "nope.yaml")
    path = tmp_path / "latin1.yaml"
    path.write_bytes("model: {name: caf\xe9}\n".encode("latin-1"))
    with pytest.raises(RecipeError, match="not UTF-8"):
        load_recipe(path)


def test_scientific_notation_is_a_float(tmp_path):
    recipe = load_recipe(
        write(
            tmp_path,
            "rewards: [{name: format}]\ncold_start: {learning_rate: 5e-4}\ngrpo: {learning_rate: 1e-5, bf16: false}\n",
        )
    )
    assert recipe.cold_start.learning_rate == 5e-4
    assert recipe.grpo["learning_rate"] == 1e-5


def test_overrides(tmp_path):
    path = write(tmp_path, "rewards: [{name: format}, {name: correctness}]\ngrpo: {bf16: false}\n")
    recipe = load_recipe(
        path,
        [
            "grpo.max_steps=7",
            "rewards.1.weight=2",
            "lora.enabled=false",
            "task.params.max_value=20",
            "output.name=mine",
        ],
    )
    assert recipe.grpo["max_steps"] == 7
    assert recipe.rewards[1].weight == 2.0
    assert recipe.lora.enabled is False
    assert recipe.task.params == {"max_value": 20}
    assert recipe.output.name == "mine"
    for bad in ["grpo.max_steps", "=3", "rewards.5.weight=1"]:
        with pytest.raises(RecipeError):
            load_recipe(path, [bad])


def test_override_of_unknown_key_fails(tmp_path):
    path = write(tmp_path, "rewards: [{name: format}]\ngrpo: {bf16: false}\n")
    with pytest.raises(RecipeError, match="unknown key 'eval.samplez'"):
        load_recipe(path, ["eval.samplez=3"])


def test_apply_override_parses_yaml_values():
    raw: dict = {}
    apply_override(raw, "grpo.temperature=0.7")
    apply_override(raw, "lora.target_modules=[q_proj, v_proj]")
    assert raw == {"grpo": {"temperature": 0.7}, "lora": {"target_modules": ["q_proj", "v_proj"]}}


def test_resolved_recipe_round_trips(tmp_path):
    import yaml

    recipe = load_recipe(RECIPES[0])
    again = build_recipe(yaml.safe_load(yaml.safe_dump(recipe.to_dict())))
    assert again.to_dict() == recipe.to_dict()


def test_trl_checkpoint_keys_map_to_the_output_section():
    old = build_recipe({**MINIMAL, "grpo": {**MINIMAL["grpo"], "save_strategy": "no"}})
    assert old.output.save_every == 0
    steps = build_recipe({**MINIMAL, "grpo": {**MINIMAL["grpo"], "save_steps": 5, "save_total_limit": 3}})
    assert (steps.output.save_every, steps.output.keep) == (5, 3)
    with pytest.raises(RecipeError, match="grpo.output_dir is set by grpokit"):
        build_recipe({**MINIMAL, "grpo": {**MINIMAL["grpo"], "output_dir": "x"}})


def test_bf16_follows_the_measurement_unless_the_recipe_says(monkeypatch):
    import grpokit.kernels.precision
    from grpokit.recipe.trl_args import build_grpo_config

    grpo = {k: v for k, v in MINIMAL["grpo"].items() if k != "bf16"}
    recipe = build_recipe({**MINIMAL, "grpo": grpo})
    monkeypatch.setattr(grpokit.kernels.precision, "default_bf16", lambda: True)
    args = build_grpo_config(recipe, "out")
    assert args.bf16 and args.use_cpu  # a CPU where bf16 measured faster: autocast, told it is a CPU
    monkeypatch.setattr(grpokit.kernels.precision, "default_bf16", lambda: False)
    assert not build_grpo_config(recipe, "out").bf16
    explicit = build_recipe({**MINIMAL, "grpo": {**grpo, "bf16": False}})
    monkeypatch.setattr(grpokit.kernels.precision, "default_bf16", lambda: True)
    assert not build_grpo_config(explicit, "out").bf16


def test_task_tags_are_a_recipe_setting(tmp_path):
    from grpokit.eval.evaluate import stop_texts
    from grpokit.tasks.parsing import THINK_TAGS, Tags

    assert build_recipe(MINIMAL).task.tags == THINK_TAGS  # the default stays <think>
    recipe = build_recipe({**MINIMAL, "task": {"name": "arithmetic", "tags": {"think": "reasoning"}}})
    assert recipe.task.tags == Tags(think="reasoning", answer="answer")
    assert build_recipe(recipe.to_dict()).task.tags == recipe.task.tags  # the resolved recipe keeps them
    final = build_recipe({**MINIMAL, "task": {"tags": {"think": "reasoning", "answer": "final"}}})
    assert stop_texts(final) == ("</final>",)  # a rollout stops at the recipe's closing answer tag
    path = write(tmp_path, "rewards: [{name: format}]\ngrpo: {num_generations: 4, per_device_train_batch_size: 8}\n")
    assert load_recipe(path, ["task.tags.think=reasoning"]).task.tags.think == "reasoning"


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ({"think": "answer"}, r"task.tags: think and answer are both 'answer'"),
        ({"think": "<reasoning>"}, r"task.tags: think='<reasoning>' is not a tag name"),
        ({"answer": "final answer"}, r"task.tags: answer='final answer' is not a tag name"),
        ({"think": 3}, r"task.tags.think=3 should be str"),
        ({"thought": "reasoning"}, r"unknown key 'task.tags.thought'"),
    ],
)
def test_bad_task_tags_fail_with_the_key_named(tags, message):
    with pytest.raises(RecipeError, match=message):
        build_recipe({**MINIMAL, "task": {"tags": tags}})


def test_prefill_think_is_a_recipe_setting():
    assert build_recipe(MINIMAL).task.prefill == ""  # off by default: the template's prompt as it is
    recipe = build_recipe({**MINIMAL, "task": {"prefill_think": True}})
    assert recipe.task.prefill == "<think>"
    assert build_recipe(recipe.to_dict()).task.prefill_think is True  # the resolved recipe keeps it
    reasoning = build_recipe({**MINIMAL, "task": {"prefill_think": True, "tags": {"think": "reasoning"}}})
    assert reasoning.task.prefill == "<reasoning>"


class UntaggedDemonstrations(ArithmeticTask):
    """A task (by dotted path) whose demonstrations give the answer without opening a thought."""

    def demonstration(self, example):
        return f"<answer>{example['answer']}</answer>"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"grpo": {**MINIMAL["grpo"], "chat_template_kwargs": {"enable_thinking": False}}},
            "task.prefill_think with grpo.chat_template_kwargs.enable_thinking: false",
        ),
        (
            {"stages": [{"name": "think", "grpo": {"chat_template_kwargs": '{"enable_thinking": false}'}}]},
            "stage 'think': task.prefill_think with .*enable_thinking: false",
        ),
        (
            {"stages": [{"name": "warmup", "kind": "sft"}, {"name": "grpo"}]},
            "stage 'warmup': task.prefill_think: .* do not open with <think>",
        ),
    ],
)
def test_prefill_think_that_cannot_work_fails_when_the_recipe_loads(raw, message):
    task = {"prefill_think": True, "name": "tests.recipe.test_recipe.UntaggedDemonstrations"}
    with pytest.raises(RecipeError, match=message):
        build_recipe({**MINIMAL, "task": task, **raw})
    build_recipe({**MINIMAL, "task": {**task, "prefill_think": False}, **raw})  # the same recipe without it loads


def test_a_loaded_recipe_is_frozen(tmp_path):
    import dataclasses

    recipe = load_recipe(write(tmp_path, "rewards: [{name: format}]\ngrpo: {bf16: false, save_steps: 5}\n"))
    assert recipe.output.name and recipe.output.save_every == 5  # what the loader sets, set before it froze
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.output.save_every = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.task.name = "countdown"
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.seed = 1


def test_loading_a_recipe_leaves_the_sandbox_settings_alone():
    from grpokit.sandbox import client

    before = client._allow_unconfined, client._batch_limit
    recipe = build_recipe({**MINIMAL, "sandbox": {"allow_unconfined": not before[0], "batch": 3}})
    assert (client._allow_unconfined, client._batch_limit) == before
    try:
        client.configure(recipe.sandbox)  # what a run does with its recipe's sandbox: section
        assert (client._allow_unconfined, client._batch_limit) == (not before[0], 3)
    finally:
        client.allow_unconfined(before[0])
        client.share_children(before[1])


def test_loading_a_recipe_times_nothing(monkeypatch):
    import grpokit.kernels.precision
    from grpokit.recipe.trl_args import measure_precision

    def measured():
        raise AssertionError("the bf16 measurement ran")

    monkeypatch.setattr(grpokit.kernels.precision, "default_bf16", measured)
    grpo = {k: v for k, v in MINIMAL["grpo"].items() if k != "bf16"}
    recipe = build_recipe({**MINIMAL, "grpo": grpo})  # bf16 left to the machine: validation checks in fp32
    with pytest.raises(AssertionError, match="measurement ran"):
        measure_precision(recipe)  # the run measures, before it seeds
    measure_precision(build_recipe(MINIMAL))  # bf16 set: nothing to measure
