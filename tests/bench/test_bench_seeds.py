"""bench/seeds.py on run directories written here: which evaluation is read, the statistics against
hand-counted cases, and the errors a user meets. Nothing is trained."""

import json
import math
from itertools import combinations

import pytest

from tests.conftest import load_script
from tests.fake_runs import make_run


@pytest.fixture(scope="module")
def seeds():
    return load_script("bench/seeds.py")


def test_permutation_p_counts_every_split_at_least_as_far_apart(seeds):
    # 3 runs each, fully apart: of the 20 splits only the observed one and its mirror are as extreme.
    assert seeds.permutation_p([1.0, 2.0, 3.0], [7.0, 8.0, 9.0]) == pytest.approx(2 / 20)
    assert seeds.permutation_p([5.0, 5.0], [5.0, 5.0]) == 1.0  # no difference: every split ties it
    a, b = [90.0, 93.5, 97.0, 88.0], [95.0, 99.0, 96.5, 98.0]
    pooled = a + b
    observed = abs(sum(b) / 4 - sum(a) / 4)
    counted = [
        abs(sum(pooled[i] for i in range(8) if i not in chosen) / 4 - sum(pooled[i] for i in chosen) / 4)
        >= observed - 1e-9
        for chosen in combinations(range(8), 4)
    ]
    assert seeds.permutation_p(a, b) == pytest.approx(sum(counted) / len(counted))


def test_interval_holds_the_difference_and_shrinks_with_no_spread(seeds):
    low, high = seeds.bootstrap_interval([90.0, 94.0, 98.0], [95.0, 97.0, 99.0])
    assert low < 3.0 < high
    assert seeds.bootstrap_interval([90.0, 90.0], [93.0, 93.0]) == (3.0, 3.0)
    # 2.80 standard errors of the difference: variances 4/3 and 16/3 over 4 runs each -> sqrt(5/3).
    assert seeds.detectable([1.0, 3.0, 1.0, 3.0], [0.0, 4.0, 0.0, 4.0]) == pytest.approx(2.801585 * math.sqrt(5 / 3))


def test_main_reads_each_runs_last_evaluation_seed_and_curve(seeds, tmp_path, capsys):
    a = [
        make_run(tmp_path / "a", stamp=f"2026010{i}-000000", recipe={"seed": i}, after=acc)
        for i, acc in ((1, 0.9), (2, 0.8))
    ]
    b = [
        make_run(tmp_path / "b", stamp=f"2026010{i}-000000", recipe={"seed": i}, after=acc)
        for i, acc in ((1, 1.0), (2, 0.95))
    ]
    out = tmp_path / "out"
    assert seeds.main([*map(str, a), "7:85", "--vs", *map(str, b), "--labels", "old", "new", "--out", str(out)]) == 0
    saved = json.loads((out / "seeds.json").read_text())
    old, new = saved["sets"]["old"], saved["sets"]["new"]
    assert [(r["seed"], r["accuracy"]) for r in old] == [(1, 0.9), (2, 0.8), (7, 0.85)]
    assert [r["accuracy"] for r in new] == [1.0, 0.95]
    assert old[0]["evaluation"] == "after" and old[2]["curve"] == {}  # a recorded accuracy: no curve
    assert old[0]["curve"]["6"] == pytest.approx(0.9)  # the last GRPO step's correctness (JSON keys: text)
    points = saved["accuracy"]
    assert points["difference"] == pytest.approx(97.5 - 85.0)
    assert points["permutation_p"] == pytest.approx(seeds.permutation_p([90.0, 80.0, 85.0], [100.0, 95.0]))
    # make_run's correctness climbs to `after` over 6 steps: its mean is 3.5/6 of it; the recorded run has none.
    assert saved["training_correctness"]["mean_a"] == pytest.approx(100 * 3.5 / 6 * (0.9 + 0.8) / 2)
    assert (out / "seeds.png").stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "new - old: +12.5 points" in printed and "permutation p = " in printed


def test_errors_name_the_problem_before_any_work(seeds, tmp_path):
    run = make_run(tmp_path, after=0.9)
    with pytest.raises(SystemExit, match="not a grpokit run directory"):
        seeds.main([str(run), str(tmp_path), "--vs", str(run), str(run)])
    with pytest.raises(SystemExit, match="a percentage"):
        seeds.main([str(run), "150", "--vs", str(run), str(run)])
    started = make_run(tmp_path, stamp="20260102-000000", finished=False)
    with pytest.raises(SystemExit, match="no evaluation after training"):
        seeds.main([str(run), str(started), "--vs", str(run), str(run)])
    with pytest.raises(SystemExit):  # argparse: one run says nothing about a set's spread
        seeds.main([str(run), "--vs", str(run), str(run)])
