"""Tensors cast to the compute dtype once and reused while they are unchanged.

Under bf16 autocast a CPU training pass casts the same tensors again and again: the LM head's fp32 weight
for every micro-batch's forward and backward (`grpokit.kernels.head`), and one hidden state for each projection
that reads it (q, k and v; gate and up: `grpokit.kernels.fused_lora`). A `CastOnce` keeps the last cast of one
tensor; a new tensor, an in-place write (which bumps the tensor's version) or another dtype makes a new
cast. `clear()` drops every cache's tensors (the trainer calls it after each training pass).
"""

from __future__ import annotations

import torch

_ALL: list[CastOnce] = []


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype autocast computes in on x's device, or x's own dtype outside autocast."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


class CastOnce:
    """The last tensor handed to `get`, cast to `dtype`: the same cast while the same tensor (same object,
    storage and version) comes again. Holds both until the next tensor or `clear`."""

    def __init__(self) -> None:
        self.source: torch.Tensor | None = None
        self.key: tuple = ()
        self.value: torch.Tensor | None = None
        _ALL.append(self)

    def get(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if x.dtype == dtype:
            return x.detach()
        key = (x.data_ptr(), x._version, dtype)
        if x is not self.source or key != self.key or self.value is None:
            self.clear()  # the previous pair is not kept alive while the new cast is made
            self.source, self.key, self.value = x, key, x.detach().to(dtype)
        return self.value

    def clear(self) -> None:
        self.source, self.key, self.value = None, (), None


def clear() -> None:
    """Drop every cache's tensors."""
    for cache in _ALL:
        cache.clear()
