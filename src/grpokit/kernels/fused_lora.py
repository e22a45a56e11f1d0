"""peft's LoRA linear layers as one autograd function each, for the training pass: peft's arithmetic, fused.

Forward `y = x W^T + b`, then `y += scaling * (x A^T) B^T` as one `addmm`; backward five GEMMs (the input's
gradient through W and through the adapter, A's and B's), the input cast once and saved once. peft instead
runs separate modules and ops, each with its casts under autocast and its own backward.
Projections that read the same input (q, k and v; gate and up) run as one such function: their frozen base
weights held as one matrix (each layer's weight a view of its rows), their A matrices stacked and their B
matrices (scaled) on a block diagonal; the first layer's call computes the group, the others take their share.
Plain LoRA only: one active adapter, no dropout, no DoRA or other variant, a frozen base and bias, not merged.
Anything else (and the adapter switched off, as the reference pass does) runs peft's forward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from grpokit.kernels import fused_ops
from grpokit.kernels.casts import CastOnce, compute_dtype
from grpokit.kernels.decode import joined

cast_input = CastOnce()  # q, k and v (gate and up) read the same input: one cast, saved once


class _LoraLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, scaling: float):  # type: ignore[override]
        dtype = compute_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            # the input's gradient returns in its own dtype: q, k and v's add up in fp32, as peft's do
            flat = cast_input.get(x, dtype).reshape(-1, x.size(-1))  # [n, in]
            a, b = lora_a.to(dtype), lora_b.to(dtype)  # [r, in], [out, r]
            w = weight.to(dtype)
            out = F.linear(flat, w, bias.to(dtype) if bias is not None else None)  # [n, out]
            down = torch.mm(flat, a.t())  # [n, r]
            out.addmm_(down, b.t(), alpha=scaling)
        ctx.save_for_backward(flat, down, w, a, b)
        ctx.scaling, ctx.x_dtype, ctx.x_shape = scaling, x.dtype, x.shape
        return out.reshape(*x.shape[:-1], out.size(-1))

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        flat, down, w, a, b = ctx.saved_tensors
        scaling = ctx.scaling
        with torch.autocast(flat.device.type, enabled=False):
            g = grad_out.reshape(-1, grad_out.size(-1)).to(flat.dtype)  # [n, out]
            g_b = torch.mm(g, b)  # [n, r]
            grad_x = None
            if ctx.needs_input_grad[0]:
                grad_x = torch.mm(g, w).addmm_(g_b, a, alpha=scaling).reshape(ctx.x_shape).to(ctx.x_dtype)
            grad_a = torch.mm(g_b.t(), flat).mul_(scaling) if ctx.needs_input_grad[3] else None  # [r, in]
            grad_b = torch.mm(g.t(), down).mul_(scaling) if ctx.needs_input_grad[4] else None  # [out, r]
        return (
            grad_x,
            None,
            None,
            grad_a.float() if grad_a is not None else None,
            grad_b.float() if grad_b is not None else None,
            None,
        )


def _plain(layer: Any) -> tuple | None:
    """(W, bias, A, B, scaling) of a peft LoRA linear layer this function computes exactly, else None."""
    if layer.merged or layer.disable_adapters or len(layer.active_adapters) != 1:
        return None
    name = layer.active_adapters[0]
    if name not in layer.lora_A or name in getattr(layer, "lora_variant", {}):
        return None
    dropout = layer.lora_dropout[name]
    if not isinstance(dropout, torch.nn.Identity) and not (dropout.p == 0 or not layer.training):
        return None
    base = layer.get_base_layer()
    if type(base) is not torch.nn.Linear or base.weight.requires_grad:
        return None
    if base.bias is not None and base.bias.requires_grad:
        return None
    return base.weight, base.bias, layer.lora_A[name].weight, layer.lora_B[name].weight, layer.scaling[name]


def _forward(layer: Any, peft_forward: Any):
    def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        plain = None if args or kwargs else _plain(layer)
        return peft_forward(x, *args, **kwargs) if plain is None else _LoraLinear.apply(x, *plain)

    return forward


# Sibling projections that read the same input, by their parent's attribute names (Llama, Qwen, Mistral...).
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class _Group:
    """Plain LoRA layers that read the same input, computed by one function call: the first layer's call
    computes every layer's output and keeps the others' until they are called with the same input (any
    other input, or a layer that is not plain LoRA, computes on its own)."""

    def __init__(self, layers: list[Any]) -> None:
        self.layers = layers
        self.input: torch.Tensor | None = None
        self.outputs: dict[int, torch.Tensor] = {}

    def forward(self, index: int, x: torch.Tensor, peft_forward: Any, args: tuple, kwargs: dict) -> torch.Tensor:
        if index == 0:
            self.input, self.outputs = None, {}
            plains = None if args or kwargs else [_plain(layer) for layer in self.layers]
            if plains is not None and _joinable(plains):
                outputs = self._together(x, plains)
                self.input, self.outputs = x, dict(enumerate(outputs[1:], start=1))
                return outputs[0]
        elif x is self.input and index in self.outputs:
            output = self.outputs.pop(index)
            if not self.outputs:
                self.input = None
            return output
        plain = None if args or kwargs else _plain(self.layers[index])
        return peft_forward(x, *args, **kwargs) if plain is None else _LoraLinear.apply(x, *plain)

    def _together(self, x: torch.Tensor, plains: list[tuple]) -> tuple[torch.Tensor, ...]:
        bases = [layer.get_base_layer() for layer in self.layers]
        weight = joined([p[0] for p in plains], bases, "weight")  # [sum of outputs, in]
        bias = None if plains[0][1] is None else joined([p[1] for p in plains], bases, "bias")
        lora_a = torch.cat([p[2] for p in plains])  # [layers r, in]
        lora_b = torch.block_diag(*[p[3] * p[4] for p in plains])  # [sum of outputs, layers r]
        out = _LoraLinear.apply(x, weight, bias, lora_a, lora_b, 1.0)
        return out.split([p[0].size(0) for p in plains], dim=-1)


def _joinable(plains: list[tuple | None]) -> bool:
    """Whether these layers' (W, bias, A, B, scaling) make one matrix each: all plain, one dtype and device,
    all with a bias or none."""
    if not all(plains):
        return False
    weights = [p[0] for p in plains]  # type: ignore[index]
    return len({(w.dtype, w.device, w.size(1)) for w in weights}) == 1 and len({p[1] is None for p in plains}) == 1  # type: ignore[index]


def _grouped_forward(group: _Group, index: int, peft_forward: Any):
    def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return group.forward(index, x, peft_forward, args, kwargs)

    return forward


def install(model: Any) -> int:
    """Route each of `model`'s peft LoRA linear layers through the fused function (peft's own forward where
    it does not apply, decided at each call), sibling projections (`GROUPS`) as one; returns how many
    layers. Idempotent."""
    # slow import: peft (and transformers under it), only when a model's layers are routed
    from peft.tuners.lora import Linear

    for parent in model.modules():
        for names in GROUPS:
            layers = [getattr(parent, name, None) for name in names]
            if all(type(layer) is Linear and "forward" not in vars(layer) for layer in layers):
                group = _Group(layers)
                for index, layer in enumerate(layers):
                    layer.forward = _grouped_forward(group, index, layer.forward)
    count = 0
    for module in model.modules():
        if type(module) is Linear:
            if "forward" not in vars(module):
                module.forward = _forward(module, module.forward)
            count += 1
    return count


def install_on(trainer: Any) -> None:
    """`install` (and `grpokit.kernels.fused_ops.install`: RMSNorm, the MLP's SiLU product) on a transformers
    trainer's model, unless several processes train it: ZeRO-3 and FSDP gather the weights in module hooks,
    which the functions would bypass."""
    if trainer.accelerator.num_processes == 1 and not trainer.is_deepspeed_enabled and not trainer.is_fsdp_enabled:
        install(trainer.model)
        fused_ops.install(trainer.model)


def uninstall(model: Any) -> int:
    """peft's own forward again for every layer `install` routed (benchmarks time TRL's pass with it)."""
    # slow import: peft (and transformers under it), only when a model's layers are routed
    from peft.tuners.lora import Linear

    count = 0
    for module in model.modules():
        if type(module) is Linear and "forward" in vars(module):
            del module.forward
            count += 1
    return count
