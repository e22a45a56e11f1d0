import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from grpokit.attention import NAME, decode_attention, use_decode_attention
from grpokit.rollout import SamplingSettings, sample


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
        got, _ = decode_attention(module, q, k, v, mask, scaling=0.3)
        unmasked, _ = decode_attention(module, q, k, v, None, scaling=0.3)
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
        error = (decode_attention(module, *half, mask, scaling=0.25)[0].float() - exact).abs().max()
    assert error <= 2 * sdpa_error + 1e-3


def test_other_calls_go_to_sdpa(monkeypatch):
    """Prefill (several query positions), training (gradients) and extra arguments are sdpa's."""
    import grpokit.attention as attention

    calls = []
    monkeypatch.setattr(attention, "sdpa_attention_forward", lambda *a, **kw: calls.append(a[1].shape) or (None, None))
    module, q, k, v, mask = _inputs(query=4)
    decode_attention(module, q, k, v, mask)
    module, q, k, v, mask = _inputs()
    decode_attention(module, q, k, v, mask, softcap=30.0)
    with torch.enable_grad():
        decode_attention(module, q.requires_grad_(), k, v, mask)
    with torch.no_grad():
        decode_attention(module, q, k, v, mask)
    assert len(calls) == 3


def test_a_copy_samples_the_same_tokens_and_the_policy_keeps_sdpa(tiny_model_dir):
    from grpokit.models import load_model
    from grpokit.rollout import RolloutCopy

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
    assert not use_decode_attention(eager) and eager.config._attn_implementation == "eager"
    sdpa = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    assert use_decode_attention(sdpa) and sdpa.config._attn_implementation == NAME
