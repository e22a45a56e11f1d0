import io
import json
import subprocess
import sys

import pytest

from grpokit.recipe.load import build_recipe
from grpokit.tasks.base import DEFAULT_SYSTEM_PROMPT
from tests.conftest import tiny_recipe


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory):
    from grpokit.stages import pipeline as train

    return train.main(build_recipe(tiny_recipe(tiny_model_dir, tmp_path_factory.mktemp("export"))))


def test_export_merges_lora_exactly(run_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from grpokit.models import export
    from grpokit.models.load import load_trained
    from grpokit.recipe.load import load_recipe

    out = export.main(run_dir, tmp_path / "merged")
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    assert json.loads((out / "grpokit_export.json").read_text())["task"] == "arithmetic"
    recipe = load_recipe(run_dir / "recipe.yaml")
    trained, _ = load_trained(run_dir, recipe.model.name)
    merged = AutoModelForCausalLM.from_pretrained(out)
    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    with torch.no_grad():
        assert torch.allclose(trained.eval()(ids).logits, merged.eval()(ids).logits, atol=1e-5)
    with pytest.raises(FileExistsError, match="not empty"):
        export.main(run_dir, out)


def test_plain_transformers_pipeline_loads_it_in_a_fresh_process(run_dir, tmp_path):
    from grpokit.models import export

    out = export.main(run_dir, tmp_path / "merged")
    script = f"""
import json, transformers
pipe = transformers.pipeline("text-generation", model={str(out)!r})
messages = [{{"role": "user", "content": "What is 2 + 3 * 4?"}}]
prompt = pipe.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
result = pipe(messages, max_new_tokens=5, do_sample=False)
print(json.dumps({{"prompt": prompt, "reply": result[0]["generated_text"][-1]}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert DEFAULT_SYSTEM_PROMPT in result["prompt"]  # the task's instruction is the default system message
    assert result["reply"]["role"] == "assistant"


def test_chat_one_shot_and_interactive(run_dir, capsys):
    from grpokit.cli.commands import main
    from grpokit.eval import chat

    assert main(["chat", str(run_dir), "--prompt", "What is 1 + 1 * 1?", "--max-new-tokens", "4"]) == 0
    # The streamed reply is exactly the greedy completion of the chat prompt.
    model, tokenizer, system, _ = chat.load(str(run_dir), None)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "What is 1 + 1 * 1?"}]
    streamed = chat.reply(model, tokenizer, messages, io.StringIO(), max_new_tokens=6)
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    full = model.generate(**ids, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert streamed == tokenizer.decode(full[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    out = io.StringIO()
    assert chat.main(str(run_dir), stdin=io.StringIO("hello\nagain\n\n"), stdout=out, max_new_tokens=3) == 0
    assert out.getvalue().count("\n> ") == 3 and DEFAULT_SYSTEM_PROMPT in out.getvalue()


def test_export_and_chat_follow_the_recipes_tags(tmp_path):
    """A run whose recipe sets `task.tags: {think: reasoning}` and whose template opens the thought itself."""
    import shutil

    import yaml
    from transformers import AutoTokenizer

    from grpokit.eval import chat
    from grpokit.models import export
    from grpokit.tasks.base import render_prompt, think_prefilled
    from grpokit.tasks.parsing import Tags
    from tests.conftest import CHATML, build_tiny_model

    prefilling = CHATML.replace("'<|im_start|>assistant\n'", "'<|im_start|>assistant\n<reasoning>\n'")
    model_dir = build_tiny_model(tmp_path / "base", chat_template=prefilling)
    run_dir = tmp_path / "run"
    shutil.copytree(model_dir, run_dir / "model")  # a full fine-tune's run directory, without the training
    recipe = build_recipe(tiny_recipe(model_dir, tmp_path / "runs", task={"tags": {"think": "reasoning"}}))
    (run_dir / "recipe.yaml").write_text(yaml.safe_dump(recipe.to_dict()), encoding="utf-8")

    out = export.main(run_dir, tmp_path / "exported")
    assert json.loads((out / "grpokit_export.json").read_text())["tags"] == {"think": "reasoning", "answer": "answer"}
    tokenizer = AutoTokenizer.from_pretrained(out)
    prompt = render_prompt(tokenizer, [{"role": "user", "content": "What is 2 + 3?"}])
    assert "<reasoning> </reasoning>" in prompt and "<think>" not in prompt  # the default system message
    assert think_prefilled(prompt, Tags(think="reasoning")) and not think_prefilled(prompt)
    _, _, system, _ = chat.load(str(run_dir), None)
    assert "<reasoning> </reasoning>" in system and "<think>" not in system


def test_export_of_a_prefill_think_run_whose_template_opens_the_thought_itself(tmp_path):
    """The template's own `<think>` is the prefill: neither training nor the exported template adds a second."""
    import shutil

    import yaml
    from transformers import AutoTokenizer

    from grpokit.models import export
    from grpokit.tasks.base import render_prompt
    from tests.conftest import CHATML, build_tiny_model

    prefilling = CHATML.replace("'<|im_start|>assistant\n'", "'<|im_start|>assistant\n<think>\n'")
    model_dir = build_tiny_model(tmp_path / "base", chat_template=prefilling)
    run_dir = tmp_path / "run"
    shutil.copytree(model_dir, run_dir / "model")  # a full fine-tune's run directory, without the training
    recipe = build_recipe(tiny_recipe(model_dir, tmp_path / "runs", task={"prefill_think": True}))
    (run_dir / "recipe.yaml").write_text(yaml.safe_dump(recipe.to_dict()), encoding="utf-8")

    out = export.main(run_dir, tmp_path / "exported")
    assert json.loads((out / "grpokit_export.json").read_text())["prefill_think"] is True
    messages = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": "What is 2 + 3?"}]
    trained = render_prompt(AutoTokenizer.from_pretrained(model_dir), messages, {}, recipe.task.prefill)
    plain = AutoTokenizer.from_pretrained(out).apply_chat_template(
        messages[1:], tokenize=False, add_generation_prompt=True
    )
    assert plain == trained and plain.endswith("<|im_start|>assistant\n<think>\n")
