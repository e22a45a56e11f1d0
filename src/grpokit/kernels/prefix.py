"""The GRPO training pass with each group's prompt forwarded once: TRL's log-probabilities, loss and gradients.

TRL forwards every completion row with its whole prompt, so with G completions per prompt the prompt's tokens go
through the model G times. Here the distinct prompts run once with a KV cache, the cache is indexed out to the
rows (`index_select`, whose backward sums the rows' gradients: exactly the G copies' sum), and the completions
run on top of it with the unshared pass's positions, padding and masks (the same logits to float rounding).
On a CPU with grpokit's attention the prompts and completions go through the model as one packed sequence in
one call (`_packed`, `grpokit.kernels.attention.Packed`): each layer's matmuls and Python run once per
micro-batch. Log-probabilities are taken on completion tokens only, through `grpokit.kernels.head`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from grpokit.kernels.attention import NAME, Packed
from grpokit.kernels.head import completion_logprobs
from grpokit.kernels.modules import base_model, cache_of

log = logging.getLogger(__name__)

# Settings of a model's output layer that TRL's fused head applies and this pass does not.
_LOGIT_SETTINGS = (
    "final_logit_softcapping",
    "logit_scale",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_scaling",
)


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the first row of each distinct prompt [U], each row's prompt [B]), prompts numbered as they first
    appear. Identical prompts anywhere in the batch count as one: TRL shuffles a generation batch's rows
    before the training pass, so a group's completions seldom sit next to each other.

    >>> first, group = prompt_groups(torch.tensor([[0, 5], [4, 5], [0, 5], [4, 5]]), torch.tensor([[0, 1]] * 4))
    >>> first.tolist(), group.tolist()
    ([0, 1], [0, 1, 0, 1])
    """
    _, sorted_group = torch.unique(torch.cat([prompt_ids, prompt_mask], dim=1), dim=0, return_inverse=True)  # [B]
    rows = torch.arange(prompt_ids.size(0), device=prompt_ids.device)
    first = torch.full((int(sorted_group.max()) + 1,), prompt_ids.size(0), device=rows.device)
    first = first.scatter_reduce(0, sorted_group, rows, reduce="amin")  # [U], in torch.unique's order
    order = first.argsort()
    number = torch.empty_like(order)
    number[order] = torch.arange(len(order), device=rows.device)
    return first[order], number[sorted_group]


def refusal(model: Any) -> str | None:
    """Why this pass cannot run on `model` (a transformers model, or peft's wrapper of one), else None."""
    base = base_model(model)
    config = getattr(base, "config", None)
    if config is None or not hasattr(base, "get_output_embeddings") or base.get_output_embeddings() is None:
        return "is not a causal language model with an output layer"
    if config.get_text_config() is not config:
        return "is a multimodal model"
    checkpointing = getattr(base, "is_activation_checkpointing", None)  # transformers 5.x's name
    if checkpointing is None:
        checkpointing = getattr(base, "is_gradient_checkpointing", False)
    if checkpointing:
        return "uses gradient checkpointing, which drops the KV cache the completions attend to"
    settings = [name for name in _LOGIT_SETTINGS if getattr(config, name, None) not in (None, 1, 1.0)]
    if settings:
        return f"scales its logits ({', '.join(settings)})"
    if getattr(config, "output_router_logits", False):
        return "is a mixture of experts with a router loss"
    backbone = getattr(base, base.base_model_prefix, None)
    if backbone is None or "cache" not in inspect.signature(backbone.forward).parameters:
        return "has no backbone that takes a KV cache"
    return None


def logps_and_entropies(
    model: Any,
    input_ids: torch.Tensor,  # [B, P + C], prompts left-padded, completions right-padded
    attention_mask: torch.Tensor,  # [B, P + C]
    completion_length: int,  # C
    temperature: float = 1.0,
    compute_entropy: bool = False,
    batch_size: int | None = None,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    lm_head_fp32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities of the completion tokens [B, C] (0 at padding), and their entropies.

    Same contract as TRL's `_get_per_token_logps_and_entropies` for a text model; rows are taken
    `batch_size` at a time (a prompt whose group straddles two chunks is forwarded in each)."""
    batch_size = batch_size or input_ids.size(0)
    logps, entropies = [], []
    for start in range(0, input_ids.size(0), batch_size):
        rows = slice(start, start + batch_size)
        with autocast():
            lp, ent = _chunk(
                model,
                input_ids[rows],
                attention_mask[rows],
                completion_length,
                temperature,
                compute_entropy,
                lm_head_fp32,
            )
        logps.append(lp)
        entropies.append(ent)
    return torch.cat(logps), torch.cat(entropies) if compute_entropy else None


def _chunk(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_length: int,
    temperature: float,
    compute_entropy: bool,
    lm_head_fp32: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    base = base_model(model)
    backbone = getattr(base, base.base_model_prefix)  # peft's adapters live inside it
    prompt_ids, completion_ids = input_ids[:, :-completion_length], input_ids[:, -completion_length:]  # [B, P], [B, C]
    prompt_mask, completion_mask = attention_mask[:, :-completion_length], attention_mask[:, -completion_length:]
    first, group = prompt_groups(prompt_ids, prompt_mask)  # [U], [B]

    packed = None
    if _packs(base, input_ids):
        packed = _packed(backbone, prompt_ids[first], prompt_mask[first], group, completion_ids, attention_mask)
        if packed is None:  # the model's attention did not pass the layout on: its two-call pass from now on
            base._grpokit_unpacked = True
    if packed is not None:
        prompt_hidden, answer_hidden = packed
    else:
        prompts = backbone(input_ids=prompt_ids[first], attention_mask=prompt_mask[first], use_cache=True)
        cache = cache_of(prompts)
        cache.reorder_cache(group)  # [U, ...] -> [B, ...]; the backward sums each group's rows
        answers = backbone(input_ids=completion_ids, attention_mask=attention_mask, cache=cache, use_cache=True)
        prompt_hidden, answer_hidden = prompts.last_hidden_state, answers.last_hidden_state
    # The prompt's last position predicts the first completion token; each completion position the next.
    hidden = torch.cat([prompt_hidden[group, -1:], answer_hidden[:, :-1]], dim=1)  # [B, C, H]

    head = base.get_output_embeddings()
    mask = completion_mask.bool()  # [B, C]
    scored = hidden[mask]  # [N, H]: only real completion tokens meet the vocabulary
    context = nullcontext()
    if lm_head_fp32:
        scored, context = scored.float(), torch.autocast(scored.device.type, enabled=False)
    with context:
        logps, entropies = completion_logprobs(
            scored, head.weight, head.bias, completion_ids[mask], temperature, compute_entropy
        )
    # masked_scatter keeps the result attached to the graph even when no token is real
    entropy = entropies.new_zeros(mask.shape).masked_scatter(mask, entropies) if compute_entropy else None
    return logps.new_zeros(mask.shape).masked_scatter(mask, logps), entropy


def _packs(base: Any, input_ids: torch.Tensor) -> bool:
    """Whether `_packed` serves this batch: on a CPU (GPUs keep the two calls and sdpa's kernels), grpokit's
    attention, no sliding window the sequence could pass (the packed masks are plain causal), the model not
    found unable before."""
    config = base.config
    window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    width = input_ids.size(1)
    return (
        input_ids.device.type == "cpu"
        and getattr(config, "_attn_implementation", None) == NAME
        and not getattr(base, "_grpokit_unpacked", False)
        and (not window or width <= window)
    )


def _packed(
    backbone: Any,
    prompt_ids: torch.Tensor,  # [U, P] the distinct prompts, left-padded
    prompt_mask: torch.Tensor,  # [U, P]
    group: torch.Tensor,  # [B] each completion's prompt
    completion_ids: torch.Tensor,  # [B, C]
    attention_mask: torch.Tensor,  # [B, P + C]
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The prompts and completions as one sequence through the backbone in one call: (prompts' hidden states
    [U, P, H], completions' [B, C, H]). What the two calls (the prompts, then the completions on their
    cache) compute, with every layer's matmuls, norms and their Python run once per micro-batch instead of
    twice: the attention (`grpokit.kernels.attention.Packed`) gives each completion its prompt's keys and values and
    the masks the two calls had; positions are the prompt's, and the completion's after it. None where a layer's
    attention did not receive the layout (a model whose attention drops extra arguments)."""
    prompts, width = prompt_ids.shape
    rows, length = completion_ids.shape
    device = prompt_ids.device
    causal = torch.ones(width + length, width + length, dtype=torch.bool, device=device).tril()
    layout = Packed(
        prompts=prompts,
        prompt_width=width,
        group=group,
        completion_width=length,
        prompt_mask=(causal[:width, :width] & prompt_mask.bool()[:, None, :]).unsqueeze(1),  # [U, 1, P, P]
        completion_mask=(causal[width:] & attention_mask.bool()[:, None, :]).unsqueeze(1),  # [B, 1, C, P + C]
        used=[],
        biases={},
    )
    positions = torch.cat(
        [
            torch.arange(width, device=device).repeat(prompts),
            torch.arange(width, width + length, device=device).repeat(rows),
        ]
    )
    tokens = torch.cat([prompt_ids.reshape(-1), completion_ids.reshape(-1)])
    out = backbone(input_ids=tokens[None], position_ids=positions[None], use_cache=False, grpokit_packed=layout)
    if not layout.used or len(layout.used) != getattr(backbone.config, "num_hidden_layers", len(layout.used)):
        log.warning(
            "the training pass forwards prompts and completions in two calls: "
            "this model's attention did not pass grpokit's packed layout on"
        )
        return None
    hidden = out.last_hidden_state[0]  # [U P + B C, H]
    return hidden[: prompts * width].view(prompts, width, -1), hidden[prompts * width :].view(rows, length, -1)
