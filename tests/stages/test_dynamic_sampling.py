"""Dynamic sampling, curriculum and adaptive reward weights, in the trainer's own batch."""

import re

import pytest
import torch

from grpokit.recipe.load import build_recipe
from grpokit.recipe.schema import AdaptiveSection
from grpokit.stages.dynamic_sampling import (
    AdaptiveWeights,
    Curriculum,
    Replay,
    batch_rewards,
    extra_prompt_rows,
    failing_groups,
    fill_batch,
    group_advantages,
    informative_groups,
    max_variance_rows,
    uniform_groups,
)
from grpokit.tasks import build_task
from tests.conftest import tiny_recipe


def _batch(advantages, prompt_width, completion_width, pad=0):
    rows = len(advantages)
    return {
        "advantages": torch.tensor(advantages, dtype=torch.float32),
        "prompt_ids": torch.arange(rows * prompt_width).view(rows, prompt_width) + 1,
        "prompt_mask": torch.ones(rows, prompt_width, dtype=torch.long),
        "completion_ids": torch.arange(rows * completion_width).view(rows, completion_width) + 1,
        "completion_mask": torch.ones(rows, completion_width, dtype=torch.long),
        "num_items_in_batch": torch.tensor(rows * completion_width),
    }


def test_fill_batch_puts_informative_groups_first_and_pads_each_side():
    first = _batch([0, 0, 1, -1, 0, 0], prompt_width=3, completion_width=2)  # groups of 2: one informative
    extra = _batch([2, -2, 0, 0, 1, -1], prompt_width=4, completion_width=5)
    calls = []

    def more(n, wanted):
        calls.append((n, wanted))
        return [extra]

    merged, stats = fill_batch(first, more, group=2, max_extra_groups=3, pad_id=0)
    assert calls == [(3, 2)] and stats["dynamic/kept_frac"] == 1.0 and stats["dynamic/extra_rollouts"] == 6
    assert merged["advantages"].tolist() == [1, -1, 2, -2, 1, -1]
    assert merged["prompt_ids"].shape == (6, 4) and merged["completion_ids"].shape == (6, 5)
    assert merged["prompt_ids"][0].tolist() == [0, 7, 8, 9]  # left padding on the prompt side
    assert merged["completion_mask"][0].tolist() == [1, 1, 0, 0, 0]  # right padding on the completion side
    assert merged["num_items_in_batch"].item() == 2 * 2 + 4 * 5  # the loss normaliser of what trains


def test_fill_batch_stops_at_the_cap_and_fills_with_uniform_groups():
    first = _batch([0, 0, 0, 0, 1, -1], prompt_width=2, completion_width=2)
    merged, stats = fill_batch(first, lambda n, _: [_batch([0.0] * 2 * n, 2, 2)], group=2, max_extra_groups=2, pad_id=0)
    assert stats["dynamic/kept_frac"] == pytest.approx(1 / 3) and stats["dynamic/extra_rollouts"] == 4
    assert informative_groups(merged["advantages"], 2).tolist() == [True, False, False]


def test_fill_batch_counts_the_groups_each_round_returned():
    first = _batch([0, 0, 0, 0], prompt_width=2, completion_width=2)
    calls = []

    def more(n, wanted):  # a replay round may hold fewer prompts than asked for
        calls.append((n, wanted))
        return [_batch([1, -1], 2, 2)]

    merged, stats = fill_batch(first, more, group=2, max_extra_groups=3, pad_id=0)
    assert calls == [(2, 2), (2, 1)] and stats["dynamic/extra_rollouts"] == 4 and stats["dynamic/kept_frac"] == 1.0
    assert merged["advantages"].tolist() == [1, -1, 1, -1]


def test_failing_groups_are_uniform_groups_no_completion_of_which_succeeded():
    advantages = torch.tensor([0.0, 0, 0, 0, 0, 0, 1, -1])
    success = torch.tensor([0.0, 0, 1, 1, 0.5, float("nan"), 1, 0])
    # all wrong; all right (too easy); a verifier failure (not the policy's); informative
    assert failing_groups(advantages, success, 2).tolist() == [True, False, False, False]
    assert failing_groups(advantages, torch.tensor([0.0, 0, 1, 1, 0.5, 0.5, 1, 0]), 2).tolist()[2]  # 0.5: wrong


def _equal_by_rounding() -> torch.Tensor:
    """Eight equal rewards of 0.8333 (format 1 and `steps` 2/3, weights 0.5 each), summed in float32."""
    return (torch.tensor([[1.0, 2 / 3]] * 8) * 0.5).sum(dim=1)


def _trl_advantages(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """TRL's group-scaled advantages (sum_then_normalize), rounding and all."""
    from trl.trainer.utils import nanstd

    grouped = rewards.view(-1, group)
    centred = grouped - torch.nanmean(grouped, dim=1, keepdim=True)
    return torch.nan_to_num(centred / (nanstd(grouped, dim=1).unsqueeze(1) + 1e-4), nan=0.0).view(-1)


def test_equal_rewards_are_uniform_whatever_float_rounding_leaves_of_their_advantages():
    rewards = torch.cat([_equal_by_rounding(), torch.tensor([1.0, 0.0] * 4)])
    trl = _trl_advantages(rewards, 8)
    assert (trl[:8] != 0).all() and (trl[:8] < 0).all()  # the defect: a small push of one sign
    assert uniform_groups(rewards, 8).tolist() == [True, False]
    assert informative_groups(rewards.unsqueeze(1), 8).tolist() == [False, True]
    assert group_advantages(rewards, 8)[:8].tolist() == [0.0] * 8  # exactly zero, not -6e-4
    with_nan = torch.cat([_equal_by_rounding()[:7], torch.tensor([float("nan")])])  # an unscorable row
    assert uniform_groups(with_nan, 8).tolist() == [True]
    assert failing_groups(rewards, torch.zeros(16), 8).tolist() == [True, False]
    # Dynamic sampling counts the group as uniform: it draws more, and the informative draw replaces it.
    first = {**_batch(trl.tolist(), 2, 2), "rewards": rewards.unsqueeze(1)}
    extra = {**_batch([1.0, -1.0] * 4, 2, 2), "rewards": torch.tensor([[1.0], [0.0]] * 4)}
    calls = []
    merged, stats = fill_batch(first, lambda n, wanted: calls.append(wanted) or [extra], 8, 1, pad_id=0)
    assert calls == [1] and stats["dynamic/kept_frac"] == 1.0
    assert informative_groups(batch_rewards(merged), 8).all() and merged["rewards"].shape == (16, 1)


def test_replay_returns_the_newest_prompts_at_most_tries_times():
    r = Replay(tries=2, capacity=3)
    r.push([({"q": 1}, 0), ({"q": 2}, 0)])
    assert r.take(1) == [({"q": 2}, 1)]
    r.push([({"q": 2}, 1), ({"q": 3}, 2)])  # q 3 has been drawn again twice: out of tries
    assert r.take(5) == [({"q": 2}, 2), ({"q": 1}, 1)] and len(r) == 0
    r.load([[{"q": 4}, 1]])
    assert r.state() == [[{"q": 4}, 1]]
    with pytest.raises(ValueError, match="tries=0"):
        Replay(tries=0, capacity=1)


@pytest.mark.parametrize("seed", range(6))
def test_max_variance_rows_keeps_the_subset_whose_rewards_vary_most(seed):
    from itertools import combinations

    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 4, (3 * 7,), generator=gen).float() / 2  # ties, as rule-based rewards have
    rewards[torch.randperm(21, generator=gen)[:3]] = torch.nan  # a few unscorable rows
    mask = max_variance_rows(rewards, 7, 3)
    for start in range(0, 21, 7):
        values, kept = rewards[start : start + 7], mask[start : start + 7]
        assert int(kept.sum()) == 3 and not torch.isnan(values[kept]).any()  # 4+ rows scored in each group
        scored = values[~torch.isnan(values)].tolist()
        best = max(torch.tensor(c).var(unbiased=False).item() for c in combinations(scored, 3))
        assert values[kept].var(unbiased=False).item() == pytest.approx(best)
    uniform = max_variance_rows(torch.tensor([1.0, 1.0, 1.0, float("nan"), float("nan"), 0.0]), 3, 2)
    assert uniform.tolist() == [True, True, False, True, False, True]  # first rows; NaN only to make up the count


def test_group_advantages_are_trls_formula():
    rewards = torch.tensor([1.0, 0.0, 0.0, 3.0, float("nan"), 1.0, 2.0, 2.0])
    by_group = group_advantages(rewards, 4, "group")
    first = torch.tensor([1.0, 0.0, 0.0, 3.0])
    assert by_group[:4].tolist() == pytest.approx(((first - 1.0) / (first.std() + 1e-4)).tolist())
    std = (1 / 3) ** 0.5  # of [1, 2, 2], Bessel-corrected; the unscorable row left out and given 0
    assert by_group[4] == 0.0
    assert by_group[5:].tolist() == pytest.approx([x / (std + 1e-4) for x in (-2 / 3, 1 / 3, 1 / 3)])
    assert group_advantages(rewards, 4, "none")[:4].tolist() == [0.0, -1.0, -1.0, 2.0]
    with pytest.raises(ValueError, match="scale_rewards='mean'"):
        group_advantages(rewards, 4, "mean")


def test_curriculum_and_adaptive_weights_move_with_the_rolling_success_rate():
    c = Curriculum("max_value", [10, 20], threshold=0.6, window=2)
    assert [c.update(x) for x in (1.0, 0.0, 1.0, 1.0, 1.0)] == [0, 0, 0, 1, 1]
    w = AdaptiveWeights(
        {"format": AdaptiveSection(target=0.8, rate=0.5, min_weight=0.2, max_weight=1.0, window=1)},
        {"format": 1.0, "correctness": 1.0},
    )
    assert w.update({"format": 0.9, "correctness": 0.1}) == {"format": 0.5, "correctness": 1.0}
    assert w.update({"format": 0.9})["format"] == 0.25
    assert w.update({"format": 0.9})["format"] == 0.2  # never below min_weight
    assert w.update({"format": 0.1})["format"] == pytest.approx(0.3)  # grows back when the skill slips


def _trainer(tiny_model_dir, tmp_path, rewards, drawn=4, **sections):
    from grpokit.models.load import load_model
    from grpokit.runs.checkpoints import StopOnSignal
    from grpokit.stages import pipeline as train
    from grpokit.stages.callbacks import MetricsLog
    from grpokit.stages.grpo import build_trainer

    raw = tiny_recipe(tiny_model_dir, tmp_path, rewards=rewards, **sections)
    raw["grpo"].update({"per_device_train_batch_size": 4 * drawn, "num_generations": drawn})  # 4 groups of `drawn`
    recipe = build_recipe(raw)
    model, tokenizer = load_model(recipe.model.name)
    model = train.attach_lora(model, recipe)
    trainer = build_trainer(
        "grpo", model, tokenizer, recipe, tmp_path, [], MetricsLog(tmp_path / "m.jsonl"), StopOnSignal()
    )
    trainer.skip_zero_advantage = False  # look at the whole batch
    trainer.record_prompts = True
    return trainer


def parity(task):
    """Even answers: every completion scores 1 (a group that teaches nothing); odd: by length."""
    return lambda completion, example: 1.0 if example["answer"] % 2 == 0 else float(len(completion) % 3)


def always_right(task):
    return lambda completion, example: 1.0


@pytest.mark.parametrize("dynamic", [True, False])
def test_dynamic_sampling_fills_the_batch_with_groups_that_teach(tiny_model_dir, tmp_path, dynamic):
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        [{"name": "tests.stages.test_dynamic_sampling.parity"}],
        dynamic_sampling={"enabled": dynamic, "max_extra": 3.0},
    )
    inputs = next(iter(trainer.get_train_dataloader()))
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(inputs)
    useful = informative_groups(batch["advantages"], 4)
    assert len(useful) == 4
    if dynamic:
        assert useful.all()
        assert trainer._metrics["train"]["dynamic/kept_frac"] == [1.0]
        assert batch["num_items_in_batch"].item() == batch["completion_mask"].sum().item()
    else:
        assert not useful.all()  # the control: uniform groups stay in the batch


PARITY = "tests.stages.test_dynamic_sampling.parity"


@pytest.mark.parametrize(
    "sampling",
    [
        {},
        {"enabled": True, "max_extra": 1.0},
        {"enabled": True, "max_extra": 1.0, "upfront": True, "retry": 1, "success_reward": PARITY},
    ],
    ids=["alone", "dynamic", "upfront-retry"],
)
def test_downsampling_trains_the_rows_of_each_group_whose_rewards_vary_most(tiny_model_dir, tmp_path, sampling):
    from itertools import combinations

    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        [{"name": PARITY}],  # rewards 0, 1, 2 by length; even answers 1 for all
        drawn=8,
        dynamic_sampling={**sampling, "downsample_to": 4},
    )
    scored, downsample = [], trainer._downsample

    def spy(batch):
        out = downsample(batch)
        scored.append((batch, trainer._row_rewards.clone(), out))
        return out

    trainer._downsample = spy
    inputs = next(b for b in trainer.get_train_dataloader() if any(r["answer"] % 2 for r in b))
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(inputs)
    assert batch["advantages"].numel() == 16  # 4 groups of 4 of the 8 drawn per prompt
    assert batch["num_items_in_batch"].item() == batch["completion_mask"].sum().item()
    drawn, rewards, kept = scored[0]
    # TRL's advantages over the 8 rows drawn, and the formula down-sampling applies to the rows it keeps.
    assert group_advantages(rewards, 8).tolist() == pytest.approx(drawn["advantages"].tolist(), abs=1e-5)
    for g in range(4):
        rows = drawn["completion_ids"][8 * g : 8 * g + 8].tolist()
        picked = [rows.index(r) for r in kept["completion_ids"][4 * g : 4 * g + 4].tolist()]
        values = rewards[8 * g : 8 * g + 8]
        best = max(torch.tensor(c).var(unbiased=False).item() for c in combinations(values.tolist(), 4))
        assert values[picked].var(unbiased=False).item() == pytest.approx(best)
        expected = group_advantages(values[picked], 4)
        assert kept["advantages"][4 * g : 4 * g + 4].tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    metrics = trainer._metrics["train"]
    assert metrics["downsample/reward_std_kept"][0] >= metrics["downsample/reward_std_drawn"][0] > 0
    if sampling:  # groups of 4 counted as groups; the extra rollouts in rows drawn (8 per prompt)
        assert informative_groups(batch["advantages"], 4).all()
        assert metrics["dynamic/extra_rollouts"][0] % 8 == 0 and metrics["dynamic/extra_rollouts"][0] > 0


def test_a_downsampled_run_trains_its_kept_rows_in_micro_batches(tiny_model_dir, tmp_path):
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        [{"name": PARITY}],
        drawn=8,
        dynamic_sampling={"enabled": True, "max_extra": 1.0, "downsample_to": 4},
        train_pass={"micro_batch_rows": 4},  # one kept group per micro-batch
    )
    trainer.skip_zero_advantage = True  # as a run trains
    lora = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert any(not torch.equal(p, dict(trainer.model.named_parameters())[n]) for n, p in lora.items())
    logged = trainer.state.log_history[0]
    assert logged["downsample/reward_std_kept"] >= logged["downsample/reward_std_drawn"]


@pytest.mark.parametrize("upfront", [True, False])
def test_upfront_rolls_the_batch_and_its_extra_round_out_together(tiny_model_dir, tmp_path, upfront):
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        [{"name": "tests.stages.test_dynamic_sampling.parity"}],
        dynamic_sampling={"enabled": True, "max_extra": 1.0, "upfront": upfront},
    )
    rollouts = []
    generate = trainer._generate

    def spy(prompts, *args, **kwargs):
        rollouts.append(len(prompts))
        return generate(prompts, *args, **kwargs)

    trainer._generate = spy
    inputs = next(b for b in trainer.get_train_dataloader() if any(r["answer"] % 2 == 0 for r in b))
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(inputs)
    # One rollout of the batch's 4 groups and the extra round's 4 (upfront), else two rounds of 4 groups.
    assert rollouts == ([32] if upfront else [16, 16])
    # The same prompts either way: the extra round's, drawn with its own seed after the batch's.
    extra = extra_prompt_rows(trainer.train_dataset, 4, 4, f"dynamic:{trainer.args.seed}:0:1")
    assert trainer.prompts_seen[16::4] == [str(r["prompt"]) for r in extra[::4]]
    useful = informative_groups(batch["advantages"], 4)
    assert len(useful) == 4 and batch["num_items_in_batch"].item() == batch["completion_mask"].sum().item()
    kept = trainer._metrics["train"]["dynamic/kept_frac"][-1]
    assert kept == useful.float().mean().item() and trainer._metrics["train"]["dynamic/extra_rollouts"] == [16.0]


def test_upfront_with_retry_retries_the_failed_prompts_of_both_after_one_rollout(tiny_model_dir, tmp_path, monkeypatch):
    import grpokit.stages.trainer

    # every group uniform: even answers fail, odd ones succeed
    name = "tests.stages.test_dynamic_sampling.wrong_on_even"
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        [{"name": name}],
        dynamic_sampling={"enabled": True, "max_extra": 1.0, "upfront": True, "retry": 1, "success_reward": name},
    )
    sampled, real = [], grpokit.stages.trainer.sample

    def sample(model, prompts, *args, **kwargs):  # rows per call of grpokit's sampler
        sampled.append(len(prompts))
        return real(model, prompts, *args, **kwargs)

    monkeypatch.setattr(grpokit.stages.trainer, "sample", sample)
    inputs = next(b for b in trainer.get_train_dataloader() if any(r["answer"] % 2 == 0 for r in b))
    extra = extra_prompt_rows(trainer.train_dataset, 4, 4, f"dynamic:{trainer.args.seed}:0:1")
    failed = [str(r["prompt"]) for r in (inputs + extra)[::4] if r["answer"] % 2 == 0][:4]
    torch.manual_seed(0)
    trainer._generate_and_score_completions(inputs)
    # The batch and the upfront round in one rollout; then the failed prompts of both, on the retries'
    # allowance (one batch's worth of groups), no new prompt beyond the upfront round.
    assert sampled == [32, 4 * len(failed)]
    assert trainer.prompts_seen[32::4] == failed
    metrics = trainer._metrics["train"]
    assert metrics["dynamic/retried"] == [float(len(failed))]
    assert metrics["dynamic/extra_rollouts"] == [16.0 + 4 * len(failed)]


def format_one(task):
    return lambda completion, example: 1.0


def two_thirds_on_even(task):
    """Even answers: 2/3 for every completion (with format_one at weights 0.5: 0.8333 each); odd: by length."""
    return lambda completion, example: 2 / 3 if example["answer"] % 2 == 0 else float(len(completion))


def test_a_group_of_equal_rewards_gets_zero_advantage_is_skipped_and_counted_as_no_signal(tiny_model_dir, tmp_path):
    """Rewards 0.8333 in every row of a group of 8: TRL's float rounding gives each row -6e-4. The group must
    have exactly zero advantage, be left out of the training pass, and count in frac_reward_zero_std."""
    rewards = [
        {"name": "tests.stages.test_dynamic_sampling.format_one", "weight": 0.5},
        {"name": "tests.stages.test_dynamic_sampling.two_thirds_on_even", "weight": 0.5},
    ]
    trainer = _trainer(tiny_model_dir, tmp_path, rewards, drawn=8)
    trainer.skip_zero_advantage = True  # as a run trains
    trainer.model.train()
    inputs = next(b for b in trainer.get_train_dataloader() if 0 < sum(r["answer"] % 2 == 0 for r in b[::8]) < 4)
    even = torch.tensor([r["answer"] % 2 == 0 for r in inputs[::8]])  # [4 groups]
    torch.manual_seed(0)
    scored = trainer._score(inputs)
    rows = even.repeat_interleave(8)
    assert scored["advantages"][rows].tolist() == [0.0] * int(rows.sum())
    assert (scored["advantages"][~rows] != 0).any()
    assert trainer._metrics["train"]["frac_reward_zero_std"][-1] == even.float().mean().item()
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(inputs)
    assert batch["advantages"].numel() == 8 * int((~even).sum())  # the uniform groups' rows were not kept
    assert trainer._metrics["train"]["rows_trained_frac"][-1] == (~even).float().mean().item()


def test_replay_draws_last_steps_informative_prompts_first_and_logs_them_apart(tiny_model_dir, tmp_path):
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        [{"name": "tests.stages.test_dynamic_sampling.parity"}],
        dynamic_sampling={"enabled": True, "max_extra": 3.0, "replay": 1},
    )
    batches = [b for b in trainer.get_train_dataloader() if any(r["answer"] % 2 == 0 for r in b)]
    torch.manual_seed(0)
    trainer._generate_and_score_completions(batches[0])
    queued = [str(row["prompt"]) for row, _ in reversed(trainer.replay.queue)]  # newest first
    assert queued and all(t == 0 for _, t in trainer.replay.queue)
    metrics = trainer._metrics["train"]
    uniform_rounds = len(metrics["frac_reward_zero_std"])
    seen = len(trainer.prompts_seen)
    trainer.state.global_step = 1
    trainer._generate_and_score_completions(batches[1])  # has a prompt with an even answer: a uniform group
    extra = trainer.prompts_seen[seen + 16 :: 4]  # one prompt per group after the step's own 4 groups
    replayed = int(metrics["dynamic/replayed"][-1])
    assert replayed == min(4, len(queued)) and extra[:replayed] == queued[:replayed]
    # Replayed groups' figures go under replay/; the run's own stay those of uniformly drawn prompts.
    assert (
        len(metrics["replay/frac_reward_zero_std"]) == 1
        and len(metrics["replay/rewards/tests.stages.test_dynamic_sampling.parity/mean"]) == 1
    )
    later_uniform = len(trainer.prompts_seen[seen + 16 + 4 * replayed :]) // 16  # 4-group uniform rounds
    assert len(metrics["frac_reward_zero_std"]) == uniform_rounds + 1 + later_uniform
    assert 0 <= metrics["dynamic/replayed_informative_frac"][-1] <= 1
    state = trainer._schedule_state()
    assert [[str(row["prompt"]), t] for row, t in state["replay"]] == [
        [str(row["prompt"]), t] for row, t in trainer.replay.queue
    ]


def wrong_on_even(task):
    """Even answers: every completion wrong (a group that fails); odd: every completion right."""
    return lambda completion, example: float(example["answer"] % 2)


@pytest.mark.parametrize("retry", [2, 0])
def test_retry_rolls_the_steps_failed_prompts_out_again_first_at_most_retry_times(tiny_model_dir, tmp_path, retry):
    name = "tests.stages.test_dynamic_sampling.wrong_on_even"
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        [{"name": name}],
        dynamic_sampling={"enabled": True, "max_extra": 3.0, "retry": retry, "success_reward": name},
    )
    inputs = next(b for b in trainer.get_train_dataloader() if any(r["answer"] % 2 == 0 for r in b))
    failed = [str(r["prompt"]) for r in inputs[::4] if r["answer"] % 2 == 0]
    aside, retried, rounds = trainer._score_aside, [], []

    def spy(rows, prefix):  # the groups rolled out as retries, one prompt each
        retried.extend((str(r["prompt"]), r["answer"]) for r in rows[::4] if prefix == "retry/")
        rounds.append(prefix)
        return aside(rows, prefix)

    trainer._score_aside = spy
    torch.manual_seed(0)
    trainer._generate_and_score_completions(inputs)
    extra = trainer.prompts_seen[16::4]  # one prompt per group after the step's own 4 groups
    metrics = trainer._metrics["train"]
    assert len(extra) == 12  # no group teaches: the whole budget (3 batches of 4 groups) is spent
    if retry:
        # Each failed prompt comes back `retry` times, before any new prompt; new prompts that fail follow.
        assert extra[: retry * len(failed)] == failed * retry
        assert [p for p, _ in retried[: retry * len(failed)]] == failed * retry
        assert len(retried) > retry * len(failed) and all(answer % 2 == 0 for _, answer in retried)
        assert metrics["dynamic/retried"] == [float(len(retried))]
        assert metrics["dynamic/retried_informative_frac"] == [0.0]
        # Retried groups' figures go under retry/; the run's own stay those of groups drawn as new.
        assert len(metrics["retry/frac_reward_zero_std"]) == len(rounds) == rounds.count("retry/") >= retry
        assert len(metrics["frac_reward_zero_std"]) >= 2  # the step's own groups, then new prompts
    else:
        assert not retried and extra[: len(failed)] != failed and "dynamic/retried" not in metrics


@pytest.mark.parametrize("guide", [True, False])
def test_guide_puts_the_demonstration_into_a_failed_prompts_last_retry(tiny_model_dir, tmp_path, guide):
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        [{"name": "correctness"}],  # the random model is never right; the demonstration always is
        dynamic_sampling={"enabled": True, "max_extra": 1.0, "retry": 1, "guide": guide},
        grpo={"max_completion_length": 48},  # room for a whole demonstration
    )
    task, aside, retried = build_task("arithmetic"), trainer._score_aside, []

    def spy(rows, prefix):
        scored = aside(rows, prefix)
        texts = trainer.processing_class.batch_decode(scored["completion_ids"], skip_special_tokens=True)
        retried.extend(zip(rows[::4], texts[::4], scored["advantages"][::4].tolist(), strict=True))
        return scored

    trainer._score_aside = spy
    inputs = next(iter(trainer.get_train_dataloader()))
    torch.manual_seed(0)
    trainer._generate_and_score_completions(inputs)
    metrics = trainer._metrics["train"]
    assert len(retried) == 4  # every group of the step failed, and came back once (one batch's extra budget)
    if guide:
        for row, text, advantage in retried:
            # The group's first row is the task's demonstration (after the prefilled <think>, if any), the
            # only right completion of its group, so the group teaches towards it.
            assert text.strip() in task.demonstration(row) and task.score(text, row) == 1.0 and advantage > 0
        assert metrics["dynamic/guided"] == [4.0] and metrics["dynamic/retried_informative_frac"] == [1.0]
    else:
        assert all(task.score(text, row) == 0.0 for row, text, _ in retried) and "dynamic/guided" not in metrics
        assert metrics["dynamic/retried_informative_frac"] == [0.0]


@pytest.mark.parametrize("guide", [True, False])
def test_a_last_retry_round_with_room_is_rolled_out_with_the_new_prompts_after_it(
    tiny_model_dir, tmp_path, monkeypatch, guide
):
    import grpokit.stages.trainer

    # every group uniform: even answers fail, odd ones succeed
    name = "tests.stages.test_dynamic_sampling.wrong_on_even"
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        [{"name": name}],
        dynamic_sampling={"enabled": True, "max_extra": 1.0, "retry": 1, "success_reward": name, "guide": guide},
        grpo={"max_completion_length": 48},  # room for a whole demonstration
    )
    sampled, real = [], grpokit.stages.trainer.sample

    def sample(model, prompts, *args, **kwargs):  # rows per call of grpokit's sampler
        sampled.append(len(prompts))
        return real(model, prompts, *args, **kwargs)

    monkeypatch.setattr(grpokit.stages.trainer, "sample", sample)
    aside, retried = trainer._score_aside, []

    def spy(rows, prefix):
        scored = aside(rows, prefix)
        retried.extend(trainer.processing_class.batch_decode(scored["completion_ids"], skip_special_tokens=True))
        return scored

    trainer._score_aside = spy
    inputs = next(b for b in trainer.get_train_dataloader() if 0 < sum(r["answer"] % 2 == 0 for r in b[::4]) < 4)
    failed = [r for r in inputs[::4] if r["answer"] % 2 == 0]
    torch.manual_seed(0)
    trainer._generate_and_score_completions(inputs)
    # The batch, then one rollout for the failed prompts' retries and the new prompts filling the round.
    assert sampled == [16, 16]
    new = extra_prompt_rows(trainer.train_dataset, 4 - len(failed), 4, f"dynamic:{trainer.args.seed}:0:1")
    assert trainer.prompts_seen[16::4] == [str(r["prompt"]) for r in failed + new[::4]]
    # Each part scored on its own: the retries' figures under retry/, the new prompts' with the run's own.
    metrics = trainer._metrics["train"]
    assert len(metrics["retry/frac_reward_zero_std"]) == 1 and len(metrics["frac_reward_zero_std"]) == 2
    assert metrics["dynamic/retried"] == [float(len(failed))] and metrics["dynamic/extra_rollouts"] == [16.0]
    # Guidance lands on each retried group's first row, inside the rollout shared with the new prompts.
    task = build_task("arithmetic")
    guided = [text.strip() in task.demonstration(row) for row, text in zip(failed, retried[::4], strict=True)]
    assert all(guided) if guide else not any(guided)


@pytest.mark.parametrize("curriculum", [True, False])
def test_curriculum_moves_to_harder_prompts_once_the_success_rate_is_reached(tiny_model_dir, tmp_path, curriculum):
    section = {
        "param": "max_value",
        "levels": [9, 500],
        "threshold": 0.9,
        "window": 1,
        "reward": "tests.stages.test_dynamic_sampling.always_right",
    }
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        [{"name": "tests.stages.test_dynamic_sampling.always_right"}],
        **({"curriculum": section} if curriculum else {}),
    )
    loader = iter(trainer.get_train_dataloader())
    for _ in range(2):
        trainer._generate_and_score_completions(next(loader))
    first, second = trainer.prompts_seen[:16], trainer.prompts_seen[16:]

    def largest(prompts):
        return max(
            int(n)
            for p in prompts
            for n in re.findall(r"What is ([0-9 +*]+)\?", p)[0].replace("+", " ").replace("*", " ").split()
        )

    assert largest(first) <= (9 if curriculum else 10)  # level 0 (max_value 9), or the task's own 10
    if curriculum:
        assert largest(second) > 9 and trainer._metrics["train"]["curriculum/level"] == [1.0, 1.0]
    else:
        assert largest(second) <= 10


def test_adaptive_weights_change_the_advantages_weights_and_are_logged(tiny_model_dir, tmp_path):
    rewards = [
        {
            "name": "tests.stages.test_dynamic_sampling.always_right",
            "weight": 1.0,
            "adaptive": {"target": 0.5, "rate": 0.5, "min_weight": 0.1, "max_weight": 1.0, "window": 1},
        },
        {"name": "format", "weight": 0.5},
    ]
    trainer = _trainer(tiny_model_dir, tmp_path, rewards)
    trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    assert trainer.reward_weights.tolist() == [0.5, 0.5]
    assert trainer._metrics["train"]["weights/tests.stages.test_dynamic_sampling.always_right"] == [0.5]
    # Each reward's share of groups with no completion above 0: none for the always-right reward, every
    # group for the format reward (a random model never writes the tags).
    assert trainer._metrics["train"]["rewards/tests.stages.test_dynamic_sampling.always_right/groups_all_fail"] == [0.0]
    assert trainer._metrics["train"]["rewards/format/groups_all_fail"] == [1.0]
    state = trainer._schedule_state()
    assert state["adaptive"]["weights"]["tests.stages.test_dynamic_sampling.always_right"] == 0.5
