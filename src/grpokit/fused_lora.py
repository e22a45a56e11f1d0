"""peft's LoRA linear layers as one autograd function each, for the training pass.

peft computes `base(x) + lora_B(lora_A(dropout(x))) * scaling` as separate modules and ops: under bf16
autocast each adapted layer casts its input to fp32 and back to bf16 twice, multiplies and adds a full
output-sized tensor, and its backward runs each op's own gradient (on a 2-core CPU, with the default
recipe's 210 adapted layers and a few hundred tokens per micro-batch, these small ops and their Python
cost were ~30% of the training pass, bench/RESULTS.md v0.30). Here one function does the same arithmetic:
forward `y = x W^T + b`, then `y += scaling * (x A^T) B^T` as one `addmm`; backward five GEMMs (the input's
gradient through W and through the adapter, and A's and B's), with the input cast once and saved once,
and one cast for the projections that read the same input (q, k, v; gate, up).

Used for plain LoRA only: one active adapter, no dropout, no DoRA or other variant, a frozen base and bias,
not merged. Anything else (and the adapter switched off, as the reference pass does) runs peft's forward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


class _Cast:
    """The last input cast to the compute dtype. q, k and v (gate and up) read the same hidden state: one
    cast serves them, and autograd saves it once instead of once per projection."""

    def __init__(self) -> None:
        self.source: torch.Tensor | None = None
        self.key: tuple = ()
        self.value: torch.Tensor | None = None

    def get(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if x.dtype == dtype:
            return x
        key = (x._version, dtype)
        if x is not self.source or key != self.key or self.value is None:
            self.source, self.value = None, None  # the previous layer's pair is not kept alive meanwhile
            self.source, self.key, self.value = x, key, x.to(dtype)
        return self.value

    def clear(self) -> None:
        self.source, self.value = None, None


cast_input = _Cast()


class _LoraLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, scaling: float):  # type: ignore[override]
        dtype = _compute_dtype(x)
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
    """(A, B, scaling) of a peft LoRA linear layer this function computes exactly, else None."""
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
    return layer.lora_A[name].weight, layer.lora_B[name].weight, layer.scaling[name]


def _forward(layer: Any, peft_forward: Any):
    def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        plain = None if args or kwargs else _plain(layer)
        if plain is None:
            return peft_forward(x, *args, **kwargs)
        base = layer.get_base_layer()
        return _LoraLinear.apply(x, base.weight, base.bias, *plain)

    return forward


def install(model: Any) -> int:
    """Route each of `model`'s peft LoRA linear layers through the fused function (peft's own forward where
    it does not apply, decided at each call); returns how many layers. Idempotent."""
    from peft.tuners.lora import Linear

    count = 0
    for module in model.modules():
        if type(module) is Linear and "forward" not in vars(module):
            module.forward = _forward(module, module.forward)
            count += 1
        elif type(module) is Linear:
            count += 1
    return count


def uninstall(model: Any) -> int:
    """peft's own forward again for every layer `install` routed (benchmarks time TRL's pass with it)."""
    from peft.tuners.lora import Linear

    count = 0
    for module in model.modules():
        if type(module) is Linear and "forward" in vars(module):
            del module.forward
            count += 1
    return count
