"""A reward that fails on a sample leaves that sample out of its group's statistics (recipe default); a
timeout the completion caused scores it 0, a wrong answer; no thread outlives the call it ran."""

import threading
import time

import pytest
import torch

from grpokit.recipe.load import build_recipe
from grpokit.recipe.trl_args import build_grpo_config
from grpokit.rewards import to_trl
from tests.conftest import tiny_recipe


def settled(before, seconds=10.0):
    """The threads alive now, once those started since `before` had `seconds` to end."""
    end = time.monotonic() + seconds
    while set(threading.enumerate()) - before and time.monotonic() < end:
        time.sleep(0.01)
    return set(threading.enumerate())


@pytest.fixture(autouse=True)
def no_call_left_overrunning():
    """Each test leaves no abandoned reward call running: one would make the next test's timeouts a failure."""
    yield
    end = time.monotonic() + 10
    while any(t.name == "grpokit-reward" for t in threading.enumerate()) and time.monotonic() < end:
        time.sleep(0.01)


def fails_first_of_each_group():
    calls = {"n": 0}

    def verifier(completion, example):  # fails on the first completion of every group of 4
        calls["n"] += 1
        if calls["n"] % 4 == 1:
            raise TimeoutError("verifier timed out")  # its own (a network timeout): a failure
        return 1.0

    return verifier


def _scored_batch(tiny_model_dir, tmp_path, on_error, verifier=None, timeout=10.0):
    from grpokit.models.load import load_model
    from grpokit.stages import pipeline as train
    from grpokit.stages.trainer import GrpoOptions, GrpoTrainer
    from grpokit.tasks import build_task

    verifier = verifier or fails_first_of_each_group()

    def length(prompts, completions, **kw):
        return [float(len(c) % 5) for c in completions]

    raw = tiny_recipe(tiny_model_dir, tmp_path, rewards=[{"name": "format"}, {"name": "correctness"}])
    recipe = build_recipe(raw)
    model, tokenizer = load_model(recipe.model.name)
    trainer = GrpoTrainer(
        model=model,
        reward_funcs=[to_trl("verifier", verifier, timeout=timeout, on_error=on_error), length],
        processing_class=tokenizer,
        args=build_grpo_config(recipe, tmp_path / "g"),
        train_dataset=train.build_train_dataset(build_task("arithmetic"), tokenizer, recipe),
        options=GrpoOptions(skip_zero_advantage=False),
    )
    inputs = next(iter(trainer.get_train_dataloader()))
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(inputs)
    texts = tokenizer.batch_decode(batch["completion_ids"] * batch["completion_mask"], skip_special_tokens=True)
    return batch["advantages"], torch.tensor([float(len(t) % 5) for t in texts])


def test_a_failed_sample_is_left_out_of_its_group(tiny_model_dir, tmp_path):
    advantages, length = _scored_batch(tiny_model_dir, tmp_path, "exclude")
    groups, lengths = advantages.view(-1, 4), length.view(-1, 4)
    assert torch.all(groups[:, 0] == 0)  # the failed samples teach nothing either way
    for adv, rewards in zip(groups, lengths, strict=True):
        scored = rewards[1:] + 1.0  # the verifier's 1.0 plus the length reward, weights 1 and 1
        expected = (scored - scored.mean()) / (scored.std() + 1e-4)
        torch.testing.assert_close(adv[1:], expected, rtol=1e-3, atol=1e-3)


def test_on_error_zero_scores_the_failed_sample_zero(tiny_model_dir, tmp_path):
    advantages, length = _scored_batch(tiny_model_dir, tmp_path, "zero")
    for adv, rewards in zip(advantages.view(-1, 4), length.view(-1, 4), strict=True):
        scored = rewards + torch.tensor([0.0, 1.0, 1.0, 1.0])
        expected = (scored - scored.mean()) / (scored.std() + 1e-4)
        torch.testing.assert_close(adv, expected, rtol=1e-3, atol=1e-3)


def test_a_timeout_is_a_wrong_answer_and_a_crash_is_left_out(tiny_model_dir, tmp_path):
    release, calls = threading.Event(), {"n": 0}

    def verifier(completion, example):
        calls["n"] += 1
        if calls["n"] == 1:  # the first group's first completion stalls its verifier (3**(999*999*999))
            release.wait(30)
        if calls["n"] == 6:  # the second group's second: the scoring machinery breaks
            raise RuntimeError("the sandbox worker died")
        return 1.0

    try:
        advantages, length = _scored_batch(tiny_model_dir, tmp_path, "exclude", verifier, timeout=0.2)
    finally:
        release.set()
    groups, lengths = advantages.view(-1, 4), length.view(-1, 4)
    # The stalled completion is scored 0 beside three 1.0s: an honest wrong answer's advantage, not 0.
    scored = lengths[0] + torch.tensor([0.0, 1.0, 1.0, 1.0])
    torch.testing.assert_close(groups[0], (scored - scored.mean()) / (scored.std() + 1e-4), rtol=1e-3, atol=1e-3)
    # The crashed one is left out of its group: advantage 0, the others normalised without it.
    assert groups[1, 1] == 0
    scored = lengths[1, [0, 2, 3]] + 1.0
    expected = (scored - scored.mean()) / (scored.std() + 1e-4)
    torch.testing.assert_close(groups[1, [0, 2, 3]], expected, rtol=1e-3, atol=1e-3)


def stall_or_crash(completion, example):
    from grpokit.errors import SandboxError, SandboxTimeout

    if completion == "stalls":  # a pure reward stuck on this text until its deadline
        time.sleep(0.5)
    if completion == "sandbox timeout":  # the sandbox killed this completion's check at its timeout
        raise SandboxTimeout("grpokit.sandbox.scorers:math_equal ran past 10 s; its process was killed")
    if completion == "sandbox died":
        raise SandboxError("grpokit.sandbox.scorers:math_equal: sandbox worker failed (exit code -9)")
    if completion == "crash":
        raise ZeroDivisionError("a scorer bug")
    return 1.0


COMPLETIONS = ["ok", "stalls", "sandbox timeout", "sandbox died", "crash"]


@pytest.mark.parametrize(
    ("on_error", "expected"), [("exclude", [1.0, 0.0, 0.0, None, None]), ("zero", [1.0, 0.0, 0.0, 0.0, 0.0])]
)
def test_timeouts_score_zero_and_machinery_failures_follow_on_error(on_error, expected):
    trl_reward = to_trl("verifier", stall_or_crash, timeout=0.2, on_error=on_error)
    assert trl_reward([""] * 5, COMPLETIONS) == expected
    assert trl_reward.errors == 4


def test_a_timeout_while_an_earlier_call_still_overruns_is_not_laid_on_its_completion():
    """The first stall is the completion's (0); the second starts while the first still runs, which may hold
    what it needs (the sandbox, the CPU): a failure, left out."""
    release = threading.Event()

    def stalls(completion, example):
        release.wait(30)
        return 1.0

    trl_reward = to_trl("verifier", stalls, timeout=0.1)
    try:
        assert trl_reward([""] * 2, ["first", "second"]) == [0.0, None]
    finally:
        release.set()


def test_a_check_the_sandbox_kills_scores_zero_and_a_dead_check_is_left_out():
    """The real sandbox: a check that runs to its timeout (the reward's own deadline the same, as in the
    default recipe) is a wrong answer; one that raises or whose process dies is left out."""
    from grpokit.sandbox.client import Sandbox

    with Sandbox(preload=()) as box:

        def verifier(completion, example):
            if completion == "stalls":
                return box.score("time:sleep", 30, timeout=0.5)
            if completion == "raises":
                return box.score("operator:truediv", 1, 0, timeout=0.5)
            return box.score("builtins:abs", -1, timeout=0.5)

        for deadline in (0.5, 5.0):  # the sandbox's timeout or the reward's own fires first
            trl_reward = to_trl("verifier", verifier, timeout=deadline)
            assert trl_reward([""] * 3, ["stalls", "ok", "raises"]) == [0.0, 1.0, None], deadline


def adapter(reward):  # training's wrapper, called on one completion
    trl_reward = to_trl("verifier", reward, timeout=0.1)
    return lambda text: trl_reward([""], [text])[0]


def guarded(reward):  # evaluation's and the report's
    from grpokit.rewards.guarded import Guarded

    return lambda text: Guarded("verifier", reward, timeout=0.1)(text, {})


@pytest.mark.parametrize("wrap", [adapter, guarded])
def test_no_thread_outlives_the_call_it_ran(wrap):
    release = threading.Event()

    def stalls(completion, example):
        if completion == "stalls":
            release.wait(30)
        return 1.0

    before = set(threading.enumerate())
    score = wrap(stalls)
    score("stalls")  # times out (what it scores: the tests above)
    release.set()  # the stalled call returns: its thread ends with it
    assert settled(before) <= before
    assert score("ok") == 1.0  # a call that returns in time leaves none either
    assert settled(before) <= before
