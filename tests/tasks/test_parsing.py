import pytest

from grpokit.tasks.parsing import (
    MAX_COMPLETION_CHARS,
    THINK_TAGS,
    Tags,
    extract_answer,
    extract_think,
    is_strict_format,
    normalize_completion,
    parse_completion,
    retag,
    tag_counts,
)

GOOD = "<think>2 * 3 = 6. 1 + 6 = 7.</think><answer>7</answer>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD, "7"),
        ("<think>x</think>\n<answer> 7 </answer>\n", "7"),
        ("<answer>7</answer>", "7"),  # no thought: still an answer, just not strict format
        ("<think>the answer is <answer>7</answer></think>", None),  # inside <think> does not count
        ("<think>never closed <answer>7</answer>", None),  # unclosed thought swallows the rest
        ("<think>a</think><answer>3</answer><answer>7</answer>", "7"),  # last block wins
        ("<think>a</think><answer></answer>", ""),
        ("no tags at all: 7", None),
        ("<answer>7", None),  # unclosed answer
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_first_policy():
    assert extract_answer("<answer>3</answer><answer>7</answer>", which="first") == "3"


@pytest.mark.parametrize(
    ("text", "strict"),
    [
        (GOOD, True),
        ("  \n" + GOOD + "\n", True),  # surrounding whitespace is fine
        ("<think>a</think>\n\n<answer>7</answer>", True),
        ("Sure! " + GOOD, False),  # text before
        (GOOD + " Hope this helps", False),  # text after
        ("<think>a</think><answer> </answer>", False),  # empty answer
        ("<think>a</think><answer>7</answer><answer>7</answer>", False),  # several answers
        ("<think><think>a</think><answer>7</answer>", False),  # repeated tag
        ("<answer>7</answer><think>a</think>", False),  # wrong order
        ("<think>a<answer>7</answer></think>", False),  # answer inside thought
        ("<think>a</think>", False),
        ("", False),
    ],
)
def test_strict_format(text, strict):
    assert is_strict_format(text) is strict


def test_prefilled_think_is_restored():
    completion = "2 * 3 = 6.</think><answer>6</answer>"  # the template wrote "<think>" in the prompt
    assert not is_strict_format(completion)
    assert is_strict_format(normalize_completion(completion, think_prefilled=True))
    # A completion that repeats the tag anyway is left alone.
    assert normalize_completion(GOOD, think_prefilled=True) == GOOD
    assert normalize_completion(completion, think_prefilled=False) == completion


def test_huge_completion_is_bounded():
    huge = "<think>" + "9" * 1_000_000 + "</think><answer>7</answer>"
    assert len(normalize_completion(huge)) == MAX_COMPLETION_CHARS
    assert extract_answer(huge) is None  # the answer lies past the bound: not read
    assert not is_strict_format(huge)


def test_parse_completion_fields():
    parsed = parse_completion(GOOD)
    assert (parsed.think, parsed.answer, parsed.strict) == ("2 * 3 = 6. 1 + 6 = 7.", "7", True)
    assert extract_think("no thought") is None


REASONING = Tags(think="reasoning")


@pytest.mark.parametrize(
    ("text", "answer", "strict"),
    [
        ("<reasoning>2 * 3 = 6.</reasoning><answer>6</answer>", "6", True),
        ("<think>2 * 3 = 6.</think><answer>6</answer>", "6", False),  # the answer tag is shared; the thought is not
        ("<reasoning>it is <answer>6</answer></reasoning>", None, False),  # inside the thought does not count
        ("<reasoning>never closed <answer>6</answer>", None, False),
        ("<reasoning>a</reasoning><answer>3</answer><answer>6</answer>", "6", False),
        ("<answer>6</answer><reasoning>", None, False),  # an answer before the thought does not count
        ("<answer><reasoning></reasoning>6</answer>", None, False),  # nor one with the thought inside it
        ("<think>x</think><answer>6</answer><think>", "6", False),  # <think> is plain text in these tags
    ],
)
def test_a_recipes_tags_are_the_ones_parsed(text, answer, strict):
    assert extract_answer(text, tags=REASONING) == answer
    assert is_strict_format(text, REASONING) is strict


def test_other_tags_parse_like_the_default_ones():
    final = Tags(think="reasoning", answer="final")
    parsed = parse_completion("<reasoning>2 * 3 = 6.</reasoning><final>6</final>", tags=final)
    assert (parsed.think, parsed.answer, parsed.strict) == ("2 * 3 = 6.", "6", True)
    assert extract_answer("<think>x</think><answer>6</answer>", tags=final) is None
    assert extract_think("<think>x</think>", REASONING) is None
    assert tag_counts("<reasoning></reasoning><think>", REASONING) == {
        "<reasoning>": 1,
        "</reasoning>": 1,
        "<answer>": 0,
        "</answer>": 0,
    }


def test_prefilled_thought_is_restored_with_the_recipes_tag():
    completion = "2 * 3 = 6.</reasoning><answer>6</answer>"
    assert normalize_completion(completion, True, REASONING) == "<reasoning>" + completion
    assert normalize_completion("<reasoning>" + completion, True, REASONING) == "<reasoning>" + completion


def test_retag_rewrites_default_tags_at_once():
    swapped = Tags(think="answer", answer="think")  # each rewritten once, not twice
    assert retag("<think>a</think><answer>1</answer>", swapped) == "<answer>a</answer><think>1</think>"
    assert retag("<think>a</think>", THINK_TAGS) == "<think>a</think>"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"think": "answer"}, "different names"),
        ({"think": ""}, "not a tag name"),
        ({"think": "<think>"}, "not a tag name"),
        ({"answer": "final answer"}, "not a tag name"),
        ({"think": "1st"}, "not a tag name"),
        ({"think": "a.*"}, "not a tag name"),  # tag names go into regular expressions: no metacharacters
    ],
)
def test_bad_tag_names_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Tags(**kwargs)
