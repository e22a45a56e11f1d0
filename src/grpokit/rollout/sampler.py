"""Rollouts for GRPO with less waste than `generate`: shared prompts, early stop, shrinking batch.

`sample` runs each distinct prompt through the model once and copies its KV cache to the group's rows,
samples every row token by token, and drops a row as soon as it ends (EOS, or a stop text such as
`</answer>`); `generate` prefills every copy and computes finished rows until the longest one ends.
Sampling matches `generate` with `do_sample=True` (temperature, then top-k, then top-p, torch's global
RNG; `min_new_tokens` suppresses EOS and stop texts until that many tokens exist).

Every returned token was drawn by the model, and the trainer trains each one. A row that writes a stop
text gets one more draw, kept whatever it is, and ends there: the rewards read it, so stopping is taught by
what they pay (keeping it only when it is an end token, or appending an undrawn EOS, biases the gradient).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import torch

from grpokit.kernels import decode
from grpokit.kernels.modules import base_model, cache_of

log = logging.getLogger(__name__)


@dataclass
class SamplingSettings:
    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_new_tokens: int = 0
    stop_texts: tuple[str, ...] = ()


# GenerationConfig keys `sample` follows (or that do not change what is drawn); `unsupported_settings`
# names every other key a run sets, so that the trainer hands those runs to TRL's generation.
FOLLOWED_SETTINGS = frozenset(
    {
        "max_new_tokens",
        "min_new_tokens",
        "do_sample",  # False: greedy (top-k 1)
        "temperature",
        "top_k",
        "top_p",
        "min_p",  # only 0 or None
        "repetition_penalty",  # only 1.0 or None
        "eos_token_id",  # the trainer passes the config's ids as `eos_ids`
        "pad_token_id",
        "bos_token_id",
        "cache_implementation",
        "disable_compile",
        "transformers_version",
    }
)


def unsupported_settings(config: Any) -> list[str]:
    """The settings of a transformers GenerationConfig that `sample` would drop (empty: it follows them all).

    >>> from transformers import GenerationConfig
    >>> unsupported_settings(GenerationConfig(do_sample=True, temperature=0.7, top_k=50, no_repeat_ngram_size=3))
    ['no_repeat_ngram_size']
    """
    out = sorted(key for key in config.to_diff_dict() if key not in FOLLOWED_SETTINGS)
    if config.min_p:
        out.append(f"min_p={config.min_p}")
    if (config.repetition_penalty or 1.0) != 1.0:
        out.append(f"repetition_penalty={config.repetition_penalty}")
    return out


def group_runs(prompts: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """Consecutive identical prompts as (distinct prompts, run lengths).

    >>> group_runs([[1, 2], [1, 2], [3], [3], [1, 2]])
    ([[1, 2], [3], [1, 2]], [2, 2, 1])
    """
    distinct: list[list[int]] = []
    counts: list[int] = []
    for ids in prompts:
        if distinct and list(ids) == distinct[-1]:
            counts[-1] += 1
        else:
            distinct.append(list(ids))
            counts.append(1)
    return distinct, counts


def filter_logits(logits: torch.Tensor, settings: SamplingSettings, in_place: bool = False) -> torch.Tensor:
    """Temperature, top-k and top-p on [B, V] logits (masked entries become -inf); `in_place` writes them into
    `logits` itself (a buffer its owner will not read again) instead of a new tensor."""
    fill = torch.Tensor.masked_fill_ if in_place else torch.Tensor.masked_fill
    if settings.temperature != 1.0:
        logits = logits.div_(settings.temperature) if in_place else logits / settings.temperature
    if settings.top_k and settings.top_k < logits.size(-1):
        kth = torch.topk(logits, settings.top_k, dim=-1).values[:, -1:]
        logits = fill(logits, logits < kth, float("-inf"))
    if settings.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative - sorted_logits.softmax(-1) > settings.top_p  # keep the token that crosses top_p
        logits = fill(logits, drop.scatter(-1, order, drop), float("-inf"))
    return logits


DRAW_BLOCK = 256  # vocabulary entries per block of the two-level draw


def draw(logits: torch.Tensor) -> torch.Tensor:
    """One token per row from softmax(logits) [B, V]: `draw_with_logprob` without the log-probabilities."""
    return draw_with_logprob(logits)[0]


def draw_with_logprob(logits: torch.Tensor, overwrite: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from softmax(logits) [B, V], by inverting the CDF at uniform draws, in two levels,
    and the log-probability [B] (float32) each drawn token had under that softmax. `overwrite` computes in
    `logits`' own storage (a buffer its owner will not read again) rather than in a new [B, V] tensor.

    The vocabulary is cut into blocks of `DRAW_BLOCK`: a block is drawn from the block sums' CDF, then a
    token from that block's own CDF with a second, independent uniform: P(block) x P(token | block), the same
    distribution as `torch.multinomial`, without its variate per vocabulary entry or one float64 cumulative
    sum over the whole vocabulary. `right=True` in the searches skips entries of probability 0, so masked
    tokens never come. The softmax is never normalised: a token's log-probability is `log(weight) -
    log(total)` with weights `exp(logit - max)`; block sums are float32 (each of 256 weights at most 1), only
    their running total float64.
    """
    peak = logits.amax(-1, keepdim=True)
    weights = logits.sub_(peak).exp_() if overwrite else (logits - peak).exp_()  # [B, V], masked entries 0
    rows, vocab = weights.shape
    if vocab % DRAW_BLOCK:
        weights = torch.nn.functional.pad(weights, (0, -vocab % DRAW_BLOCK))
    padded = weights.view(rows, -1, DRAW_BLOCK)
    block_cdf = padded.sum(-1).double().cumsum(-1)  # [B, blocks]
    total = block_cdf[:, -1:]
    u = torch.rand(rows, 2, dtype=torch.float64, device=logits.device)
    last = block_cdf.size(1) - 1
    block = torch.searchsorted(block_cdf, u[:, :1] * total, right=True).clamp_(max=last)  # [B, 1]
    within = padded.gather(1, block.unsqueeze(-1).expand(-1, 1, DRAW_BLOCK)).squeeze(1).double().cumsum(-1)
    token = torch.searchsorted(within, u[:, 1:] * within[:, -1:], right=True).clamp_(max=DRAW_BLOCK - 1)
    tokens = (block * DRAW_BLOCK + token).squeeze(1).clamp_(max=vocab - 1)
    logp = weights.gather(1, tokens.unsqueeze(1)).double().log() - total.log()
    return tokens, logp.squeeze(1).float()


@torch.no_grad()
def sample(
    model: Any,
    prompts: Sequence[Sequence[int]],
    settings: SamplingSettings,
    *,
    eos_ids: Sequence[int],
    pad_id: int,
    tokenizer: Any = None,
    logprobs: bool = False,
    stats: dict[str, float] | None = None,
) -> list[list[int]] | tuple[list[list[int]], list[list[float]]]:
    """Sampled completion token ids, one list per prompt row: each drawn by the model, EOS included when
    the row drew it. See `finished` for whether a row ended or was cut at `max_new_tokens`.

    `logprobs=True` also returns, beside each token, its log-probability under the distribution it was
    drawn from (after temperature, top-k and top-p; 0.0 for greedy tokens): the sampler's own, for a
    training pass that compares the policy against the model that really sampled (a rollout copy).

    `stats`: a dict that `entropy_sum` and `tokens` are added to: the entropy (nats) of softmax(logits /
    temperature) at every returned token's position, before top-k, top-p and `min_new_tokens` (the
    entropy TRL's training pass computes), summed, and the tokens counted, so a trainer can log the
    entropy of every row it drew, not only of the rows it trains."""
    device = next(model.parameters()).device
    distinct, counts = group_runs(prompts)
    cache_kwarg = _cache_argument(model)
    cache, logits, mask = _prefill(model, distinct, pad_id, device, cache_kwarg)  # [U, V], [U, L]

    expand = torch.repeat_interleave(torch.arange(len(distinct), device=device), torch.tensor(counts, device=device))
    cache.reorder_cache(expand)  # each prompt's KV cache copied to its group's rows
    logits, mask = logits[expand], mask[expand]
    rows = len(expand)
    steps = _Steps(model, cache, mask, settings.max_new_tokens, cache_kwarg)
    del cache  # moved into the decoder's buffers, or held by `steps`
    active = list(range(rows))  # original row index of each batch row
    produced: list[list[int]] = [[] for _ in range(rows)]
    # Each step's log-probabilities stay on the device with the rows that drew them (`active` is rebuilt,
    # never changed in place): one copy to the host at the end, not a synchronisation per step.
    step_logps: list[tuple[list[int], torch.Tensor]] = []
    eos = torch.tensor(list(eos_ids), device=device)
    stop_check = bool(settings.stop_texts) and tokenizer is not None
    tail = max((len(t) for t in settings.stop_texts), default=0)

    # Host-side bookkeeping in plain lists: one device-to-host copy of the step's tokens (and end flags),
    # not one read per row, which on a GPU is a synchronisation each.
    stopping = [False] * rows  # wrote a stop text: one last draw
    entropy_sum = torch.zeros((), dtype=torch.float64, device=device)
    for step in range(settings.max_new_tokens):
        if stats is not None:  # every active row draws one token this step, and every drawn token is returned
            scaled = logits / settings.temperature  # [B, V]
            entropy_sum += (scaled.logsumexp(-1) - (scaled.softmax(-1) * scaled).sum(-1)).sum().double()
        if step < settings.min_new_tokens:
            logits[:, eos] = float("-inf")
        if settings.top_k == 1:  # greedy: each token had probability 1
            tokens = logits.argmax(-1)
            token_logps = torch.zeros(len(active), device=device) if logprobs else None
        else:
            # The step's logits are the sampler's to spend: the decoder overwrites its buffer next step.
            tokens, token_logps = draw_with_logprob(filter_logits(logits, settings, in_place=True), overwrite=True)
        if logprobs:
            step_logps.append((active, token_logps))
        drawn, done = torch.stack([tokens, torch.isin(tokens, eos).long()]).tolist()
        for b, (row, token) in enumerate(zip(active, drawn, strict=True)):
            produced[row].append(token)
            if stopping[row]:  # the draw after a stop text: kept, whatever it is, and the row's last
                done[b] = True
                continue
            if stop_check and not stopping[row] and not done[b] and step + 1 >= settings.min_new_tokens:
                text = tokenizer.decode(produced[row][-(tail + 2) :], skip_special_tokens=False)
                stopping[row] = any(stop in text for stop in settings.stop_texts)
        if all(done) or step + 1 == settings.max_new_tokens:
            break
        kept = [b for b, ended in enumerate(done) if not ended]
        if len(kept) < len(active):  # finished rows leave the batch
            keep = torch.tensor(kept, device=device)
            steps.keep(keep)
            active, tokens = [active[b] for b in kept], tokens[keep]
        logits = steps.step(tokens)
    if stats is not None:
        stats["entropy_sum"] = stats.get("entropy_sum", 0.0) + entropy_sum.item()
        stats["tokens"] = stats.get("tokens", 0) + sum(len(row) for row in produced)
    if not logprobs:
        return produced
    drawn_logps: list[list[float]] = [[] for _ in range(rows)]
    flat = torch.cat([logps for _, logps in step_logps]).tolist() if step_logps else []
    at = 0
    for active_rows, _ in step_logps:  # in the order drawn: each row's log-probabilities in its tokens' order
        for row in active_rows:
            drawn_logps[row].append(flat[at])
            at += 1
    return produced, drawn_logps


class _Steps:
    """The decoding steps after the prefill: `grpokit.kernels.decode.Decoder` where it covers the model (its own
    cache, fused projections), else transformers' forward with transformers' cache."""

    def __init__(self, model: Any, cache: Any, mask: torch.Tensor, max_new: int, cache_kwarg: str) -> None:
        self.model, self.cache, self.mask, self.cache_kwarg = model, cache, mask, cache_kwarg
        self.positions = mask.sum(-1)  # [B] the next token's position: the real tokens so far
        why = decode.refusal(model)  # looked up at each call: tests replace it
        if why and why not in _REFUSALS_LOGGED:
            _REFUSALS_LOGGED.add(why)
            log.info("decoding steps on transformers' forward, not grpokit.kernels.decode: %s", why)
        self.decoder = None if why else decode.Decoder(model)
        if self.decoder:
            self.decoder.start(cache, mask, max_new)
            self.cache = None  # moved into the decoder's buffers

    def keep(self, rows: torch.Tensor) -> None:
        self.positions = self.positions[rows]
        if self.decoder:
            self.decoder.keep(rows)
        else:
            self.cache.reorder_cache(rows)
            self.mask = self.mask[rows]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B] -> the next logits [B, V] (float32)."""
        positions, self.positions = self.positions, self.positions + 1
        if self.decoder:
            return self.decoder.step(tokens, positions)
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        out = self.model(
            input_ids=tokens.unsqueeze(1),
            attention_mask=self.mask,
            position_ids=positions.unsqueeze(1),
            use_cache=True,
            **{self.cache_kwarg: self.cache},
        )
        self.cache = cache_of(out)
        return out.logits[:, -1, :].float()


SHARED_PREFIX_MIN = 8  # tokens: a shorter common prefix is prefilled with each prompt


def common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix every prompt starts with.

    >>> common_prefix([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]])
    2
    """
    first, n = prompts[0], min(len(p) for p in prompts)
    return next((i for i in range(n) if any(p[i] != first[i] for p in prompts[1:])), n)


def _prefill(model: Any, distinct: list[list[int]], pad_id: int, device: Any, cache_kwarg: str) -> tuple:
    """The KV cache, last-position logits [U, V] and attention mask [U, L] of the distinct prompts.

    Prompts rendered from one chat template share their system prompt: a common prefix (say 45 of 60
    tokens for every held-out problem) is forwarded once and its cache copied to every row; each row then
    forwards only its own suffix, left-padded after the prefix (the mask hides the padding, and positions
    follow the real tokens). Every row keeps at least its last token, whose logits start the decoding.
    """
    shared = min(common_prefix(distinct), min(len(p) for p in distinct) - 1) if len(distinct) > 1 else 0
    shared = shared if shared >= SHARED_PREFIX_MIN else 0
    past = {}
    if shared:
        last = _last_position(shared, device)
        out = model(input_ids=torch.tensor([distinct[0][:shared]], device=device), use_cache=True, logits_to_keep=last)
        cache = cache_of(out)
        cache.reorder_cache(torch.zeros(len(distinct), dtype=torch.long, device=device))
        past = {cache_kwarg: cache}
    width = max(len(p) for p in distinct) - shared
    ids = torch.full((len(distinct), width), pad_id, dtype=torch.long, device=device)
    own = torch.zeros_like(ids)
    for row, p in enumerate(distinct):  # left padding, as generation expects
        ids[row, width - (len(p) - shared) :] = torch.tensor(p[shared:], device=device)
        own[row, width - (len(p) - shared) :] = 1
    mask = torch.cat([torch.ones(len(distinct), shared, dtype=own.dtype, device=device), own], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, shared:]
    last = _last_position(width, device)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=last, **past)
    return cache_of(out), out.logits[:, -1, :].float(), mask


def _last_position(length: int, device: Any) -> torch.Tensor:
    """`logits_to_keep` for the last of `length` positions, as an index tensor rather than the int 1.

    With an int, transformers slices `hidden[:, -1:, :]`, a view whose rows are not contiguous; for a weight
    that needs no gradient `torch.matmul` then cannot fold the batch into one matmul and broadcasts the LM
    head to every row instead, copying it. Indexing with a tensor gathers the rows into a contiguous tensor."""
    return torch.tensor([length - 1], device=device)


def finished(row: Sequence[int], eos_ids: Sequence[int], tokenizer: Any = None, stop_texts: Sequence[str] = ()) -> bool:
    """Whether a sampled row ended (its EOS, or a stop text at its end) rather than ran out of tokens."""
    if row and row[-1] in eos_ids:
        return True
    if not (row and stop_texts and tokenizer is not None):
        return False
    tail = tokenizer.decode(row[-(max(len(t) for t in stop_texts) + 2) :], skip_special_tokens=False)
    return any(stop in tail for stop in stop_texts)


def _cache_argument(model: Any) -> str:
    """transformers 5.24 renamed `past_key_values` to `cache` (the old name warns, and goes in 5.40)."""
    forward = base_model(model).forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


class RolloutCopy:
    """A plain copy of the policy to sample from: LoRA merged in, in the sampling dtype, eval mode.

    Sampling on a LoRA model pays at every decoded token for each adapted layer's own small matmuls,
    dropout and add (seven per block with all-linear targets), and under bf16 autocast for casting
    every fp32 weight again. The copy holds `W + B A` already cast, the way vLLM holds weights it was
    sent; `refresh` rewrites it from the policy once per optimizer step.
    """

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self.model: Any = None
        self.version: Any = None
        self.released: dict[str, torch.Size] = {}  # parameter shapes while the weights are freed

    def get(self, policy: Any, version: Any) -> Any:
        """The copy, refreshed when `version` (the optimizer step) differs from the last refresh."""
        refusal = copy_refusal(policy)
        if refusal:
            raise ValueError(f"a merged rollout copy would not be the policy: {refusal}; sample on the policy")
        if self.model is None:
            self.model = _plain_copy(policy, self.dtype)
        if self.released:
            for name, param in self.model.named_parameters():
                param.data = torch.empty(self.released[name], dtype=self.dtype, device=param.device)
            self.released, self.version = {}, None
        if version != self.version:
            refresh(self.model, policy)
            self.version = version
        return self.model

    def release(self) -> None:
        """Free the copy's weights until the next `get`, which rewrites them: the training pass between two
        rollouts gets their memory. `refresh` rewrites every weight each step anyway; what this adds is fresh
        pages for them."""
        if self.model is None or self.released:
            return
        for name, param in self.model.named_parameters():
            self.released[name] = param.shape
            param.data = torch.empty(0, dtype=self.dtype, device=param.device)


def wants_copy(policy: Any) -> bool:
    """Whether to sample from a `RolloutCopy`: for a LoRA policy the copy can hold exactly (merged, no
    adapter matmuls per decoded token), and for a full fine-tune on a CUDA GPU (`grpokit.kernels.decode`
    captures its decoding step in a CUDA graph, which needs a plain model in the sampling dtype outside
    autocast). A full fine-tune elsewhere samples on the policy under autocast, where a copy gains nothing
    and costs a rewrite of every weight per step. An adapter the copy cannot hold exactly
    (`copy_refusal`) samples on the policy, said once in the log."""
    if not hasattr(policy, "get_base_model"):
        return next(policy.parameters()).device.type == "cuda"
    refusal = copy_refusal(policy)
    if refusal and refusal not in _REFUSALS_LOGGED:
        _REFUSALS_LOGGED.add(refusal)
        log.info("sampling on the policy itself, not a merged copy: %s", refusal)
    return refusal is None


_REFUSALS_LOGGED: set[str] = set()


def copy_refusal(policy: Any) -> str | None:
    """Why `refresh` cannot write this peft policy's weights exactly (None: it can).

    It writes `W + sum(B A * scaling)` into each adapted layer and copies every other parameter, biases
    included (so LoRA with `bias="all"` or `"lora_only"` is exact: those biases train in place). Not exact:
    DoRA and the other LoRA variants (their output is not that sum), `lora_bias` (a bias on B, which the
    copy's bias would miss), and adapters of other kinds (IA3, LoHa, prompt tuning, ...).
    """
    for name, config in getattr(policy, "peft_config", {}).items():
        kind = getattr(config.peft_type, "value", config.peft_type)
        if kind != "LORA":
            return f"adapter {name!r} is {kind}, not LoRA"
        if getattr(config, "use_dora", False):
            return f"adapter {name!r} uses DoRA (weights rescaled per column by a trained magnitude)"
        if getattr(config, "lora_bias", False):
            return f"adapter {name!r} has lora_bias (a bias on B)"
    variants = {type(v).__name__ for m in policy.modules() for v in (getattr(m, "lora_variant", None) or {}).values()}
    if variants:
        return f"its LoRA layers are variants ({', '.join(sorted(variants))}), not plain W + B A"
    return None


def share_frozen(copy: Any, policy: Any) -> int:
    """Point the copy's parameters that are the policy's own, unchanged, at the policy's memory instead of
    holding them twice; returns how many numbers it newly shares. `refresh` calls it first. Shared: a
    parameter of a module without adapters, frozen in the policy, of the copy's dtype and shape (with LoRA
    on the linear layers an fp32 copy shares the embedding, LM head and norms; a bf16 copy of an fp32 policy
    shares nothing). Exact: the same numbers, which `refresh` then leaves be; frozen weights do not change.
    Weights that train are never shared: one shared while frozen and trained since gets its own storage
    back. Why: evaluation's fp32 copy decodes at a run's peak of memory.
    """
    base = base_model(policy)
    shared = 0
    for name, target in copy.named_modules():
        own = dict(target.named_parameters(recurse=False))
        if not own:
            continue
        try:
            source = base.get_submodule(name)
        except AttributeError:
            continue
        if hasattr(source, "get_delta_weight") or hasattr(source, "modules_to_save"):
            continue  # merged or trained copies: the copy's own numbers
        for pname, param in own.items():
            value = getattr(source, pname, None)
            if not isinstance(value, torch.Tensor):
                continue
            same = param.data_ptr() == value.data_ptr()
            if value.requires_grad:
                if same:  # trains now: its own numbers again (`refresh` writes them)
                    param.data = value.detach().clone()
            elif not same and (value.dtype, value.shape, value.device) == (param.dtype, param.shape, param.device):
                param.data = value.detach()
                shared += value.numel()
    return shared


def _plain_copy(policy: Any, dtype: torch.dtype) -> Any:
    # slow import: transformers (through grpokit.kernels.attention), only when a rollout copy is made
    from grpokit.kernels.attention import use_grouped_attention

    model = deepcopy(policy)
    for module in model.modules():
        # accelerate's mixed precision replaces a prepared model's `forward` with an autocast wrapper
        # whose closure still calls the ORIGINAL model (deepcopy keeps function closures): the copy
        # would silently run the fp32 policy under autocast. Back to the class's own forward.
        module.__dict__.pop("forward", None)
        module.__dict__.pop("_original_forward", None)
    if hasattr(model, "merge_and_unload"):  # peft: the copy's LoRA layers become plain, merged layers
        model = model.merge_and_unload()
    use_grouped_attention(model)  # short CPU sequences: grpokit.kernels.attention
    return model.to(dtype).eval().requires_grad_(False)


@torch.no_grad()
def refresh(copy: Any, policy: Any) -> None:
    """Write the policy's effective weights (base + active LoRA deltas) into `copy`, module by module; the
    policy's unchanged ones are shared, not written (`share_frozen`)."""
    share_frozen(copy, policy)
    base = base_model(policy)
    for name, target in copy.named_modules():
        own = dict(target.named_parameters(recurse=False))
        if not own:
            continue
        source = base.get_submodule(name)
        if hasattr(source, "modules_to_save"):  # peft's fully trained copies of chosen modules
            source = source.modules_to_save[source.active_adapters[0]]
        if hasattr(source, "get_delta_weight"):  # a LoRA layer: its base layer plus the adapters' deltas
            layer, deltas = source.get_base_layer(), _deltas(source)
            for pname, param in own.items():
                value = getattr(layer, pname)
                if pname != "weight" or deltas is None:
                    param.copy_(value)
                elif param.dtype == torch.bfloat16:  # deltas: a fresh tensor (a copy only if not fp32 already)
                    param.copy_(round_dithered(deltas.float().contiguous().add_(value), in_place=True))
                else:
                    param.copy_(value + deltas)
        else:
            for pname, param in own.items():
                value = getattr(source, pname)
                if param.data_ptr() != value.data_ptr():  # shared ones already hold the policy's numbers
                    param.copy_(value)


_DITHER: dict[tuple, torch.Tensor] = {}  # per weight shape and device: a fixed threshold for each position


def round_dithered(x: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """fp32 `x` rounded to bf16 up or down, each position against a fixed pseudo-random threshold: a value
    a quarter of the way to the next bf16 number rounds up at a quarter of the positions, so the rounded
    weights carry `x` on average where round-to-nearest drops every part under half a step.

    Why: a merged bf16 copy of `W + BA` (`refresh`) is what the rollout samples from, and the training pass
    computes `bf16(W) x + B A x` with the adapters apart. Rounded to nearest, an adapter's change under half
    a bf16 step of its weight vanishes from the copy, in every weight at once and in the direction of the
    update; dithered, it stays on average. The thresholds are drawn once per shape, so `refresh` costs two
    integer operations per weight more and stays deterministic.

    `in_place`: `x` (contiguous) holds the rounded numbers afterwards, still in fp32, and is returned
    (`refresh` copies them into the bf16 weight, which is then exact); no tensor of x's size is made.

    >>> round_dithered(torch.tensor([1.0, -2.5])).tolist()  # bf16 numbers pass unchanged
    [1.0, -2.5]
    """
    key = (*x.shape, str(x.device))
    threshold = _DITHER.get(key)
    if threshold is None:
        gen = torch.Generator().manual_seed(len(_DITHER))
        threshold = torch.randint(0, 1 << 16, x.shape, generator=gen, dtype=torch.int32).to(x.device)
        _DITHER[key] = threshold
    if in_place:
        x.view(torch.int32).add_(threshold).bitwise_and_(-(1 << 16))
        return x
    bits = x.contiguous().view(torch.int32) + threshold  # sign and magnitude: adding to the low bits rounds |x| up
    return bits.bitwise_and_(-(1 << 16)).view(torch.float32).to(torch.bfloat16)  # low 16 bits cut: exact


def _deltas(layer: Any) -> torch.Tensor | None:
    if getattr(layer, "merged", False) or getattr(layer, "disable_adapters", False):
        return None  # merged deltas are already in the base weight; disabled ones do not apply
    owned = {**getattr(layer, "lora_A", {}), **getattr(layer, "lora_embedding_A", {})}
    active = [a for a in layer.active_adapters if a in owned]
    if not active:
        return None
    deltas = layer.get_delta_weight(active[0])  # a new tensor (B A scaled), added to in place
    for adapter in active[1:]:
        deltas = deltas + layer.get_delta_weight(adapter)
    return deltas
