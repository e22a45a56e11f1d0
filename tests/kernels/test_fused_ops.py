"""RMSNorm and the MLP's SiLU product as one autograd function each (grpokit.kernels.fused_ops): transformers' numbers
and gradients, and transformers' own forward for any module whose code is not Llama's."""

import pytest
import torch

from grpokit.kernels import fused_ops
from tests.lm_grads import loss_and_grads as _loss_and_grads
from tests.lm_grads import nudge, token_ids


def _model(model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():  # norms start at one: moved so that a dropped weight shows
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    return model


@pytest.fixture
def ids():
    return token_ids()


@pytest.fixture
def calls(monkeypatch):
    seen = []
    for cls in (fused_ops._RmsNorm, fused_ops._SiluMul):
        apply = cls.apply

        def counted(*args, _apply=apply, _name=cls.__name__):
            seen.append(_name)
            return _apply(*args)

        monkeypatch.setattr(cls, "apply", counted)
    return seen


def test_fp32_full_fine_tune_equals_transformers(tiny_model_dir, ids, calls):
    model = _model(tiny_model_dir)
    loss_ref, grads_ref = _loss_and_grads(model, ids)
    blocks = model.config.num_hidden_layers
    assert fused_ops.install(model) == 3 * blocks + 1  # two norms and an MLP per block, the final norm
    assert fused_ops.install(model) == 3 * blocks + 1, "installing twice wraps nothing twice"
    loss, grads = _loss_and_grads(model, ids)

    assert calls.count("_RmsNorm") == 2 * blocks + 1 and calls.count("_SiluMul") == blocks
    torch.testing.assert_close(loss, loss_ref, rtol=1e-6, atol=1e-7)
    assert grads.keys() == grads_ref.keys() and any("norm" in name for name in grads)
    for name, grad in grads_ref.items():
        assert grad.abs().max() > 0, name
        assert (grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name


def test_forward_is_transformers_to_the_bit(tiny_model_dir, ids):
    model = _model(tiny_model_dir)
    with torch.enable_grad():
        reference = model(input_ids=ids).logits
        fused_ops.install(model)
        fused = model(input_ids=ids).logits
    assert torch.equal(fused, reference)


def test_bf16_autocast_agrees(tiny_model_dir, ids, calls):
    model = _model(tiny_model_dir)
    loss_ref, grads_ref = _loss_and_grads(model, ids, autocast=True)
    fused_ops.install(model)
    loss, grads = _loss_and_grads(model, ids, autocast=True)
    assert calls
    torch.testing.assert_close(loss, loss_ref, rtol=1e-2, atol=1e-3)
    for name, grad in grads_ref.items():
        assert (grads[name] - grad).norm() <= 0.05 * grad.norm(), name


def test_lora_policy_gradients_equal(tiny_model_dir, ids, calls):
    from peft import LoraConfig, get_peft_model

    from grpokit.kernels import fused_lora

    policy = get_peft_model(_model(tiny_model_dir), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    nudge(policy, "lora_B")
    loss_ref, grads_ref = _loss_and_grads(policy, ids)
    fused_ops.install(policy)
    fused_lora.install(policy)
    loss, grads = _loss_and_grads(policy, ids)
    assert calls and grads.keys() == grads_ref.keys()
    torch.testing.assert_close(loss, loss_ref, rtol=1e-6, atol=1e-7)
    for name, grad in grads_ref.items():
        assert (grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name


def test_other_code_and_no_gradients_keep_their_own_forward(tiny_model_dir, ids, calls):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    class ScaledNorm(LlamaRMSNorm):  # a norm with other arithmetic (as Gemma's 1 + weight)
        def forward(self, hidden_states):
            return super().forward(hidden_states) * 2

    model = _model(tiny_model_dir)
    model.model.norm.__class__ = ScaledNorm
    model.model.layers[0].mlp.act_fn = torch.nn.GELU()
    blocks = model.config.num_hidden_layers
    assert fused_ops.install(model) == 3 * blocks  # the final norm is not Llama's code
    with torch.no_grad():
        model(input_ids=ids)
    assert not calls, "without gradients nothing is saved: the modules' own ops"
    model(input_ids=ids)
    assert calls.count("_RmsNorm") == 2 * blocks and calls.count("_SiluMul") == blocks - 1

    assert fused_ops.uninstall(model) == 3 * blocks
    calls.clear()
    model(input_ids=ids)
    assert not calls
