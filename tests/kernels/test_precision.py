import itertools

import pytest

import grpokit.kernels.precision as precision


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


def test_recorded_matmuls_are_every_product_with_the_flop_count_torch_gives():
    """Forward and backward under bf16 autocast: a linear layer (addmm), a matmul (mm) and a batched product
    (bmm), counted in the dtype they ran in, their FLOPs what torch's FlopCounterMode counts."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    layer = torch.nn.Linear(64, 32)
    x = torch.randn(10, 7, 64, requires_grad=True)

    def work():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = layer(x) @ torch.randn(32, 5)
            z = torch.bmm(torch.randn(3, 4, 5), torch.randn(3, 5, 6))
        (y.float().sum() + z.float().sum()).backward()

    products = precision.record_matmuls(work)
    with FlopCounterMode(display=False) as counter:
        work()
    assert sum(p.flop * n for p, n in products.items()) == counter.get_total_flops()
    assert {p.op for p in products} == {"addmm", "mm", "bmm"}
    # 3 forward products; 3 gradients: the matmul's input, the linear layer's input and weight (the bmm's none)
    assert sum(products.values()) == 6
    assert {p.dtype for p in products} == {"bfloat16"}
    weight_t = next(p for p in products if p.op == "addmm").operands[1]
    assert weight_t == ((64, 32), (1, 64))  # the weight's transposed layout, as it ran


def test_matmuls_alone_take_the_fastest_of_each_product_times_its_count(monkeypatch):
    """Two distinct products, run 3 and 1 times: their fastest single timings (1 and 2 s), weighted."""
    import collections

    products = collections.Counter(
        {
            precision.Matmul("mm", (((4, 8), (8, 1)), ((8, 2), (2, 1))), "float32"): 3,
            precision.Matmul("bmm", (((2, 4, 8), (32, 8, 1)), ((2, 8, 2), (16, 2, 1))), "float32"): 1,
        }
    )
    readings = iter([0.0, 3.0, 3.0, 4.0, 10.0, 12.0, 12.0, 15.0])  # spans 3, 1 then 2, 3
    monkeypatch.setattr(precision, "clock", lambda device="cpu": next(readings))
    assert precision.matmul_seconds(products, repeats=2) == pytest.approx(3 * 1.0 + 1 * 2.0)
    assert next(readings, None) is None
