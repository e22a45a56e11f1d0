"""Freed tensor memory leaves the process (grpokit.kernels.memory), instead of staying resident behind a live block."""

import subprocess
import sys

import pytest

SCENARIO = """
import sys, torch
from grpokit.kernels.memory import return_freed_memory, trim
if sys.argv[1] == "fixed":
    assert return_freed_memory()
def rss_mb():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) // 1024
base = rss_mb()
t = torch.ones(4 << 20); del t  # a freed 16 MB block: glibc raises its mmap threshold past 8 MB
blocks = [torch.ones(2 << 20) for _ in range(50)]  # 50 x 8 MB, as a step's activations
last = blocks[-1]; del blocks  # one block still in use
if sys.argv[1] == "trimmed":
    assert trim()
print(rss_mb() - base)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_freed_tensors_do_not_stay_resident():
    def held(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", SCENARIO, mode], capture_output=True, text=True, check=True)
        return int(done.stdout.split()[-1])

    assert held("default") > 300, "glibc's default keeps the freed 8 MB blocks (the problem this fixes)"
    assert held("fixed") < 100
    assert held("trimmed") < 100, "malloc_trim hands back the free pages below the live block too"


@pytest.mark.parametrize("asked", [False, True])
def test_the_recipes_setting_decides_whether_the_thresholds_are_fixed(monkeypatch, asked):
    import types

    import grpokit.kernels.memory as memory

    calls = []
    monkeypatch.setattr(memory, "return_freed_memory", lambda: calls.append(1) or True)
    assert memory.follow_recipe(types.SimpleNamespace(return_freed_memory=asked)) is asked
    assert len(calls) == int(asked)  # `grpokit train` and the benchmarks fix them only when the recipe asks
