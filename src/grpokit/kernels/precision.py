"""Pick bf16 or fp32 by measuring this machine, not by assuming.

GPUs with bf16 support train in bf16. A CPU uses bf16 autocast only where `cpu_bf16_speedup` (a [256 x 576] x
[576 x 1536] matmul, SmolLM2's MLP at a training batch, timed in both once per process) finds it at least
`BF16_MIN_SPEEDUP` times faster: without bf16 instructions it is several times slower, with them faster.
For the benchmarks: `matmul_gflops` times a peak, and `record_matmuls` / `matmul_seconds` tell what a piece of
work's own matrix products allow (each one it ran, timed alone at its shape, layout and dtype).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BF16_MIN_SPEEDUP = 1.3


def clock(device: str = "cpu") -> float:
    """`time.perf_counter()`, read on a GPU after the kernels queued on `device` finish, so that a span
    between two readings holds its own work."""
    if device != "cpu":
        # slow import: torch; the module itself stays light (recipe checks, cpu_name)
        import torch

        torch.cuda.synchronize()
    return time.perf_counter()


def fastest(run: Callable[[], Any], repeats: int, device: str = "cpu") -> float:
    """Seconds of the fastest of `repeats` calls of `run`, each timed on its own (`clock`)."""
    spans = []
    for _ in range(repeats):
        start = clock(device)
        run()
        spans.append(clock(device) - start)
    return min(spans)


def matmul_gflops(
    rows: int = 256,
    dtype: str = "float32",
    repeats: int = 20,
    inner: int = 576,
    cols: int = 1536,
    device: str = "cpu",
    best: bool = False,
) -> float:
    """GFLOP/s of a [rows x inner] x [inner x cols] matmul in `dtype` on `device` (after 3 warm-ups): over
    `repeats` products in a row, or with `best` the fastest of `repeats` products timed one by one, which is
    what a benchmark's peak or ceiling should be: a burst's mean takes in whatever else slowed the machine
    while it ran. The default shape is SmolLM2's MLP. On a GPU the clock is read after the queued products
    finish."""
    # slow import: torch; the module itself stays light (recipe checks, cpu_name)
    import torch

    a = torch.randn(rows, inner, dtype=getattr(torch, dtype), device=device)
    b = torch.randn(inner, cols, dtype=getattr(torch, dtype), device=device)
    for _ in range(3):
        a @ b
    flop = 2 * rows * inner * cols
    if best:
        return flop / max(fastest(lambda: a @ b, repeats, device), 1e-9) / 1e9
    start = clock(device)
    for _ in range(repeats):
        a @ b
    return flop * repeats / max(clock(device) - start, 1e-9) / 1e9


def cpu_name() -> str:
    """The CPU's model name as lscpu prints it (from /proc/cpuinfo), for every benchmark's figures."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:  # not Linux
        return "unknown CPU"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown CPU")


@functools.cache
def cpu_bf16_speedup(rows: int = 256, repeats: int = 20) -> float:
    """fp32 time / bf16 time for the same matmul on this CPU (> 1: bf16 is faster)."""
    return matmul_gflops(rows, "bfloat16", repeats) / matmul_gflops(rows, "float32", repeats)


def default_bf16() -> bool:
    """bf16 mixed precision where it pays: a GPU that supports it, or a CPU where it measures faster."""
    # slow import: torch; the module itself stays light (recipe checks, cpu_name)
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return cpu_bf16_speedup() >= BF16_MIN_SPEEDUP


def trainer_precision(bf16: bool | None = None) -> dict[str, bool]:
    """TrainingArguments keywords: `bf16` (measured unless given), and `use_cpu`, which transformers
    needs before it accepts bf16 on a CPU."""
    # slow import: torch; the module itself stays light (recipe checks, cpu_name)
    import torch

    bf16 = default_bf16() if bf16 is None else bool(bf16)
    return {"bf16": bf16, "use_cpu": bf16 and not torch.cuda.is_available()}


@dataclasses.dataclass(frozen=True)
class Matmul:
    """One matrix product a piece of work ran, as torch dispatched it (below autocast, so in the dtype it
    ran in): the aten op and each operand's size, stride and dtype."""

    op: str  # "mm", "addmm", "bmm", "baddbmm" (in-place and out= forms folded in)
    operands: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]  # (size, stride) of each tensor operand
    dtype: str

    @property
    def flop(self) -> int:
        """2 x rows x inner x columns (x batch for the batched products)."""
        (left, _), (right, _) = self.operands
        return 2 * math.prod(left) * right[-1]


_MATMUL_OPS = ("mm", "addmm", "addmm_", "bmm", "baddbmm", "baddbmm_")


def record_matmuls(work: Callable[[], Any]) -> collections.Counter[Matmul]:
    """Run `work` once and count every matrix product it dispatched, by shape, layout and dtype; the
    products a matmul or linear call decomposes into are what is counted."""
    # slow import: torch; the module itself stays light (recipe checks, cpu_name)
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: collections.Counter[Matmul] = collections.Counter()

    class _Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in _MATMUL_OPS:
                tensors = [a for a in args if isinstance(a, torch.Tensor)]
                if name.startswith(("addmm", "baddbmm")):
                    tensors = tensors[1:]  # the added term is not an operand of the product
                operands = tuple((tuple(t.shape), tuple(t.stride())) for t in tensors[:2])
                seen[Matmul(name.rstrip("_"), operands, str(tensors[0].dtype).removeprefix("torch."))] += 1
            return func(*args, **(kwargs or {}))

    with _Log():
        work()
    return seen


def matmul_seconds(products: collections.Counter[Matmul], repeats: int = 10) -> float:
    """Seconds the counted products take alone on this CPU: each distinct one timed as a plain product
    of fresh operands of its size, stride and dtype (the fastest of `repeats`, as `matmul_gflops(best=True)`
    times a peak), times how often it ran. Operands stay in cache between repeats, so this is the most the
    work's own matmuls allow, not what they cost inside it."""
    # slow import: torch; the module itself stays light (recipe checks, cpu_name)
    import torch

    total = 0.0
    for product, count in products.items():
        dtype = getattr(torch, product.dtype)
        left, right = (torch.empty_strided(size, stride, dtype=dtype).normal_() for size, stride in product.operands)
        product_once = functools.partial(torch.bmm if left.dim() == 3 else torch.mm, left, right)
        for _ in range(2):
            product_once()
        total += fastest(product_once, repeats) * count
    return total
