import json

import pytest

from grpokit.stages.health import HealthMonitor

HEALTHY = {
    "frac_reward_zero_std": 0.4,
    "rewards/format/mean": 0.9,
    "rewards/correctness/mean": 0.5,
    "completions/clipped_ratio": 0.05,
    "completions/mean_length": 40.0,
    "entropy": 0.6,
    "kl": 0.01,
}


def feed(monitor, steps):
    found = []
    for step, logs in enumerate(steps, start=1):
        found += monitor.observe(step, logs)
    return [w.condition for w in found]


def test_a_healthy_run_raises_nothing():
    assert feed(HealthMonitor(window=3), [HEALTHY] * 12) == []


@pytest.mark.parametrize(
    ("change", "condition", "words"),
    [
        ({"frac_reward_zero_std": 0.95, "rewards/correctness/mean": 0.0}, "no_signal", "too hard"),
        ({"frac_reward_zero_std": 1.0, "rewards/correctness/mean": 1.0}, "no_signal", "too easy"),
        ({"completions/clipped_ratio": 0.8}, "truncated", "max_completion_length"),
        ({"entropy": 0.01, "frac_reward_zero_std": 0.6}, "entropy_collapse", "temperature"),
        ({"kl": 2.0}, "kl_growth", "beta"),
        ({"rewards/my_reward/errors": 3}, "reward_errors:my_reward", "failed on 3"),
    ],
)
def test_each_condition_is_named_with_its_fix(change, condition, words, tmp_path):
    monitor = HealthMonitor(window=3, path=tmp_path / "warnings.jsonl")
    assert condition in feed(monitor, [{**HEALTHY, **change}] * 3)
    warning = next(w for w in monitor.warnings if w.condition == condition)
    assert words in warning.message
    saved = [json.loads(line) for line in (tmp_path / "warnings.jsonl").read_text().splitlines()]
    assert condition in {s["condition"] for s in saved}


def test_trends_format_up_correctness_flat_and_length():
    early = [HEALTHY] * 3
    late = [{**HEALTHY, "rewards/format/mean": 1.0, "rewards/correctness/mean": 0.505}] * 3
    start = [{**HEALTHY, "rewards/format/mean": 0.2}] * 3
    assert "format_not_correctness" in feed(HealthMonitor(window=3), start + late)
    assert "format_not_correctness" not in feed(HealthMonitor(window=3), early + late)
    shrinking = [HEALTHY] * 3 + [{**HEALTHY, "completions/mean_length": 8.0}] * 3
    assert "length_collapse" in feed(HealthMonitor(window=3), shrinking)
    growing = [HEALTHY] * 3 + [{**HEALTHY, "completions/mean_length": 120.0}] * 3
    assert "length_explosion" in feed(HealthMonitor(window=3, max_completion_length=128), growing)


def falling(correctness, reward):
    return [{**HEALTHY, "rewards/correctness/mean": c, "reward": r} for c, r in zip(correctness, reward, strict=True)]


def test_correctness_falling_while_the_reward_holds_is_reward_hacking():
    """The measured case: right answers 0.12 -> 0, the total reward held by format and partial credit."""
    monitor = HealthMonitor(window=3)
    steps = falling([0.12] * 3 + [0.05, 0.01, 0.0, 0.0], [0.68] * 3 + [0.66, 0.66, 0.67, 0.7])
    assert "correctness_falling" in feed(monitor, steps)
    warning = next(w for w in monitor.warnings if w.condition == "correctness_falling")
    assert "reward hacking" in warning.message and "from 0.12" in warning.message


def test_correctness_falling_with_the_reward_is_unlearning():
    monitor = HealthMonitor(window=3)
    assert "correctness_falling" in feed(monitor, falling([0.8] * 3 + [0.2] * 3, [1.6] * 3 + [0.9] * 3))
    assert "unlearning" in next(w for w in monitor.warnings if w.condition == "correctness_falling").message


@pytest.mark.parametrize(
    "correctness",
    [
        [0.3, 0.35, 0.3] + [0.15] * 6,  # a noisy flat run's best window against a later one: not a third
        [0.05] * 3 + [0.0] * 6,  # from nearly nothing: a fall of less than 0.1
        [0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 0.95, 0.95, 0.9],  # learning
    ],
)
def test_correctness_noise_or_rise_is_not_a_fall(correctness):
    assert "correctness_falling" not in feed(HealthMonitor(window=3), falling(correctness, [1.0] * len(correctness)))


def test_a_curriculum_level_up_starts_a_new_best():
    """Harder problems after a level change lower correctness by design: judged against the new level only."""
    steps = falling([0.9] * 4 + [0.2] * 6, [1.8] * 4 + [0.6] * 6)
    for i, step in enumerate(steps):
        step["curriculum/level"] = 0 if i < 4 else 1
    assert "correctness_falling" not in feed(HealthMonitor(window=3), steps)
    for step in steps:
        del step["curriculum/level"]
    assert "correctness_falling" in feed(HealthMonitor(window=3), steps)  # the same figures without a level


def test_low_entropy_while_groups_still_differ_is_not_a_collapse():
    # Template-heavy answers: 0.03 nats per token on average, yet most groups' rewards differ.
    assert feed(HealthMonitor(window=3), [{**HEALTHY, "entropy": 0.03, "frac_reward_zero_std": 0.2}] * 6) == []
    assert "entropy_collapse" in feed(
        HealthMonitor(window=3), [{**HEALTHY, "entropy": 0.03, "frac_reward_zero_std": 0.7}] * 6
    )


def test_agreeing_because_right_is_not_a_collapse():
    sure = {**HEALTHY, "entropy": 0.02, "frac_reward_zero_std": 0.7}
    assert "entropy_collapse" not in feed(HealthMonitor(window=3), [{**sure, "rewards/correctness/mean": 0.93}] * 6)
    assert "entropy_collapse" in feed(HealthMonitor(window=3), [{**sure, "rewards/correctness/mean": 0.6}] * 6)


def test_small_groups_agreeing_as_often_as_chance_is_not_a_collapse():
    # Groups of 4 at 85% success agree 52% of the time with every completion drawn independently.
    agree = {**HEALTHY, "entropy": 0.04, "frac_reward_zero_std": 0.55, "rewards/correctness/mean": 0.85}
    assert "entropy_collapse" not in feed(HealthMonitor(window=3, group_size=4), [agree] * 6)
    assert "entropy_collapse" in feed(HealthMonitor(window=3, group_size=8), [agree] * 6)  # chance: 27%
    # Far above chance, small groups still warn: 50% success, 12.5% chance agreement, 80% seen.
    stuck = {**agree, "frac_reward_zero_std": 0.8, "rewards/correctness/mean": 0.5}
    assert "entropy_collapse" in feed(HealthMonitor(window=3, group_size=4), [stuck] * 6)


def test_groups_agreeing_in_success_are_learning_and_in_failure_a_collapse():
    # Measured on the default task mid-run: entropy 0.02-0.05, 60-75% of groups of 4 identical, held-out
    # accuracy still rising; most of the identical groups were all right.
    learning = {
        **HEALTHY,
        "entropy": 0.03,
        "frac_reward_zero_std": 0.7,
        "rewards/correctness/mean": 0.75,
        "rewards/correctness/groups_all_fail": 0.08,
    }
    assert feed(HealthMonitor(window=3, group_size=4), [learning] * 6) == []
    # The stalled countdown run (16-18% held out at every evaluation): >= 69% of groups of 8 all wrong.
    stalled = {**learning, "frac_reward_zero_std": 0.97, "rewards/correctness/mean": 0.2}
    stalled["rewards/correctness/groups_all_fail"] = 0.75
    assert "entropy_collapse" in feed(HealthMonitor(window=3, group_size=8), [stalled] * 6)
    monitor = HealthMonitor(window=3, group_size=4)
    feed(monitor, [{**learning, "rewards/correctness/groups_all_fail": 0.4}] * 3)
    assert "40% of groups had every completion wrong" in monitor.warnings[0].message
    # All wrong as often as chance at that success rate: too hard (no_signal says so), not a collapse.
    hard = {**learning, "rewards/correctness/mean": 0.1, "rewards/correctness/groups_all_fail": 0.7}
    assert "entropy_collapse" not in feed(HealthMonitor(window=3, group_size=4), [hard] * 6)


def test_at_most_once_per_condition_per_window_then_a_short_note():
    bad = {**HEALTHY, "entropy": 0.0, "frac_reward_zero_std": 0.6}
    monitor = HealthMonitor(window=4)
    conditions = feed(monitor, [bad] * 12)
    assert conditions.count("entropy_collapse") == 3  # steps 4, 8 and 12
    first, *later = [w for w in monitor.warnings if w.condition == "entropy_collapse"]
    assert "Lower the learning rate" in first.message and not first.repeat
    assert [w.message for w in later] == ["still: entropy 0.000 nats per token"] * 2 and all(w.repeat for w in later)
