import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from grpokit.kernels.attention import NAME, grouped_attention, use_grouped_attention
from grpokit.rollout.sampler import SamplingSettings, sample


class _Module(torch.nn.Module):  # what the attention functions read off a model's attention layer
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups, self.is_causal = groups, True


def _inputs(rows=5, heads=6, kv_heads=2, length=9, query=1, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, heads, query, 16, generator=g).to(dtype)
    k, v = (torch.randn(rows, kv_heads, length, 16, generator=g).to(dtype) for _ in range(2))
    mask = torch.ones(rows, 1, query, length, dtype=torch.bool)
    mask[1, ..., :3] = False  # left padding in two rows
    mask[3, ..., :6] = False
    return _Module(heads // kv_heads), q, k, v, mask


@pytest.mark.parametrize("kv_heads", [1, 2, 6])
def test_a_decoding_step_equals_sdpa(kv_heads):
    """Grouped query heads read their own key/value head, padding is masked, the output layout is sdpa's."""
    module, q, k, v, mask = _inputs(kv_heads=kv_heads)
    with torch.no_grad():
        expected, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.3)
        got, _ = grouped_attention(module, q, k, v, mask, scaling=0.3)
        unmasked, _ = grouped_attention(module, q, k, v, None, scaling=0.3)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(unmasked, sdpa_attention_forward(module, q, k, v, None, scaling=0.3)[0])
    assert got.shape == (5, 1, 6, 16)
    assert not torch.allclose(unmasked[1], got[1]), "the mask matters in a padded row"


def test_bf16_decoding_is_as_close_to_float32_as_sdpa():
    module, q, k, v, mask = _inputs(length=80, seed=1)
    with torch.no_grad():
        exact, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)
        half = [t.bfloat16() for t in (q, k, v)]
        sdpa_error = (sdpa_attention_forward(module, *half, mask, scaling=0.25)[0].float() - exact).abs().max()
        error = (grouped_attention(module, *half, mask, scaling=0.25)[0].float() - exact).abs().max()
    assert error <= 2 * sdpa_error + 1e-3


def test_a_training_call_equals_sdpa_with_its_gradients():
    """Several queries per row (prefill, the training pass), padding rows, float32 scores: sdpa's output and
    gradients; a query with nothing to attend to (a left-padding position) stays finite."""
    module, q, k, v, mask = _inputs(query=4, length=9, dtype=torch.float64)
    mask[:, :, :, 5:] &= torch.tril(torch.ones(4, 4, dtype=torch.bool))  # causal over the new positions
    mask[2, :, 0] = False  # this query attends to nothing (as does row 3's first: padding)
    empty = ~mask.any(-1).squeeze(1)  # [B, Q]
    results = []
    assert empty.sum() == 2
    for attend in (sdpa_attention_forward, grouped_attention):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out, _ = attend(module, *leaves, mask, scaling=0.3)
        assert torch.isfinite(out).all()
        out = out.masked_fill(empty[..., None, None], 0)  # sdpa's value for an empty query is its own
        out.square().sum().backward()
        results.append([out.detach(), *(t.grad for t in leaves)])
    for got, expected in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)


def test_the_mask_as_an_added_bias_gives_the_masked_scores_output_and_gradients():
    """The packed training pass hands attention its mask once per micro-batch as a float bias (`_bias`): the
    product, scale and mask in one `baddbmm` give what the bool mask gives. A query with nothing to attend to
    (left padding) gets the same output; its output is left out of the loss, as in the pass, where a padding
    position feeds only keys every real query masks (the bias leaves its scores a gradient, the mask not)."""
    from grpokit.kernels.attention import _bias

    module, q, k, v, mask = _inputs(query=4, length=9)
    mask[:, :, :, 5:] &= torch.tril(torch.ones(4, 4, dtype=torch.bool))
    mask[2, :, 0] = False  # a query with nothing to attend to (as is row 3's first)
    empty = ~mask.any(-1).squeeze(1)  # [B, Q]
    results = []
    for bias in (None, _bias(mask, kv_heads=2, group=3, dtype=torch.float32)):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out, _ = grouped_attention(module, *leaves, mask, scaling=0.3, grpokit_bias=bias)
        results.append([out[empty]])
        out.masked_fill(empty[..., None, None], 0).square().sum().backward()
        results[-1] += [out.detach(), *(t.grad for t in leaves)]
    for got, expected in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert empty.sum() == 2 and torch.isfinite(results[1][0]).all()
    assert _bias(mask, 2, 3, torch.float32).shape == (5 * 2, 3 * 4, 9)


def test_other_calls_go_to_sdpa(monkeypatch):
    """Causal calls without a mask, extra arguments, float masks and oversized scores are sdpa's."""
    import grpokit.kernels.attention as attention

    calls = []
    monkeypatch.setattr(attention, "sdpa_attention_forward", lambda *a, **kw: calls.append(a[1].shape) or (None, None))
    module, q, k, v, mask = _inputs(query=4)
    with torch.no_grad():
        grouped_attention(module, q, k, v, None)
        grouped_attention(module, q, k, v, mask, softcap=30.0)
        grouped_attention(module, q, k, v, mask.float())
        monkeypatch.setattr(attention, "SCORES_BUDGET", q.shape[0] * q.shape[1] * 4 * 9 - 1)
        grouped_attention(module, q, k, v, mask)
        assert len(calls) == 4
        monkeypatch.setattr(attention, "SCORES_BUDGET", 1 << 24)
        grouped_attention(module, q, k, v, mask)
    assert len(calls) == 4


def test_the_training_pass_gives_sdpas_loss_and_gradients(tiny_model_dir, tmp_path):
    """GrpoTrainer switches the policy on a CPU; its shared-prefix pass then equals the pass on sdpa."""
    from grpokit.rollout.sampler import base_model
    from tests.kernels.test_prefix import _batch, _loss_and_grads, _trainer

    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.2)
    model = base_model(trainer.model)
    assert model.config._attn_implementation == NAME
    loss, grads, values = _loss_and_grads(trainer, _batch(), shared=True)
    model.set_attn_implementation("sdpa")
    loss_ref, grads_ref, values_ref = _loss_and_grads(trainer, _batch(), shared=True)
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-7)
    for key, value in values_ref.items():
        torch.testing.assert_close(values[key], value, rtol=1e-5, atol=1e-6, msg=key)
    for name, grad in grads_ref.items():
        assert (grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name


def test_a_copy_samples_the_same_tokens_and_the_policy_keeps_sdpa(tiny_model_dir):
    from grpokit.models.load import load_model
    from grpokit.rollout.sampler import RolloutCopy

    model, tokenizer = load_model(str(tiny_model_dir))
    model.eval()
    copy = RolloutCopy(torch.float32).get(model, version=0)
    assert copy.config._attn_implementation == NAME and model.config._attn_implementation == "sdpa"
    prompts = [[5, 9, 13, 2], [5, 9, 13, 2], [7, 3], [11, 4, 6, 8, 10, 12]]
    settings = SamplingSettings(max_new_tokens=10, top_k=1)
    expected = sample(model, prompts, settings, eos_ids=[tokenizer.eos_token_id], pad_id=0)
    assert sample(copy, prompts, settings, eos_ids=[tokenizer.eos_token_id], pad_id=0) == expected


def test_only_sdpa_models_switch(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    eager = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="eager")
    assert not use_grouped_attention(eager) and eager.config._attn_implementation == "eager"
    sdpa = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    assert use_grouped_attention(sdpa) and sdpa.config._attn_implementation == NAME
