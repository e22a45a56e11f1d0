"""Decoding steps for Llama-family models: transformers' arithmetic without its per-module machinery.

`Decoder` runs transformers' Llama arithmetic (RMSNorm in float32, the model's own rotary module, attention as
`grpokit.kernels.attention` decodes: scores in the model's dtype, a float32 softmax) with q/k/v and gate/up each
fused into one matmul, a key/value cache written in place, and masks and rotary tables built once per rollout:
a decoding step is small matmuls, and transformers' forward spends most of it on cache copies and Python.
On a CUDA GPU it runs *static* (the cache preallocated to `max_new`, finished rows kept computing and their
draws ignored, the slot a device tensor) and replays each step from a CUDA graph, one launch a token.
It covers plain (merged) Llama, Qwen2 and Qwen3 checkpoints on a CPU or a CUDA GPU, in eval mode, outside
autocast; `refusal` names why any other model keeps transformers' forward (the sampler falls back: the same
tokens from the same distribution). Prefill stays transformers' forward; `Decoder.start` takes its cache.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

log = logging.getLogger(__name__)

_ARCHITECTURES = ("llama", "qwen2", "qwen3")
GROW = 16  # cache slots added at a time


def refusal(model: Any) -> str | None:
    """Why `Decoder` cannot run this model's decoding steps exactly (None: it can)."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in _ARCHITECTURES:
        return f"model type {kind!r} is not one of {', '.join(_ARCHITECTURES)}"
    if model.training:
        return "the model is in training mode (its dropout would apply)"
    if model.device.type not in ("cpu", "cuda"):
        return f"it runs on {model.device.type}, not a CPU or a CUDA GPU"
    if len({p.device for p in model.parameters()}) > 1:
        return "its weights are spread over several devices (a device_map): one step's buffers live on one"
    if torch.is_autocast_enabled(model.device.type):
        return "autocast is on: the decoder computes in the weights' own dtype"
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "pretraining_tp", 1) != 1:
        return "its MLP is not SiLU-gated or it splits matmuls (pretraining_tp)"
    if getattr(config, "use_sliding_window", False):
        return "it uses sliding-window attention"
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None or type(getattr(model, "lm_head", None)) is not torch.nn.Linear:
        return "it has no model.layers or no plain Linear lm_head"
    for layer in layers:
        modules = (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj)
        modules += (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)
        if any(type(m) is not torch.nn.Linear for m in modules):
            return "its projections are not plain Linear layers (an adapter or quantization wraps them)"
        for group in (modules[:3], modules[4:6]):
            if len({m.bias is None for m in group}) > 1 or len({m.weight.dtype for m in group}) > 1:
                return "projections that would be fused differ in bias or dtype"
        if kind == "qwen3" and not hasattr(layer.self_attn, "q_norm"):
            return "a qwen3 layer without q_norm"
    return None


class Decoder:
    """One token per row through a Llama-family model, with its own key/value cache. Usage:
    `start(hf_cache, mask, max_new)` after transformers' prefill, then `step(tokens, positions)` -> logits
    [B, V] float32 per step, and `keep(rows)` when rows leave the batch. The weights are read at `start`
    (fused, see `fused`): they must not change until the rollout ends.

    A model whose parameters require gradients (a policy evaluated before or between its training steps)
    keeps its parameters' storage: the decoder fuses copies of its weights for the rollout where a frozen
    model's are joined in place (`fused`).

    `static` (default: on a CUDA device) preallocates the cache and keeps finished rows computing in place
    (see the module's docstring); `graphs` (default: `static` on CUDA) replays the step from a CUDA graph.
    Both compute the same numbers as the growing, shrinking cache a CPU uses."""

    def __init__(self, model: Any, static: bool | None = None, graphs: bool | None = None) -> None:
        self.model = model
        cuda = model.device.type == "cuda"
        self.static = cuda if static is None else static
        self.graphs = (self.static and cuda) if graphs is None else graphs
        if self.graphs and not (self.static and cuda):
            raise ValueError("CUDA graphs need the static cache on a CUDA device")
        self.body = model.model
        config = model.config
        attn = self.body.layers[0].self_attn
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.dim = getattr(attn, "head_dim", None) or config.hidden_size // self.heads
        self.scaling = float(getattr(attn, "scaling", self.dim**-0.5))
        # A power of two scales bf16 scores exactly: it goes into the scores' matmul (transformers scales
        # the float32 copy; the same numbers). Any other scale is applied in float32, as there.
        self.exact_scale = math.log2(self.scaling).is_integer()
        self.qk_norm = config.model_type == "qwen3"
        self.own_weights = any(p.requires_grad for p in model.parameters())  # copy, never join, its weights

    def start(self, cache: Any, mask: torch.Tensor, max_new: int) -> None:
        """Move transformers' prefill cache (rows already expanded to the batch) into the decoder's buffers,
        emptying `cache` layer by layer; `mask` [B, L] marks the prefill's real (1) and padding (0) positions.

        Attention reads the whole buffer at every step, its empty slots masked (a slice up to the filled
        length is not contiguous: the matmul would copy it). Empty slots hold zeros, so masked scores meet
        finite values. The buffers grow `GROW` slots at a time up to `max_new` new tokens: answers stop long
        before the limit, and preallocating it all would raise peak memory. Keys are held as transformers
        holds them ([T, D] per head), so a step's new key is one contiguous write per head."""
        rows, length = mask.shape
        self.length, self.limit = length, length + max_new
        capacity = self.limit if self.static else min(length + GROW, self.limit)
        self.keys, self.values = [], []
        for layer in cache.layers:
            k, v = layer.keys, layer.values  # [B, Hkv, L, D]
            kb = k.new_zeros(rows, self.kv_heads, capacity, self.dim)  # [B, Hkv, T, D]
            vb = v.new_zeros(rows, self.kv_heads, capacity, self.dim)
            kb[:, :, :length] = k
            vb[:, :, :length] = v
            layer.keys = layer.values = None  # the prefill's copy goes as this one fills
            self.keys.append(kb)
            self.values.append(vb)
        dtype = self.keys[0].dtype
        exact = torch.promote_types(dtype, torch.float32)
        bias_dtype = dtype if self.exact_scale else exact
        self.bias = torch.full(
            (rows, self.kv_heads, 1, capacity), torch.finfo(bias_dtype).min, dtype=bias_dtype, device=mask.device
        )
        self.bias[..., :length].masked_fill_((mask == 1)[:, None, None, :], 0.0)  # [B, Hkv, 1, T] additive mask
        positions = torch.arange(self.limit + 1, device=mask.device).unsqueeze(0)
        cos, sin = self.body.rotary_emb(self.keys[0], positions)  # [1, P, D] in the cache's dtype
        half = self.dim // 2
        self.cos = cos[0]
        self.sin = torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)  # rotate_half's sign folded in
        # The LM head's output and its float32 copy, written in place: a fresh [B, V] tensor per step would
        # cost its page faults every time.
        head = self.model.lm_head.weight
        self.head_out = head.new_empty(rows, head.size(0))
        self.logits = (
            self.head_out if head.dtype == torch.float32 else torch.empty_like(self.head_out, dtype=torch.float32)
        )
        if self.static:  # what a step reads and writes in place: a captured graph replays on these addresses
            self.slot = torch.tensor([length], device=mask.device)  # the cache slot the next token fills
            self.live = torch.arange(rows, device=mask.device)  # batch rows still decoding, as the caller sees them
            self.tokens = torch.zeros(rows, dtype=torch.long, device=mask.device)
            self.positions = torch.zeros(rows, dtype=torch.long, device=mask.device)
            self.graph: Any = None
        self.layers = []  # per layer, what a step reads: no module lookups in the loop
        for layer in self.body.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append(
                (
                    layer.input_layernorm,
                    fused((attn.q_proj, attn.k_proj, attn.v_proj), copy=self.own_weights),
                    (attn.q_norm, attn.k_norm) if self.qk_norm else None,
                    (attn.o_proj.weight, attn.o_proj.bias),
                    layer.post_attention_layernorm,
                    fused((mlp.gate_proj, mlp.up_proj), copy=self.own_weights),
                    (mlp.down_proj.weight, mlp.down_proj.bias),
                )
            )

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only these batch rows (indices into the current batch).

        One layer at a time, never two copies of the whole cache: each layer's kept rows go into the buffer
        the layer before it has just left (as many rows or more, the same slots), only the first layer's into
        a new one. So a row ending allocates two buffers, not two per layer: under `return_freed_memory`'s
        thresholds every fresh buffer over 1 MB costs its page faults."""
        if self.static:  # the others stay in the buffers, computing what nobody reads
            self.live = self.live[rows]
            return

        def kept(buffer: torch.Tensor, free: torch.Tensor | None) -> torch.Tensor:
            out = None if free is None else free[: len(rows)]
            return torch.index_select(buffer, 0, rows, out=out)

        free_k = free_v = None  # the previous layer's buffers, left for this one
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            self.keys[i], self.values[i] = kept(k, free_k), kept(v, free_v)
            free_k, free_v = k, v
        self.bias = self.bias.index_select(0, rows)

    def _grow(self) -> None:
        """`GROW` more empty slots in every layer's buffers (zeros, masked), one layer at a time."""
        old = self.bias.size(-1)
        capacity = min(old + GROW, self.limit)
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            self.keys[i] = torch.nn.functional.pad(k, (0, 0, 0, capacity - old))
            self.values[i] = torch.nn.functional.pad(v, (0, 0, 0, capacity - old))
        self.bias = torch.nn.functional.pad(self.bias, (0, capacity - old), value=torch.finfo(self.bias.dtype).min)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """tokens [B] at positions [B] (their rotary positions) -> next-token logits [B, V] in float32, in a
        buffer the next step overwrites."""
        if not self.static:
            slot = self.length
            if slot == self.bias.size(-1):
                self._grow()
            self.length += 1
            return self._forward(tokens, positions, slot)
        if self.length == self.limit:
            raise ValueError(f"the cache holds {self.limit} positions: no room for another token")
        self.length += 1
        self.tokens.index_copy_(0, self.live, tokens)
        self.positions.index_copy_(0, self.live, positions)
        if self.graphs and self.graph is None:
            try:
                self.graph = self._capture()
            except RuntimeError as err:  # eager from here on: the same arithmetic, one launch per kernel
                log.warning("decoding without a CUDA graph: its capture failed (%s)", err)
                self.graphs = False
        if self.graphs:
            self.graph.replay()
        else:
            self._forward(self.tokens, self.positions, self.slot)
            self.slot.add_(1)
        return self.logits if len(self.live) == len(self.tokens) else self.logits.index_select(0, self.live)

    def _capture(self) -> Any:
        """The static step (and the slot's advance) as a CUDA graph. One eager run first on a side stream, as
        capture needs (cuBLAS workspaces, lazy initialisation): it computes the first step itself, writing
        the slot the replay then writes again with the same values."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._forward(self.tokens, self.positions, self.slot)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._forward(self.tokens, self.positions, self.slot)
            self.slot.add_(1)
        return graph

    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor, slot: int | torch.Tensor) -> torch.Tensor:
        """One decoding step writing cache slot `slot`: an int (the growing cache), or the static cache's
        one-element device tensor (indexed writes, no host value, so a graph can replay it)."""
        linear = torch.nn.functional.linear
        rows = tokens.size(0)
        static = self.static
        h, hkv, d = self.heads, self.kv_heads, self.dim
        group, half = h // hkv, d // 2
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)  # [B, 1, D]
        x = self.body.embed_tokens(tokens)  # [B, E]
        if static:
            self.bias.index_fill_(-1, slot, 0.0)
        else:
            self.bias[..., slot] = 0.0
        bias = self.bias.view(rows * hkv, 1, -1)  # [B Hkv, 1, T]
        for (norm1, (qkv_w, qkv_b), qk_norms, (o_w, o_b), norm2, (gu_w, gu_b), (down_w, down_b)), kc, vc in zip(
            self.layers, self.keys, self.values, strict=True
        ):
            qkv = linear(norm1(x), qkv_w, qkv_b)  # [B, (H + 2 Hkv) D]
            if qk_norms is None:
                qk = qkv[:, : (h + hkv) * d].view(rows, h + hkv, d)
            else:
                qk = torch.cat(
                    [
                        qk_norms[0](qkv[:, : h * d].view(rows, h, d)),
                        qk_norms[1](qkv[:, h * d : (h + hkv) * d].view(rows, hkv, d)),
                    ],
                    1,
                )
            qk = qk * cos + torch.cat([qk[..., half:], qk[..., :half]], dim=-1) * sin  # rotary, on q and k at once
            value = qkv[:, (h + hkv) * d :].view(rows, hkv, d)
            if static:
                kc.index_copy_(2, slot, qk[:, h:].unsqueeze(2))
                vc.index_copy_(2, slot, value.unsqueeze(2))
            else:
                kc[:, :, slot] = qk[:, h:]
                vc[:, :, slot] = value
            q = qk[:, :h].reshape(rows * hkv, group, d)  # query heads grouped under their key/value head
            if self.exact_scale:  # [B Hkv, G, T]
                scores = torch.baddbmm(bias, q, kc.view(rows * hkv, -1, d).transpose(1, 2), alpha=self.scaling)
            else:
                scores = torch.bmm(q, kc.view(rows * hkv, -1, d).transpose(1, 2)).to(bias.dtype) * self.scaling + bias
            probs = scores.softmax(-1, dtype=torch.float32).to(vc.dtype)
            out = torch.bmm(probs, vc.view(rows * hkv, -1, d))  # [B Hkv, G, D]
            x = x + linear(out.view(rows, h * d), o_w, o_b)
            gate, up = linear(norm2(x), gu_w, gu_b).chunk(2, dim=-1)
            x = x + linear(torch.nn.functional.silu(gate) * up, down_w, down_b)
        head = self.model.lm_head
        out, logits = self.head_out[:rows], self.logits[:rows]  # leading rows of a buffer: contiguous
        if head.bias is None:
            torch.mm(self.body.norm(x), head.weight.t(), out=out)
        else:
            torch.addmm(head.bias, self.body.norm(x), head.weight.t(), out=out)
        if logits.data_ptr() != out.data_ptr():
            logits.copy_(out)
        return logits


def fused(modules: tuple, copy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights (and biases) of Linear layers that read the same input, as one [sum of outputs, input]
    matrix: one matmul instead of several (q/k/v: 576 -> 960 for SmolLM2-135M; gate/up: 576 -> 3072).
    `copy` returns a new matrix and leaves the layers as they are (a model that trains).

    No copy is kept: the first call moves the layers' weights into one allocation and makes each a view
    of its rows, so whatever later writes them in place (the rollout copy's `refresh`) writes the fused
    matrix too, and freeing them (`RolloutCopy.release`) frees it. Until something reallocates a weight,
    later calls only check that the rows still lie end to end and return the view."""
    return joined([m.weight for m in modules], modules, "weight", copy), (
        None if modules[0].bias is None else joined([m.bias for m in modules], modules, "bias", copy)
    )


def joined(tensors: list[torch.Tensor], modules: Any, name: str, copy: bool = False) -> torch.Tensor:
    """`tensors` (attribute `name` of each of `modules`) as one tensor along the first dimension, each
    module's attribute then a view of its rows (see `fused`); with `copy` a new tensor, the modules untouched."""
    if copy:
        return torch.cat([t.detach() for t in tensors])
    first = tensors[0]
    rows = sum(t.shape[0] for t in tensors)
    offset, adjacent = first.storage_offset(), True
    for t in tensors:
        same = t.untyped_storage().data_ptr() == first.untyped_storage().data_ptr() and t.is_contiguous()
        adjacent = adjacent and same and t.storage_offset() == offset
        offset += t.numel()
    if adjacent:
        return first.as_strided((rows, *first.shape[1:]), first.stride(), first.storage_offset())
    whole = torch.cat([t.detach() for t in tensors])
    start = 0
    for module, t in zip(modules, tensors, strict=True):
        getattr(module, name).data = whole[start : start + t.shape[0]]
        start += t.shape[0]
    return whole
