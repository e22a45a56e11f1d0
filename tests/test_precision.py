import itertools

import pytest

import grpokit.precision as precision


@pytest.mark.parametrize(("best", "seconds"), [(True, 1.0), (False, 6.0 / 3)])
def test_matmul_rate_is_the_fastest_product_or_the_burst_mean(monkeypatch, best, seconds):
    # Scripted clock: three products take 3, 1 and 2 s one by one; a burst of three reads 0 then 6.
    readings = [0.0, 3.0, 3.0, 4.0, 4.0, 6.0] if best else [0.0, 6.0]
    clock = itertools.chain(readings)
    monkeypatch.setattr(precision, "clock", lambda device="cpu": next(clock))
    flop = 2 * 4 * 8 * 16
    rate = precision.matmul_gflops(4, "float32", repeats=3, inner=8, cols=16, best=best)
    assert rate == pytest.approx(flop / seconds / 1e9)
    assert next(clock, None) is None  # every reading used: one per product edge, or two for the burst
