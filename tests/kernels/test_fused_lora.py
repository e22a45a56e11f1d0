"""peft's LoRA layers as one autograd function each (grpokit.kernels.fused_lora): peft's outputs and gradients, and
peft's own forward wherever the function would not be exact."""

import copy

import pytest
import torch

from grpokit.kernels import fused_lora
from tests.lm_grads import loss_and_grads as _loss_and_grads
from tests.lm_grads import nudge, token_ids


def _policy(model_dir, dropout: float = 0.0):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules="all-linear")
    model = get_peft_model(model, config)
    nudge(model)
    return model


@pytest.fixture
def ids():
    return token_ids()


@pytest.fixture
def calls(monkeypatch):
    seen = []
    apply = fused_lora._LoraLinear.apply

    def counted(*args):
        seen.append(args[1].size(0))  # the outputs: a group's sum
        return apply(*args)

    monkeypatch.setattr(fused_lora._LoraLinear, "apply", counted)
    return seen


def test_fp32_equals_peft(tiny_model_dir, ids, calls):
    policy = _policy(tiny_model_dir)
    layers = sum(1 for name, _ in policy.named_modules() if name.endswith("lora_A"))
    loss_ref, grads_ref = _loss_and_grads(policy, ids)
    assert fused_lora.install(policy) == layers > 0
    assert fused_lora.install(policy) == layers, "installing twice wraps nothing twice"
    loss, grads = _loss_and_grads(policy, ids)

    blocks = policy.config.num_hidden_layers
    assert len(calls) == 4 * blocks, "once per block for q/k/v, o, gate/up and down: the siblings together"
    config = policy.config
    width, kv = config.hidden_size, config.num_key_value_heads * config.hidden_size // config.num_attention_heads
    assert calls[:4] == [width + 2 * kv, width, 2 * config.intermediate_size, width]
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-7)
    assert grads.keys() == grads_ref.keys() and any("lora_A" in n for n in grads)
    for name, grad in grads_ref.items():
        assert grad.abs().max() > 0, name
        assert (grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name


def test_bf16_autocast_agrees_with_peft(tiny_model_dir, ids, calls):
    policy = _policy(tiny_model_dir)
    loss_ref, grads_ref = _loss_and_grads(policy, ids, autocast=True)
    fused_lora.install(policy)
    loss, grads = _loss_and_grads(policy, ids, autocast=True)
    assert calls
    torch.testing.assert_close(loss, loss_ref, rtol=1e-2, atol=1e-3)
    for name, grad in grads_ref.items():
        assert grads[name].dtype == grad.dtype == torch.float32, name  # A and B train in fp32
        assert (grads[name] - grad).norm() <= 0.05 * grad.norm(), name


def test_adapter_switched_off_runs_peft_forward(tiny_model_dir, ids, calls):
    policy = _policy(tiny_model_dir)
    with torch.no_grad(), policy.disable_adapter():
        off_ref = policy(input_ids=ids).logits
    fused_lora.install(policy)
    with torch.no_grad():
        with policy.disable_adapter():  # TRL's reference pass for a LoRA policy
            off = policy(input_ids=ids).logits
        assert not calls
        on = policy(input_ids=ids).logits
    assert calls
    torch.testing.assert_close(off, off_ref)
    assert not torch.allclose(on, off), "the adapter changes the output"


@pytest.mark.parametrize(
    ("dropout", "base_trains", "runs"), [(0.1, False, False), (0.0, True, False), (0.0, False, True)]
)
def test_peft_forward_where_the_function_is_not_exact(tiny_model_dir, ids, calls, dropout, base_trains, runs):
    policy = _policy(tiny_model_dir, dropout=dropout)
    for module in policy.modules():
        if hasattr(module, "base_layer"):
            module.base_layer.weight.requires_grad_(base_trains)  # its gradient is not computed here
    fused_lora.install(policy)
    policy.train()
    policy(input_ids=ids)
    assert bool(calls) is runs
    if dropout:  # dropout is identity in eval mode: the function applies
        policy.eval()
        policy(input_ids=ids)
        assert calls


def test_a_deep_copy_does_not_call_the_original(tiny_model_dir, ids):
    """The rollout copy is a deep copy with its instance forwards dropped (grpokit.rollout.sampler._plain_copy);
    this checks that dropping them is what keeps the copy's output its own."""
    policy = _policy(tiny_model_dir)
    fused_lora.install(policy)
    twin = copy.deepcopy(policy)
    for module in twin.modules():
        module.__dict__.pop("forward", None)
    with torch.no_grad():
        for name, param in twin.named_parameters():
            if "lora_B" in name:
                param.zero_()
        torch.testing.assert_close(twin(input_ids=ids).logits, twin.get_base_model()(input_ids=ids).logits)


def test_the_grpo_and_sft_trainers_route_their_lora_layers_through_it(tiny_model_dir, tmp_path, calls):
    from grpokit.models.load import load_model
    from grpokit.recipe.load import build_recipe
    from grpokit.stages import pipeline as train
    from grpokit.stages import sft as cold_start
    from tests.conftest import tiny_recipe

    recipe = build_recipe(tiny_recipe(tiny_model_dir, tmp_path, cold_start={"examples": 8, "batch_size": 8}))
    model, tokenizer = load_model(recipe.model.name)
    sft = cold_start.build_trainer(train.attach_lora(model, recipe), tokenizer, recipe, tmp_path / "sft")
    batch = sft._prepare_inputs(next(iter(sft.get_train_dataloader())))
    sft.compute_loss(sft.model, batch).backward()
    assert len(calls) == 4 * model.config.num_hidden_layers > 0  # q/k/v, o, gate/up, down

    from peft.tuners.lora import Linear

    from tests.kernels.test_prefix import _trainer

    grpo = _trainer(tiny_model_dir, tmp_path / "grpo", lora=True, beta=0.0)
    adapted = [m for m in grpo.model.modules() if type(m) is Linear]
    assert adapted and all("forward" in vars(m) for m in adapted)
    norms = [m for m in grpo.model.modules() if type(m).__name__.endswith("RMSNorm")]
    assert norms and all("forward" in vars(m) for m in norms), "grpokit.kernels.fused_ops installed too"


def test_uninstall_gives_peft_its_forward_back(tiny_model_dir, ids, calls):
    policy = _policy(tiny_model_dir)
    layers = fused_lora.install(policy)
    assert fused_lora.uninstall(policy) == layers
    policy(input_ids=ids)
    assert not calls


def test_siblings_share_one_weight_matrix_and_their_own_values(tiny_model_dir, ids):
    policy = _policy(tiny_model_dir)
    before = {name: value.clone() for name, value in policy.state_dict().items()}
    fused_lora.install(policy)
    with torch.no_grad():
        policy(input_ids=ids)
    attention = policy.get_base_model().model.layers[0].self_attn
    q, k, v = (getattr(attention, name).get_base_layer().weight for name in ("q_proj", "k_proj", "v_proj"))
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
    assert k.storage_offset() == q.numel() and v.storage_offset() == q.numel() + k.numel()
    after = policy.state_dict()
    assert after.keys() == before.keys()
    for name, value in before.items():
        torch.testing.assert_close(after[name], value, rtol=0, atol=0)


def test_a_sibling_called_on_another_input_computes_its_own(tiny_model_dir):
    policy = _policy(tiny_model_dir)
    attention = policy.get_base_model().model.layers[0].self_attn
    x, y = torch.randn(2, 5, policy.config.hidden_size).unbind(0)
    with torch.no_grad():
        expected = [attention.q_proj(x), attention.k_proj(y), attention.v_proj(x), attention.k_proj(x)]
        fused_lora.install(policy)
        got = [attention.q_proj(x), attention.k_proj(y), attention.v_proj(x), attention.k_proj(x)]
    for value, reference in zip(got, expected, strict=True):
        torch.testing.assert_close(value, reference, rtol=1e-5, atol=1e-6)


def test_siblings_with_their_own_scalings_or_one_not_plain(tiny_model_dir, ids, calls):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules="all-linear", rank_pattern={"k_proj": 2}, alpha_pattern={"up_proj": 32}
    )
    policy = get_peft_model(base, config)
    nudge(policy)
    loss_ref, grads_ref = _loss_and_grads(policy, ids)
    fused_lora.install(policy)
    loss, grads = _loss_and_grads(policy, ids)
    assert len(calls) == 4 * policy.config.num_hidden_layers
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-7)
    for name, grad in grads_ref.items():
        assert (grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name

    calls.clear()
    policy.get_base_model().model.layers[0].self_attn.v_proj.lora_dropout["default"] = torch.nn.Dropout(0.5)
    policy.train()
    policy(input_ids=ids)
    assert len(calls) == 4 * policy.config.num_hidden_layers + 1, "q and k on their own, v through peft"
