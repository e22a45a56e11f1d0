"""Attention for the sampler's decoding steps: one new token per row, read against the KV cache.

transformers' `sdpa` path hands a decoding step (query length 1) to torch's CPU flash-attention
kernel, which is built for long queries: measured 250-290 us per layer for 32 rows x 9 heads x 80 keys
(SmolLM2-135M's shapes, bf16, AMD EPYC), 15% of a decoding step. The same attention as two batched
matmuls on the key/value heads (the query heads that share a key/value head stacked as rows, so
nothing is repeated) and a float32 softmax measured 150-175 us. Every other call (prefill, training,
a model's extra attention arguments) goes to `sdpa` unchanged.

`use_decode_attention` switches a model whose attention is `sdpa` to it; the sampler's rollout copy
uses it (`rollout._plain_copy`). Scores are rounded to the model's dtype before the softmax, as
transformers' `eager` attention rounds them.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "grpokit_decode"
# Arguments that change what attention computes beyond query, keys, values and mask: those calls go to sdpa
# (which supports them or says it does not).
_SDPA_ONLY = ("softcap", "position_bias", "s_aux", "sinks")


def decode_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """query [B, H, 1, D], key/value [B, Hkv, L, D], mask as `sdpa_mask` builds it (bool [B, 1, 1, L],
    True where a row may attend, or None): the output [B, 1, H, D], as `sdpa_attention_forward`'s."""
    rows, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    if (
        length != 1
        or dropout
        or torch.is_grad_enabled()
        or heads % kv_heads
        or any(kwargs.get(k) is not None for k in _SDPA_ONLY)
        or (attention_mask is not None and attention_mask.dtype != torch.bool)
    ):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    # Query head h reads key/value head h // (heads / kv_heads), transformers' `repeat_kv` order.
    grouped = query.reshape(rows, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float()  # [B, Hkv, group, L]
    scores.mul_(dim**-0.5 if scaling is None else scaling)
    if attention_mask is not None:
        scores.masked_fill_(~attention_mask, float("-inf"))
    out = torch.matmul(scores.softmax(-1).to(value.dtype), value)  # [B, Hkv, group, D]
    return out.reshape(rows, heads, 1, dim).transpose(1, 2), None


AttentionInterface.register(NAME, decode_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # the masks sdpa gets


def use_decode_attention(model: Any) -> bool:
    """Switch `model` (a transformers model, not a peft wrapper) from `sdpa` to `decode_attention`.
    False, and nothing changed, when its attention is anything else."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    model.set_attn_implementation(NAME)
    return True
