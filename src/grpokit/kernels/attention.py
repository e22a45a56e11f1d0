"""Attention for short CPU sequences: matmuls on the key/value heads and a softmax, `sdpa`'s to float rounding.

torch's CPU flash-attention kernel behind `sdpa` is built for long sequences. Here query heads that share a
key/value head are stacked as rows of one matmul (transformers' `repeat_kv` order), so nothing is repeated.
The training pass keeps scores and probabilities in float32, as the flash kernel does; a decoding step
without gradients rounds scores to the model's dtype before a float32 softmax, as `eager` does. Masked
entries get float32's minimum, not -inf, so a query with nothing to attend to (left padding) averages the
values instead of giving NaN. `Packed` (the packed training pass) builds each mask once per micro-batch.
Other devices, dropout, a model's extra attention arguments, float masks, causal calls without a mask and
scores over `SCORES_BUDGET` go to `sdpa` unchanged.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "grpokit"
SCORES_BUDGET = 1 << 24  # score entries (rows x heads x queries x keys) above which sdpa's tiling pays
# Arguments that change what attention computes beyond query, keys, values and mask.
_SDPA_ONLY = ("softcap", "position_bias", "s_aux", "sinks")


def grouped_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """query [B, H, Q, D], key/value [B, Hkv, L, D], mask as `sdpa_mask` builds it (bool [B, 1, Q, L], True
    where a query may attend, or None): the output [B, Q, H, D], as `sdpa_attention_forward`'s. A `Packed`
    layout in `grpokit_packed` (the training pass's prompts and completions in one sequence) replaces the mask."""
    packed = kwargs.pop("grpokit_packed", None)
    if packed is not None:
        return _packed_attention(module, query, key, value, packed, scaling, **kwargs), None
    bias = kwargs.pop("grpokit_bias", None)  # the mask as float32 0 / min, [B * Hkv, group * Q, L] (`_bias`)
    rows, heads, length, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    if (
        query.device.type != "cpu"
        or dropout
        or heads % kv_heads
        or any(kwargs.get(k) is not None for k in _SDPA_ONLY)
        or (attention_mask is None and length > 1)  # causal without a mask: sdpa's is_causal
        or (attention_mask is not None and attention_mask.dtype != torch.bool)
        or rows * heads * length * keys > SCORES_BUDGET
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    group = heads // kv_heads
    grouped = query.reshape(rows, kv_heads, group * length, dim)  # query head h reads key/value head h // group
    exact = torch.promote_types(query.dtype, torch.float32)  # float32, or the model's own wider type
    decoding = length == 1 and not torch.is_grad_enabled()
    scale = dim**-0.5 if scaling is None else scaling
    with torch.autocast(query.device.type, enabled=False):  # autocast would round the float32 scores again
        if decoding:  # scores rounded to the model's dtype, then a float32 softmax
            scores = torch.matmul(grouped.to(key.dtype), key.transpose(-1, -2)).to(exact) * scale
            values = value
        else:
            grouped, keys_t, values = grouped.to(exact), key.to(exact).transpose(-1, -2), value.to(exact)
            if bias is not None and bias.dtype == exact:  # product, scale and mask in one op
                scores = torch.baddbmm(bias, grouped.flatten(0, 1), keys_t.flatten(0, 1), alpha=scale)
                scores, attention_mask = scores.view(rows, kv_heads, group * length, keys), None
            else:
                scores = torch.matmul(grouped, keys_t) * scale  # [B, Hkv, group * Q, L]
        if attention_mask is not None:
            scores = scores.view(rows, kv_heads, group, length, keys)
            scores = scores.masked_fill(~attention_mask.unsqueeze(1), torch.finfo(exact).min)
            scores = scores.view(rows, kv_heads, group * length, keys)
        out = torch.matmul(scores.softmax(-1).to(values.dtype), values).to(value.dtype)  # [B, Hkv, group * Q, D]
    return out.view(rows, heads, length, dim).transpose(1, 2), None


class Packed(NamedTuple):
    """One micro-batch of the training pass as one sequence (`grpokit.kernels.prefix`): `prompts` distinct prompts of
    `prompt_width` positions each, then `len(group)` completions of `completion_width`; completion b
    continues prompt `group[b]`. The masks (bool, True where a query may attend) are those the two-call pass
    gave attention: each prompt causal over its own real tokens [U, 1, P, P]; each completion over its
    prompt's real tokens and causal over its own real ones [B, 1, C, P + C]."""

    prompts: int
    prompt_width: int
    group: torch.Tensor  # [B]
    completion_width: int
    prompt_mask: torch.Tensor  # [U, 1, P, P]
    completion_mask: torch.Tensor  # [B, 1, C, P + C]
    used: list  # one entry per attention call that read the layout (a check that every layer did)
    biases: dict  # the masks as `_bias` builds them, once per micro-batch for every layer

    def bias(self, which: str, kv_heads: int, group: int, dtype: torch.dtype) -> torch.Tensor:
        key = (which, kv_heads, group, dtype)
        if key not in self.biases:
            self.biases[key] = _bias(getattr(self, f"{which}_mask"), kv_heads, group, dtype)
        return self.biases[key]


def _bias(mask: torch.Tensor, kv_heads: int, group: int, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask [B, 1, Q, L] (True where a query may attend) as what `grouped_attention` adds to its
    scores: 0 or `dtype`'s minimum (as its `masked_fill` writes), [B * Hkv, group * Q, L] for each key/value
    head's stacked query heads."""
    rows, _, length, keys = mask.shape
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)
    return bias.unsqueeze(1).expand(rows, kv_heads, group, length, keys).reshape(rows * kv_heads, group * length, keys)


def _packed_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    packed: Packed,
    scaling: Any,
    **kwargs: Any,
) -> torch.Tensor:
    """query [1, H, T, D], key/value [1, Hkv, T, D] of a `Packed` sequence -> [1, T, H, D]: the prompts attend
    among themselves, each completion to its prompt's keys and values (the same tensors for all the group's
    completions, so their gradients add up there) and to its own."""
    packed.used.append(module)
    split = packed.prompts * packed.prompt_width

    def rows(x: torch.Tensor, start: int, count: int, width: int) -> torch.Tensor:  # [count, heads, width, D]
        return x[0, :, start : start + count * width].unflatten(1, (count, width)).transpose(0, 1)

    prompt_q = rows(query, 0, packed.prompts, packed.prompt_width)
    prompt_k = rows(key, 0, packed.prompts, packed.prompt_width)
    prompt_v = rows(value, 0, packed.prompts, packed.prompt_width)
    count = len(packed.group)
    answer_q = rows(query, split, count, packed.completion_width)
    answer_k = torch.cat(
        [prompt_k.index_select(0, packed.group), rows(key, split, count, packed.completion_width)], dim=2
    )
    answer_v = torch.cat(
        [prompt_v.index_select(0, packed.group), rows(value, split, count, packed.completion_width)], dim=2
    )
    heads, kv_heads = query.shape[1], key.shape[1]
    exact = torch.promote_types(query.dtype, torch.float32)
    group = heads // kv_heads if heads % kv_heads == 0 else 0

    def attend(which: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        bias = packed.bias(which, kv_heads, group, exact) if group else None
        mask = getattr(packed, f"{which}_mask")
        return grouped_attention(module, q, k, v, mask, scaling=scaling, grpokit_bias=bias, **kwargs)[0]

    prompts = attend("prompt", prompt_q, prompt_k, prompt_v)
    answers = attend("completion", answer_q, answer_k, answer_v)
    return torch.cat([prompts.flatten(0, 1), answers.flatten(0, 1)]).unsqueeze(0)  # [1, T, H, D]


AttentionInterface.register(NAME, grouped_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # the masks sdpa gets


def use_grouped_attention(model: Any) -> bool:
    """Switch `model` (a transformers model, not a peft wrapper) from `sdpa` to `grouped_attention`. False, and
    nothing changed, when its attention is anything else (eager, flash-attention, a model's own)."""
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current not in ("sdpa", NAME):
        return False
    if current == "sdpa":
        model.set_attn_implementation(NAME)
    return True
