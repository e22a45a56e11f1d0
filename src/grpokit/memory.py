"""Give freed tensor memory back to the system (glibc), so a run's resident size follows what it holds.

glibc serves large allocations with `mmap` and returns them on free, but after the first such free it
raises its threshold (up to 32 MB) and serves later ones from the heap, which it cannot shrink past a
block still in use. A training step allocates and frees gigabytes of activations and KV caches in
blocks of 1-32 MB, so the freed memory stayed resident: measured, 50 freed 8 MB tensors kept 406 MB
resident behind one live one, 14 MB with the threshold fixed at 1 MB. The price is a page fault per
fresh page of every large tensor: on one core of the AVX2 EPYC the default recipe's training pass
(micro-batches of 16) peaked at 2.66 GB instead of 3.47 GB and took 32.5 s instead of 24.4 s, so it
is a recipe's choice (`train_pass.return_freed_memory`), for machines short of memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
THRESHOLD = 1 << 20  # bytes: larger blocks are mapped and unmapped on their own


def return_freed_memory(threshold: int = THRESHOLD) -> bool:
    """Fix glibc's mmap and trim thresholds at `threshold`; False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # musl, macOS: no mallopt, nothing to fix
        return False
    done = mallopt(M_MMAP_THRESHOLD, threshold) == 1 and mallopt(M_TRIM_THRESHOLD, threshold) == 1
    if not done:
        log.debug("mallopt refused the thresholds; freed memory may stay resident")
    return done
