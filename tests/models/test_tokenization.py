"""One tokenization everywhere: GRPO, the cold start, evaluation, chat and export feed the model the same
prompt ids, with a tokenizer that adds a BOS (as Llama 3, Gemma and Mistral do), template switches, and
the assistant's turn opened with `<think>` by the recipe (`task.prefill_think`)."""

import io

import pytest
import yaml

from grpokit.recipe.load import build_recipe
from grpokit.recipe.trl_args import build_grpo_config
from grpokit.tasks import build_task
from grpokit.tasks.base import render_prompt
from tests.conftest import BOS_CHATML, build_tiny_model, tiny_recipe

# Qwen3-style switch: `enable_thinking=False` writes an empty thought into the generation prompt.
SWITCHED = BOS_CHATML.replace(
    "{{ '<|im_start|>assistant\n' }}",
    "{{ '<|im_start|>assistant\n' }}{% if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\n\n</think>\n\n' }}{% endif %}",
)


@pytest.fixture(scope="module")
def bos_model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("bos-model"), SWITCHED, bos=True)


def _always_one(prompts, completions, **kwargs):
    return [1.0] * len(completions)


@pytest.mark.parametrize(
    ("switches", "prefill_think"),
    [({}, False), ({"enable_thinking": False}, False), ({}, True)],
    ids=["plain", "switched", "prefill_think"],
)
def test_every_stage_sees_the_same_prompt_ids(bos_model_dir, tmp_path, monkeypatch, switches, prefill_think):
    from transformers import AutoTokenizer

    from grpokit.eval import chat
    from grpokit.eval.evaluate import evaluate_recipe
    from grpokit.models import export
    from grpokit.models.load import load_model
    from grpokit.rollout import sampler as rollout
    from grpokit.stages import pipeline as train
    from grpokit.stages import sft as cold_start
    from grpokit.stages.trainer import GrpoTrainer

    raw = tiny_recipe(
        bos_model_dir, tmp_path, lora={"enabled": False}, rewards=[{"name": "format"}], cold_start={"examples": 2}
    )
    raw["grpo"]["chat_template_kwargs"] = switches
    raw["task"]["prefill_think"] = prefill_think
    recipe = build_recipe(raw)
    model, tokenizer = load_model(recipe.model.name)
    task = build_task("arithmetic")
    example = task.example("train", 1_000_000)  # the cold start's first demonstration
    messages = task.messages(example)
    text = render_prompt(tokenizer, messages, switches, recipe.task.prefill)
    assert text.endswith("<|im_start|>assistant\n<think>") == prefill_think
    expected = tokenizer(text, add_special_tokens=False)["input_ids"]
    bos = tokenizer.bos_token_id
    assert expected[0] == bos and expected[1] != bos, "the template writes one BOS"
    assert tokenizer(text)["input_ids"][:2] == [bos, bos], "adding special tokens would write a second"
    assert ("<think>\n\n</think>" in text) == bool(switches)

    # GRPO: the training data's prompt text, tokenized by the trainer on its way to the sampler.
    data = train.build_train_dataset(task, tokenizer, recipe)
    assert data[0]["prompt"] == render_prompt(tokenizer, task.messages(data[0]), switches, recipe.task.prefill)
    assert data[0]["prompt"].endswith("<think>") == prefill_think
    trainer = GrpoTrainer(
        model=model,
        reward_funcs=[_always_one],
        args=build_grpo_config(recipe, tmp_path / "grpo"),
        train_dataset=data,
        processing_class=tokenizer,
    )
    assert trainer._generate([text])[0] == [expected]

    # Cold start: the rows TRL's SFT trains on, prompt masked out of the loss.
    sft = cold_start.build_trainer(model, tokenizer, recipe, tmp_path / "sft")
    row = sft.train_dataset[0]
    assert row["input_ids"][: len(expected)] == expected
    trained = [label != -100 for label in row["labels"]]
    assert trained.index(True) == len(expected), "the loss starts right after the prompt"
    # After a prefilled <think> the demonstration goes on inside the thought: the tag is not written twice.
    demonstration = task.demonstration(example)
    completion = tokenizer.decode(row["input_ids"][len(expected) :], skip_special_tokens=True)
    assert completion == (demonstration.removeprefix("<think>") if prefill_think else demonstration)

    # Evaluation: what grpokit's sampler is handed.
    seen = []
    original = rollout.sample

    def spy(model, prompts, *args, **kwargs):
        seen.extend(prompts)
        return original(model, prompts, *args, **kwargs)

    monkeypatch.setattr(rollout, "sample", spy)
    evaluate_recipe(model, tokenizer, task, [example], recipe)
    assert seen == [expected]

    # Chat: what `generate` is handed.
    handed = []

    def fake_generate(**kwargs):
        handed.append(kwargs["input_ids"][0].tolist())
        kwargs["streamer"].end()

    monkeypatch.setattr(model, "generate", fake_generate)
    _, _, _, rendering = chat.load(str(_run_dir(model, tokenizer, recipe, tmp_path / "run")), None)
    shown = io.StringIO()
    assert chat.reply(model, tokenizer, messages, shown, max_new_tokens=2, **rendering) == recipe.task.prefill
    assert handed == [expected] and shown.getvalue() == recipe.task.prefill + "\n"  # the turn shows its opening

    # Export: a plain `apply_chat_template` call on the exported tokenizer, without a system message.
    exported = AutoTokenizer.from_pretrained(export.main(tmp_path / "run", tmp_path / "exported"))
    plain = exported.apply_chat_template(messages[1:], add_generation_prompt=True, tokenize=True, return_dict=True)
    assert plain["input_ids"] == expected


def _run_dir(model, tokenizer, recipe, run_dir):
    """A full fine-tune's run directory holding `model` as it is, for chat and export to read."""
    model.save_pretrained(run_dir / "model")
    tokenizer.save_pretrained(run_dir / "model")
    (run_dir / "recipe.yaml").write_text(yaml.safe_dump(recipe.to_dict()), encoding="utf-8")
    return run_dir
