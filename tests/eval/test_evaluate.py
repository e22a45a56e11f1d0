import itertools
import json
import math

import pytest

from grpokit.errors import RecipeError
from grpokit.eval import evaluate as ev
from grpokit.recipe.load import build_recipe
from grpokit.tasks import build_task
from tests.conftest import tiny_recipe


class FakeModel:
    """What `evaluate` touches of a model when `_generate` is faked: its training flag."""

    training = False

    def eval(self):
        pass

    def train(self, mode):
        pass


class FakeTokenizer:
    """A chat template as a function of the messages."""

    def __init__(self, render):
        self.render = render

    def apply_chat_template(self, messages, **_):
        return self.render(messages)


@pytest.mark.parametrize(("n", "c", "k"), [(8, 0, 1), (8, 3, 1), (8, 3, 4), (8, 5, 4), (5, 2, 5), (6, 1, 2)])
def test_pass_at_k_matches_counting_every_subset(n, c, k):
    """pass@k is the share of k-subsets of the n samples that hold at least one correct sample."""
    samples = [1] * c + [0] * (n - c)
    hits = sum(any(s) for s in itertools.combinations(samples, k))
    assert ev.pass_at_k(n, c, k) == pytest.approx(hits / math.comb(n, k))


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        ev.pass_at_k(4, 1, 5)


def test_sampled_metrics_aggregate_per_problem(monkeypatch):
    """pass@k, maj@k and the sampled format rate, from completions we choose."""
    task = build_task("arithmetic")
    problems = task.dataset("test", 2)
    right = [f"<think>x</think><answer>{p['answer']}</answer>" for p in problems]
    wrong = "<think>x</think><answer>-1</answer>"
    plan = {
        None: [[right[0]], [wrong]],  # greedy: first right, second wrong
        1.0: [[right[0], wrong, wrong, right[0]], [wrong, wrong, "no tags", right[1]]],
    }

    def fake_generate(model, tokenizer, prompts, *, temperature=None, per_prompt=1, **_):
        completions = plan[temperature]
        lengths = [len(c) for group in completions for c in group]
        return ev._Generations(completions, lengths, 0, 1.0)

    tokenizer = FakeTokenizer(lambda messages: messages[-1]["content"])

    monkeypatch.setattr(ev, "_generate", fake_generate)
    result = ev.evaluate(FakeModel(), tokenizer, task, problems, samples_per_problem=4, k=[1, 2, 4])
    assert result.accuracy == 0.5
    # problem 0: 2 of 4 right; problem 1: 1 of 4 right.
    assert result.pass_at_k["1"] == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert result.pass_at_k["2"] == pytest.approx((ev.pass_at_k(4, 2, 2) + ev.pass_at_k(4, 1, 2)) / 2)
    assert result.pass_at_k["4"] == 1.0
    # majority of 4: problem 0 ties 2-2 between right and -1 (first seen wins: right); problem 1: -1 wins.
    assert result.maj_at_k["4"] == 0.5 and result.maj_at_k["1"] == 0.5
    assert result.sampled_format_rate == 7 / 8
    assert result.metrics()["eval/pass@4"] == 1.0


def test_the_result_keeps_every_wrong_completion_up_to_a_limit(monkeypatch):
    """`samples` keeps the first completions whatever they scored; `mistakes` keeps the wrong ones, in order,
    so a run's failures can be read from its eval file without decoding or scoring them again."""
    task = build_task("arithmetic")
    problems = task.dataset("test", 5)
    texts = [f"<think>x</think><answer>{p['answer']}</answer>" for p in problems]
    texts[1], texts[3], texts[4] = "<think>x</think><answer>-1</answer>", "no tags", "<answer>-7</answer>"

    def fake_generate(model, tokenizer, prompts, **_):
        return ev._Generations([[t] for t in texts], [1] * len(texts), 0, 1.0)

    monkeypatch.setattr(ev, "_generate", fake_generate)
    tokenizer = FakeTokenizer(lambda messages: messages[-1]["content"])
    result = ev.evaluate(FakeModel(), tokenizer, task, problems, samples=2)
    assert result.accuracy == 0.4 and [s["completion"] for s in result.samples] == texts[:2]
    assert [m["completion"] for m in result.mistakes] == [texts[1], texts[3], texts[4]]
    assert [m["question"] for m in result.mistakes] == [problems[i]["question"] for i in (1, 3, 4)]
    assert all(m["correct"] is False for m in result.mistakes) and [m["format"] for m in result.mistakes] == [
        True,
        False,
        False,
    ]
    assert [m["completion"] for m in ev.evaluate(FakeModel(), tokenizer, task, problems, mistakes=2).mistakes] == [
        texts[1],
        texts[3],
    ]
    raw = {"rewards": [{"name": "correctness"}], "grpo": {"num_generations": 2, "per_device_train_batch_size": 2}}
    assert (
        ev.evaluate_recipe(
            FakeModel(), tokenizer, task, problems, build_recipe({**raw, "eval": {"mistakes": 0}})
        ).mistakes
        == []
    )
    with pytest.raises(RecipeError, match="eval.mistakes=-1"):
        build_recipe({**raw, "eval": {"mistakes": -1}})


def test_eval_reads_completions_in_the_recipes_tags_after_a_prefilled_thought(monkeypatch):
    """A template that opens `<reasoning>` in the prompt: accuracy, format rate and maj@k read the rest."""
    from grpokit.tasks.parsing import Tags

    task = build_task("arithmetic", tags=Tags(think="reasoning"))
    problems = task.dataset("test", 2)
    right = [f"x</reasoning><answer>{p['answer']}</answer>" for p in problems]
    plan = {None: [[right[0]], [f"x</think><answer>{problems[1]['answer']}</answer>"]], 1.0: [[r, r] for r in right]}
    seen = []

    def fake_generate(model, tokenizer, prompts, *, temperature=None, **_):
        seen.extend(prompts)
        return ev._Generations(plan[temperature], [1] * sum(map(len, plan[temperature])), 0, 1.0)

    tokenizer = FakeTokenizer(lambda messages: f"{messages[0]['content']}|{messages[-1]['content']}|<reasoning>\n")

    monkeypatch.setattr(ev, "_generate", fake_generate)
    result = ev.evaluate(FakeModel(), tokenizer, task, problems, samples_per_problem=2, k=[1, 2])
    assert "<reasoning> </reasoning>" in seen[0]  # the default system prompt names the recipe's tags
    # The second greedy completion closes a <think>, not the prefilled <reasoning>: still in the thought, no answer.
    assert result.accuracy == 0.5 and result.format_rate == 0.5
    assert result.sampled_format_rate == 1.0 and result.maj_at_k["2"] == 1.0


def test_eval_of_a_prefill_think_recipe_opens_the_thought_and_scores_what_follows(monkeypatch):
    """`task.prefill_think` with a template that does not open the thought: the prompt ends with `<think>`,
    and completions written from inside the thought are read with it put back."""
    grpo = {"num_generations": 2, "per_device_train_batch_size": 2, "bf16": False}
    recipe = build_recipe({"task": {"prefill_think": True}, "rewards": [{"name": "correctness"}], "grpo": grpo})
    task = build_task("arithmetic")
    problems = task.dataset("test", 2)
    right = f"b * c first.</think><answer>{problems[0]['answer']}</answer>"
    doubled = f"<think>x</think><answer>{problems[1]['answer']}</answer>"  # opened again by the model: fine too
    seen = []

    def fake_generate(model, tokenizer, prompts, **_):
        seen.extend(prompts)
        return ev._Generations([[right], [doubled]], [1, 1], 0, 1.0)

    tokenizer = FakeTokenizer(lambda messages: messages[-1]["content"] + "|assistant\n")

    monkeypatch.setattr(ev, "_generate", fake_generate)
    result = ev.evaluate_recipe(FakeModel(), tokenizer, task, problems, recipe)
    assert [prompt.endswith("|assistant\n<think>") for prompt in seen] == [True, True]
    assert result.accuracy == 1.0 and result.format_rate == 1.0
    assert result.samples[0]["completion"] == right  # kept as the model wrote it


def test_eval_command_on_a_run_directory_and_on_a_model(tiny_model_dir, tmp_path, capsys):
    from grpokit.cli.commands import main
    from grpokit.stages import pipeline as train

    run_dir = train.main(build_recipe(tiny_recipe(tiny_model_dir, tmp_path)))
    out_file = tmp_path / "eval.json"
    assert main(["eval", str(run_dir), "--n", "3", "--k", "1,2", "--out", str(out_file)]) == 0
    printed = capsys.readouterr().out
    assert "eval/pass@2" in printed and "eval/maj@2" in printed
    saved = json.loads(out_file.read_text())
    assert saved["n"] == 3 and saved["samples_per_problem"] == 2
    wrong = saved["mistakes"]  # what the tiny model got wrong, each printed on one line
    assert len(wrong) == round((1 - saved["accuracy"]) * 3)
    if wrong:
        header = f"wrong answers ({len(wrong)} of {len(wrong)}):"
        assert f"{header}\n  {wrong[0]['question']}  gold {wrong[0]['answer']}  wrote: " in printed
    assert 0.0 <= saved["pass_at_k"]["1"] <= saved["pass_at_k"]["2"] <= 1.0

    assert main(["eval", str(tiny_model_dir), "--task", "countdown", "--n", "2", "eval.max_new_tokens=4"]) == 0
    assert "eval/accuracy" in capsys.readouterr().out
    assert main(["eval", str(run_dir), "--k", "1,x"]) == 2
    assert main(["eval", str(run_dir), "eval.k=[9]", "eval.samples_per_problem=2"]) == 2


def test_greedy_eval_of_a_lora_model_reads_as_transformers_generate(tiny_model_dir):
    """The eval decodes on a merged copy with grpokit's sampler: same completions as `generate` on the
    adapter model, prompt by prompt, and the same truncation count."""
    import torch
    from peft import LoraConfig, get_peft_model

    from grpokit.eval.evaluate import _generate
    from grpokit.models.load import load_model

    model, tokenizer = load_model(str(tiny_model_dir))
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    torch.manual_seed(3)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.3)
    model.eval()
    prompts = ["What is 2 + 3 * 4?", "What is 7 * 2 + 1? Think first."]
    got = _generate(model, tokenizer, prompts, max_new_tokens=12, batch_size=8)
    expected, truncated = [], 0
    for text in prompts:
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        out = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        new = out[0, ids.shape[1] :]
        truncated += tokenizer.eos_token_id not in new.tolist()
        expected.append([tokenizer.decode(new, skip_special_tokens=True)])
    assert got.completions == expected and got.truncated == truncated


def test_a_hanging_or_raising_verifier_is_counted_not_waited_on(tiny_model_dir, monkeypatch):
    import time

    from grpokit.models.load import load_model

    model, tokenizer = load_model(str(tiny_model_dir))
    task = build_task("arithmetic")
    problems = task.dataset("test", 4)

    def hangs(text, example):
        time.sleep(60)
        return 1.0

    monkeypatch.setattr(task, "score", hangs)
    started = time.perf_counter()
    result = ev.evaluate(model, tokenizer, task, problems, max_new_tokens=4, score_timeout=0.2)
    assert time.perf_counter() - started < 20  # three 0.2 s timeouts, then the verifier is given up on
    assert result.score_errors == 4 and result.accuracy == 0.0
    assert "TimeoutError" in result.score_error and "after 3 timeout(s)" in result.score_error

    monkeypatch.setattr(task, "score", lambda text, example: 1 / 0)
    result = ev.evaluate(model, tokenizer, task, problems, max_new_tokens=4)
    assert result.score_errors == 4 and "ZeroDivisionError" in result.score_error


def test_every_problems_result_is_saved_so_two_evaluations_pair_up(monkeypatch, tmp_path):
    """`correct` keeps right or wrong for every problem, in order, beyond the `mistakes` kept: two
    evaluations of the same problems give what was fixed and what broke, and McNemar's z."""
    task = build_task("arithmetic")
    problems = task.dataset("test", 6)
    right = [f"<think>x</think><answer>{p['answer']}</answer>" for p in problems]
    wrong = ["<think>x</think><answer>-1</answer>"] * len(problems)

    def run(pattern):
        texts = [r if ok else w for r, w, ok in zip(right, wrong, pattern, strict=True)]
        monkeypatch.setattr(ev, "_generate", lambda *a, **k: ev._Generations([[t] for t in texts], [1] * 6, 0, 1.0))
        result = ev.evaluate(FakeModel(), FakeTokenizer(lambda m: m[-1]["content"]), task, problems, mistakes=1)
        result.save(tmp_path / "eval.json")
        return json.loads((tmp_path / "eval.json").read_text())

    before, after = run([1, 0, 0, 0, 1, 1]), run([1, 1, 1, 1, 0, 1])
    assert before["correct"] == [True, False, False, False, True, True] and len(before["mistakes"]) == 1
    assert ev.paired(before, after) == {"n": 6, "fixed": 3, "broke": 1, "z": 1.0}
    assert ev.paired(after, before) == {"n": 6, "fixed": 1, "broke": 3, "z": -1.0}
    assert ev.paired(before, before) == {"n": 6, "fixed": 0, "broke": 0, "z": 0.0}
    older = {k: v for k, v in before.items() if k != "correct"}  # written before per-problem results were saved
    assert ev.paired(older, after) is None
    other = {**after, "samples": [{**after["samples"][0], "question": "1 + 1"}, *after["samples"][1:]]}
    assert ev.paired(before, other) is None  # not the same problems
    assert ev.paired(before, {**after, "correct": after["correct"][:5]}) is None
