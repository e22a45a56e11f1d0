"""Shared fixtures: a tiny random-weight chat model built inside the tests (offline, seconds on 2 cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

import grpokit.rewards.adapter

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# Llama 3, Gemma and Mistral: the template writes the BOS token, and the tokenizer adds one to any text too.
BOS_CHATML = "{{ bos_token }}" + CHATML


def build_tiny_model(out_dir: Path, chat_template: str = CHATML, bos: bool = False) -> Path:
    """A 2-layer Llama with a 400-token BPE vocabulary learned from the arithmetic task's own text.

    `bos`: a `<s>` token that the tokenizer adds in front of every text (pair it with BOS_CHATML)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from grpokit.tasks import build_task
    from grpokit.tasks.base import DEFAULT_SYSTEM_PROMPT

    task = build_task("arithmetic")
    corpus = [DEFAULT_SYSTEM_PROMPT, "system user assistant"]
    corpus += [row["question"] + " " + task.demonstration(row) for row in task.dataset("train", 300, distinct=False)]
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=["<unk>", "<|im_start|>", "<|im_end|>", *(["<s>"] if bos else [])],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<s>" if bos else "<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<unk>",
    )
    tokenizer.chat_template = chat_template
    if bos:
        tokenizer.add_bos_token = True  # rewrites the post-processor, which tokenizer.json keeps
    torch.manual_seed(0)
    # Shrunk to the minimum that still exercises every code path: 2 layers, GQA (2 heads, 1 kv head).
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str):
    """A script of the repository (bench/, scripts/) imported as a module, by its path from the root; its
    own folder is importable while it loads (bench scripts import one another)."""
    import importlib.util
    import sys

    path = ROOT / relative
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module  # dataclasses look their module up while the script loads
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


def tiny_recipe(model_dir: Path, out_dir: Path, **sections: dict) -> dict:
    """A recipe dict shrunk for the tiny model; each value is commented where it is shrunk."""
    raw = {
        "model": {"name": str(model_dir)},
        "lora": {"r": 4, "alpha": 8},  # small rank: fewer parameters, same code path
        "task": {"name": "arithmetic", "train_size": 16},
        "rewards": [{"name": "format", "weight": 0.5}, {"name": "correctness"}],
        "cold_start": {"enabled": False, "examples": 16, "steps": 2, "batch_size": 4},
        "grpo": {
            "learning_rate": 1e-2,  # large, so two steps visibly move the weights
            "max_steps": 2,  # two GRPO steps are enough to prove the wiring
            "num_generations": 4,
            "per_device_train_batch_size": 8,  # 2 prompts x 4 completions
            "max_completion_length": 12,  # short completions: the model is random anyway
            "beta": 0.0,
            "bf16": False,
            "activation_checkpointing": False,
            "logging_steps": 1,
        },
        "eval": {"n": 6, "max_new_tokens": 8, "batch_size": 6, "samples": 2},  # a smoke-sized eval
        "output": {"dir": str(out_dir), "name": "tiny"},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return raw


def headless_chromium():
    """A selenium driver on Debian's headless Chromium; `make test` installs it (and requires it)."""
    import os
    import shutil

    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        if os.environ.get("GRPOKIT_REQUIRE_BROWSER"):
            pytest.fail("chromium/chromedriver missing: install the Debian packages chromium chromium-driver")
        pytest.skip("chromium/chromedriver not installed (make test installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,2400"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


@pytest.fixture(autouse=True)
def no_call_overrunning_from_other_tests(monkeypatch):
    """Calls other tests abandoned (rewards that sleep a minute) may still be running, and a timeout while
    one runs is laid on the machinery, not the completion: every test starts with none, whatever ran before."""
    monkeypatch.setattr(grpokit.rewards.adapter, "_overrunning", set())
