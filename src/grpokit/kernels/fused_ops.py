"""RMSNorm and the SiLU-gated MLP product as one autograd function each, for the training pass.

`_RmsNorm` runs transformers' RMSNorm forward ops in the same order (the same numbers) without recording
them, saves the input and one float32 per token (the reciprocal root mean square) instead of two float32
[tokens, hidden] tensors, and takes the gradient in one formula, `dx = rstd (g - n mean(g n))`. `_SiluMul`
saves `gate` and `up` only and recomputes `silu(gate)` in the backward.
`install` routes a model's modules whose `forward` is transformers' Llama code (Llama, Qwen2, Qwen3, Mistral and
every class copied from it: the source is compared, not the name); any other module keeps its own forward.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
import torch.nn.functional as F


class _RmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps: float):  # type: ignore[override]
        xf = x.to(torch.float32)
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)  # [..., 1]
        out = weight * (xf * rstd).to(x.dtype)
        ctx.save_for_backward(x, rstd, weight)
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        x, rstd, weight = ctx.saved_tensors
        normed = x.to(torch.float32) * rstd  # [..., H]
        grad_x = grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad_out * normed.to(x.dtype)).reshape(-1, x.size(-1)).sum(0).to(weight.dtype)
        if ctx.needs_input_grad[0]:
            g = (grad_out * weight).to(torch.float32)  # the normalised values' gradient
            grad_x = (g - normed * (g * normed).mean(-1, keepdim=True)).mul_(rstd).to(x.dtype)
        return grad_x, grad_weight, None


class _SiluMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):  # type: ignore[override]
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        gate, up = ctx.saved_tensors  # the same ops autograd runs, with silu(gate) recomputed
        grad_up = grad_out * F.silu(gate) if ctx.needs_input_grad[1] else None
        grad_gate = torch.ops.aten.silu_backward(grad_out * up, gate) if ctx.needs_input_grad[0] else None
        return grad_gate, grad_up


@functools.cache
def _llama(name: str) -> str:
    # slow import: transformers' Llama code, only when a model's modules are compared with it
    from transformers.models.llama import modeling_llama

    return inspect.getsource(getattr(modeling_llama, name).forward)


@functools.cache
def _same_forward(cls: type, name: str) -> bool:
    """Whether `cls.forward` is transformers' Llama class `name`'s forward, character for character."""
    try:
        return inspect.getsource(cls.forward) == _llama(name)
    except (OSError, TypeError):  # no source (compiled, dynamically built): not known to be the same
        return False


def _norm_forward(norm: Any):
    original = norm.forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled():  # nothing saved without gradients: the module's own ops
            return original(x)
        return _RmsNorm.apply(x, norm.weight, norm.variance_epsilon)

    return forward


def _mlp_forward(mlp: Any):
    original = mlp.forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled() or not isinstance(mlp.act_fn, (torch.nn.SiLU, _silu_class())):
            return original(x)
        return mlp.down_proj(_SiluMul.apply(mlp.gate_proj(x), mlp.up_proj(x)))

    return forward


@functools.cache
def _silu_class() -> type:
    # slow import: transformers, only when an MLP's activation is checked
    from transformers.activations import SiLUActivation

    return SiLUActivation


def install(model: Any) -> int:
    """Route `model`'s Llama-code RMSNorm and MLP modules through the fused functions; returns how many
    modules. Idempotent; `uninstall` undoes it."""
    count = 0
    for module in model.modules():
        kind = "LlamaRMSNorm" if hasattr(module, "variance_epsilon") else "LlamaMLP"
        if kind == "LlamaMLP" and not all(hasattr(module, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            continue
        if not _same_forward(type(module), kind):
            continue
        if "forward" not in vars(module):
            module.forward = _norm_forward(module) if kind == "LlamaRMSNorm" else _mlp_forward(module)
        count += 1
    return count


def uninstall(model: Any) -> int:
    """The modules' own forward again wherever `install` routed it."""
    count = 0
    for module in model.modules():
        if "forward" in vars(module) and getattr(module.forward, "__qualname__", "").startswith(
            ("_norm_forward", "_mlp_forward")
        ):
            del module.forward
            count += 1
    return count
