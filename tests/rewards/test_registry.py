import pytest

from grpokit.errors import RecipeError
from grpokit.rewards import REWARDS, make_reward, register_reward, to_trl
from grpokit.tasks import build_task

GOOD = "<think>4 * 5 = 20. 3 + 20 = 23.</think><answer>23</answer>"


def test_correctness_delegates_to_task_score():
    task = build_task("arithmetic")
    reward = make_reward("correctness", task)
    for row in task.dataset("test", 20):
        demo = task.demonstration(row)
        assert reward(demo, row) == task.score(demo, row) == 1.0
        assert reward(demo.replace(f"<answer>{row['answer']}<", f"<answer>{row['answer'] + 1}<"), row) == 0.0


def test_to_trl_batch_signature_and_name():
    task = build_task("arithmetic")
    trl_reward = to_trl("correctness", make_reward("correctness", task))
    assert trl_reward.__name__ == "correctness"  # TRL logs rewards/correctness/mean
    out = trl_reward(
        prompts=["p", "p"],
        completions=[GOOD, "<think>x</think><answer>1</answer>"],
        answer=[23, 23],
        question=["q", "q"],
        trainer_state=object(),
    )
    assert out == [1.0, 0.0]


def test_to_trl_accepts_conversational_completions():
    trl_reward = to_trl("format", make_reward("format", None))
    assert trl_reward(prompts=[[]], completions=[[{"role": "assistant", "content": GOOD}]]) == [1.0]


def test_prefilled_think_does_not_zero_the_format_reward():
    completion = GOOD.removeprefix("<think>")  # the chat template wrote "<think>" itself
    assert to_trl("format", make_reward("format", None), think_prefilled=False)([""], [completion]) == [0.0]
    assert to_trl("format", make_reward("format", None), think_prefilled=True)([""], [completion]) == [1.0]


def test_unknown_reward_lists_known_names():
    with pytest.raises(RecipeError, match=r"unknown reward 'formt'; known: closeness, correctness, format"):
        make_reward("formt", None)


def test_duplicate_registration_raises():
    with pytest.raises(ValueError, match="registered twice"):
        register_reward("format")(lambda task: None)
    assert "format" in REWARDS


def test_dotted_path_escape_hatch():
    reward = make_reward("grpokit.rewards.formats.make_format", None)
    assert reward(GOOD, {}) == 1.0


def test_bad_params_name_the_reward():
    with pytest.raises(RecipeError, match="bad params for reward 'format'"):
        make_reward("format", None, {"nope": 1})


def test_a_failing_reward_scores_zero_and_is_counted(tmp_path):
    def flaky(completion, example):
        if "boom" in completion:
            raise RuntimeError("verifier crashed")
        return float("inf") if "inf" in completion else 1.0

    log = tmp_path / "reward_errors.jsonl"
    trl_reward = to_trl("flaky", flaky, error_log=log)
    # A failure is not a wrong answer: None leaves the sample out of its group's statistics.
    assert trl_reward([""] * 4, ["ok", "boom", "inf", "boom again"]) == [1.0, None, None, None]
    assert trl_reward.errors == 3
    (entry,) = [line for line in log.read_text().splitlines()]  # one example per reward, not one per failure
    assert "RuntimeError: verifier crashed" in entry and '"completion": "boom"' in entry
    zero = to_trl("flaky", flaky, on_error="zero")  # the recipe's choice: a failure scores 0
    assert zero([""] * 3, ["ok", "boom", "inf"]) == [1.0, 0.0, 0.0] and zero.errors == 2
    with pytest.raises(ValueError, match="on_error"):
        to_trl("flaky", flaky, on_error="skip")


def test_a_hanging_reward_is_cut_off_and_the_next_sample_is_scored():
    import threading

    release = threading.Event()

    def sometimes_hangs(completion, example):
        if completion == "hang":
            release.wait(30)  # a verifier stuck on one pathological input
        return 1.0

    trl_reward = to_trl("slow", sometimes_hangs, timeout=0.2)
    # Had the adapter waited for the stuck call, it would have scored 1.0 (after 30 s). The stall is the
    # completion's doing, so it is a wrong answer (0), not a failure left out of its group (issue 52 item 7).
    assert trl_reward([""] * 3, ["ok", "hang", "ok"]) == [1.0, 0.0, 1.0]
    assert trl_reward.errors == 1
    release.set()


def test_prefilled_thought_is_restored_in_the_recipes_tag():
    from grpokit.tasks.parsing import Tags

    reasoning = Tags(think="reasoning")
    task = build_task("arithmetic", tags=reasoning)
    completion = "4 * 5 = 20. 3 + 20 = 23.</reasoning><answer>23</answer>"  # the template wrote "<reasoning>"
    fmt = to_trl("format", make_reward("format", task), think_prefilled=True, tags=reasoning)
    assert fmt([""], [completion]) == [1.0]
    assert to_trl("format", make_reward("format", task), think_prefilled=True)([""], [completion]) == [0.0]


def exact(text, row):
    return float(text == row["answer"])


def test_a_reward_with_a_batch_form_scores_trls_batch_in_one_call():
    calls = []

    def reward(text, row):
        calls.append(1)
        return exact(text, row)

    reward.batch = lambda texts, rows: (
        calls.append(len(texts)) or [exact(t, r) for t, r in zip(texts, rows, strict=True)]
    )
    trl_reward = to_trl("exact", reward)
    assert trl_reward([""] * 3, ["a", "b", "c"], answer=["a", "x", "c"]) == [1.0, 0.0, 1.0]
    assert calls == [3]
    assert not hasattr(make_reward("correctness", build_task("arithmetic")), "batch")  # no batching to gain


@pytest.mark.parametrize("broken", ["raises", "too few scores", "hangs"])
def test_a_batch_that_fails_as_a_whole_is_scored_sample_by_sample(broken):
    import threading

    release = threading.Event()

    def batch(texts, rows):
        if broken == "raises":
            raise RuntimeError("the verifier crashed")
        if broken == "hangs":
            release.wait(30)
        return [1.0]

    def reward(text, row):
        return exact(text, row)

    reward.batch = batch
    trl_reward = to_trl("exact", reward, timeout=0.1)
    assert trl_reward([""] * 3, ["a", "b", "c"], answer=["a", "x", "c"]) == [1.0, 0.0, 1.0]
    assert trl_reward.errors == 0
    release.set()


def test_a_bad_score_in_a_batch_fails_only_its_sample():
    def reward(text, row):
        return exact(text, row)

    reward.batch = lambda texts, rows: [1.0, float("nan"), 0.0]
    trl_reward = to_trl("exact", reward)
    assert trl_reward([""] * 3, ["a", "b", "c"], answer=["a", "b", "x"]) == [1.0, None, 0.0]
    assert trl_reward.errors == 1
