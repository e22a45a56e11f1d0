"""Give freed tensor memory back to the system (glibc), so a run's resident size follows what it holds.

After the first free of an `mmap`ed block glibc raises its threshold (up to 32 MB) and serves later large
allocations from the heap, which cannot shrink past a block still in use: a training step's freed activations
and KV caches stayed resident. `return_freed_memory` fixes the thresholds at `THRESHOLD`; the price is a page
fault per fresh page of every large tensor, so it is a recipe's choice (`train_pass.return_freed_memory`), for
machines short of memory. `trim` gives the heap's free pages back between a step's phases.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
THRESHOLD = 1 << 20  # bytes: larger blocks are mapped and unmapped on their own


@functools.cache
def _libc_function(name: str):
    """glibc's `name` (mallopt, malloc_trim), or None where the C library lacks it (musl, macOS); looked
    up once."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None


def return_freed_memory(threshold: int = THRESHOLD) -> bool:
    """Fix glibc's mmap and trim thresholds at `threshold`; False where the C library is not glibc."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:  # nothing to fix
        return False
    done = mallopt(M_MMAP_THRESHOLD, threshold) == 1 and mallopt(M_TRIM_THRESHOLD, threshold) == 1
    if not done:
        log.debug("mallopt refused the thresholds; freed memory may stay resident")
    return done


def follow_recipe(train_pass) -> bool:
    """Fix the thresholds where the recipe's `train_pass.return_freed_memory` asks for it, as `grpokit train`
    does (the benchmarks call this too, to time the run a user gets); True if they were fixed."""
    return bool(train_pass.return_freed_memory) and return_freed_memory()


def trim() -> bool:
    """Give the heap's free pages back to the system now (glibc's `malloc_trim`), between the phases of a
    step: the rollout's KV caches and merged weights, freed, would otherwise stay resident under the
    training pass's activations, and those under the next rollout, so the process held both phases'
    peaks at once. Within a phase the heap still reuses its blocks, so unlike `return_freed_memory` a
    tensor costs no fresh page faults, only each phase's first touch of its pages. False without glibc."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is None:
        return False
    malloc_trim(0)
    return True


def release_device_cache() -> None:
    """Collect garbage (tensors held by reference cycles, such as a caught exception's frames) and give the
    CUDA caching allocator's unused blocks back to the device: after a pass ran out of GPU memory, a retry
    with smaller micro-batches starts from the memory the model, optimizer and rows really hold."""
    # slow import: torch, which the glibc calls above do not need
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
