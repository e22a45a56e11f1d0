import pytest

from grpokit.rewards import make_reward
from grpokit.tasks import build_task

GOOD = "<think>4 * 5 = 20. 3 + 20 = 23.</think><answer>23</answer>"


@pytest.mark.parametrize(
    ("completion", "strict", "partial"),
    [
        (GOOD, 1.0, 1.0),
        ("<think>a</think>\n<answer>1</answer>\n", 1.0, 1.0),
        ("<think>a</think>", 0.0, 0.5),
        ("<answer>1</answer>", 0.0, 0.5),
        ("plain prose, 23", 0.0, 0.0),
        ("", 0.0, 0.0),
        # adversarial: tag spam earns nothing for the spammed tags
        ("<think><think><think></think></think></think><answer>1</answer>", 0.0, 0.5),
        ("<think></think>" * 20 + "<answer>1</answer>", 0.0, 0.5),
        # adversarial: an empty answer, several answers, text around the format
        ("<think>a</think><answer></answer>", 0.0, 0.5),
        ("<think>a</think><answer> \n</answer>", 0.0, 0.5),
        ("<think>a<answer>1</answer></think>", 0.0, 0.5),  # the answer hides inside the thought
        ("<think>a</think><answer>1</answer><answer>2</answer>", 0.0, 0.5),
        ("Sure! " + GOOD, 0.0, 1.0),
        (GOOD + " extra", 0.0, 1.0),
        # adversarial: a huge completion is bounded, not scanned in full
        ("<think>" + "x" * 1_000_000 + "</think><answer>1</answer>", 0.0, 0.25),
    ],
)
def test_format_rewards(completion, strict, partial):
    assert make_reward("format", task=None)(completion, {}) == strict
    assert make_reward("format_partial", task=None)(completion, {}) == partial


def test_partial_never_exceeds_strict_ceiling():
    reward = make_reward("format_partial", task=None)
    for text in ["<think>", "</think>" * 3, GOOD * 2, "<answer>" * 100]:
        assert 0.0 <= reward(text, {}) <= 1.0


@pytest.mark.parametrize(
    ("completion", "lenient", "tag_count"),
    [
        (GOOD, 1.0, 1.0),
        ("Sure! " + GOOD + " Done.", 1.0, 1.0 - 0.001 * len("Done.")),
        (GOOD + "!" * 100, 1.0, 0.9),
        (GOOD + "x" * 5000, 1.0, 0.0),  # a long tail after the answer costs everything, never below 0
        ("<think>a</think><answer></answer>", 0.0, 0.5),
        ("<think>a <answer>1</answer></think>", 0.0, 0.492),  # answer inside the thought; 8 chars trail it
        ("<answer>1</answer>", 0.0, 0.5),
        ("<think>a</think>", 0.0, 0.5),
        ("<think><think>a</think></think><answer>1</answer>", 1.0, 0.5),
        ("", 0.0, 0.0),
        # adversarial: the thought inside the answer, the tags out of order
        ("<answer><think></think>9</answer>", 0.0, 0.5),
        ("<answer>9</answer><think>", 0.0, 0.25 - 0.001 * len("<think>")),
        ("<answer>9</answer><think>x</think>", 0.0, 0.5 - 0.001 * len("<think>x</think>")),
        ("</think>x<think><answer>9</answer>", 0.0, 0.25),
    ],
)
def test_lenient_format_and_tag_count(completion, lenient, tag_count):
    assert make_reward("format_lenient", task=None)(completion, {}) == lenient
    assert make_reward("tag_count", task=None)(completion, {}) == pytest.approx(tag_count)


def test_tag_count_rejects_a_negative_penalty():
    from grpokit.errors import RecipeError

    with pytest.raises((ValueError, RecipeError)):
        make_reward("tag_count", None, {"trailing_penalty": -1})


FORMAT_REWARDS = ["format", "format_lenient", "tag_count", "format_partial"]
REASONED = "<reasoning>4 * 5 = 20. 3 + 20 = 23.</reasoning><answer>23</answer>"


@pytest.mark.parametrize("name", FORMAT_REWARDS)
def test_every_format_reward_follows_the_tasks_tags(name):
    from grpokit.tasks import build_task
    from grpokit.tasks.parsing import Tags

    reasoning = make_reward(name, build_task("arithmetic", tags=Tags(think="reasoning")))
    assert reasoning(REASONED, {}) == 1.0
    assert reasoning(GOOD, {}) < 1.0  # <think> is not this recipe's thought
    assert reasoning("<reasoning>a <answer>23</answer></reasoning>", {}) < 1.0  # answer inside the thought
    default = make_reward(name, build_task("arithmetic"))
    assert default(GOOD, {}) == 1.0
    assert default(REASONED, {}) < 1.0


@pytest.mark.parametrize("name", ["format", "format_lenient"])
def test_the_whole_format_rewards_pay_nothing_for_the_other_thought_tag(name):
    from grpokit.tasks import build_task
    from grpokit.tasks.parsing import Tags

    assert make_reward(name, build_task("arithmetic", tags=Tags(think="reasoning")))(GOOD, {}) == 0.0
    assert make_reward(name, build_task("arithmetic"))(REASONED, {}) == 0.0


@pytest.mark.parametrize(
    ("completion", "tag_count"),
    [
        ("<result><reasoning></reasoning>9</result>", 0.5),
        ("<result>9</result><reasoning>", 0.25 - 0.001 * len("<reasoning>")),
        ("<result>9</result><reasoning>x</reasoning>", 0.5 - 0.001 * len("<reasoning>x</reasoning>")),
        ("</reasoning>x<reasoning><result>9</result>", 0.25),
        ("<reasoning>a <result>1</result></reasoning>", 0.5 - 0.001 * len("</reasoning>")),
    ],
)
def test_answers_inside_or_before_the_thought_earn_nothing_in_other_tags(completion, tag_count):
    """Issue 14's ordering rules hold in a recipe's own tags."""
    from grpokit.tasks import build_task
    from grpokit.tasks.parsing import Tags

    task = build_task("arithmetic", tags=Tags(think="reasoning", answer="result"))
    assert make_reward("format", task)(completion, {}) == 0.0
    assert make_reward("format_lenient", task)(completion, {}) == 0.0
    assert make_reward("tag_count", task)(completion, {}) == pytest.approx(tag_count)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [("31", 1.0), ("-4", 1.0), (" 31 ", 1.0), ("24 = 40", 0.0), ("7 + 24", 0.0), ("31.", 0.0), ("", 0.0)],
)
def test_format_with_an_answer_regex_pays_only_answers_that_match_whole(answer, expected):
    reward = make_reward("format", build_task("arithmetic"), {"answer_regex": "-?[0-9]+"})
    assert reward(f"<think>3 * 8 = 24. 7 + 24 = 31.</think><answer>{answer}</answer>", {}) == expected


def test_format_answer_regex_errors_name_the_fix():
    with pytest.raises(ValueError, match=r"answer_regex '\[0-9' is not a regular expression.*-\?\[0-9\]\+"):
        make_reward("format", build_task("arithmetic"), {"answer_regex": "[0-9"})


@pytest.mark.parametrize("completion", ["</think><answer>42</answer>", "x</think><answer>42</answer>"])
def test_a_closing_thought_tag_counts_only_after_an_opening_one(completion):
    """The docstring's promise: `</think>` earns only after `<think>`, so no `<think>` earns 0.5 at most."""
    assert make_reward("tag_count", task=None)(completion, {}) == 0.5
    assert make_reward("format_partial", task=None)(completion, {}) == 0.5


INVISIBLE = ["\u200b", "\u200b\u200c\u200d", "\u2060", "\ufeff", "\u00ad", "\u3000", "\u00a0 \u2003"]
INVISIBLE += ["\u3164", "\u2800"]  # a Hangul filler and the blank Braille pattern: filed as letter and symbol


@pytest.mark.parametrize("name", ["format", "format_lenient", "tag_count", "format_partial"])
@pytest.mark.parametrize("blank", INVISIBLE, ids=[ascii(b) for b in INVISIBLE])
def test_an_answer_of_invisible_characters_is_empty_for_every_format_reward(name, blank):
    reward = make_reward(name, task=None)
    empty = reward("<think>a</think><answer></answer>", {})
    assert reward(f"<think>a</think><answer>{blank}</answer>", {}) == empty
    assert reward(f"<think>a</think><answer>{blank}42{blank}</answer>", {}) == reward(GOOD, {}) == 1.0
