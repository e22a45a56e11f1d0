"""grpokit.kernels.casts: one cast per unchanged tensor, a new one after a write or for another tensor."""

import torch

from grpokit.kernels import casts


def test_a_tensor_is_cast_once_until_it_changes_or_another_comes():
    cache = casts.CastOnce()
    x = torch.randn(3, 4)
    first = cache.get(x, torch.bfloat16)
    assert first.dtype == torch.bfloat16 and cache.get(x, torch.bfloat16) is first
    x.mul_(2.0)  # an in-place write bumps the version
    second = cache.get(x, torch.bfloat16)
    assert second is not first and torch.equal(second, x.to(torch.bfloat16))
    assert cache.get(x.clone(), torch.bfloat16) is not second, "another tensor, even with the same values"
    assert cache.get(x, torch.float32).data_ptr() == x.data_ptr(), "already in the dtype: no copy"
    casts.clear()
    assert cache.source is None and cache.value is None


def test_compute_dtype_follows_autocast():
    x = torch.zeros(2)
    assert casts.compute_dtype(x) == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert casts.compute_dtype(x) == torch.bfloat16
