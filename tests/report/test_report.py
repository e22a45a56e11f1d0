"""The report page: self-contained, every picture present, and it renders in headless Chromium."""

import json
import re
import shutil

import pytest

from grpokit.recipe.load import build_recipe
from grpokit.report import page as report
from tests.conftest import headless_chromium, tiny_recipe


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory):
    from grpokit.stages import pipeline as train

    out = tmp_path_factory.mktemp("report")
    raw = tiny_recipe(tiny_model_dir, out, grpo={"max_steps": 3}, eval={"every": 1, "every_n": 2, "samples": 3})
    return train.main(build_recipe(raw))


def test_the_page_is_self_contained_and_complete(run_dir):
    page = report.main(run_dir).read_text(encoding="utf-8")
    images = re.findall(r"src='data:image/png;base64,", page)
    assert len(images) >= 4  # rewards, accuracy over steps, before/after, lengths
    assert "<script" not in page and "<link" not in page and "http://" not in page and "https://" not in page
    for heading in ("Before and after", "Run health", "Rewards", "Completion length", "Sample completions"):
        assert heading in page
    # The same prompt at every checkpoint, each with every reward's score.
    for label in ("before:", "grpo step 1:", "grpo step 2:", "grpo:"):  # each stage's evaluation, by name
        assert label in page
    assert re.search(r"format [01]\.0+, correctness [01]\.0+", page)
    assert (run_dir / "curves.png").stat().st_size > 10_000
    # The stage table: what the GRPO stage fixed and broke on the problems evaluated before it.
    last = json.loads((run_dir / "summary.json").read_text())["stages"][-1]
    assert "fixed / broke (z)" in page and f"<td>{last['fixed']} / {last['broke']} ({last['z']:+.1f})</td>" in page


def test_model_output_is_escaped(run_dir, tmp_path):
    copy = shutil.copytree(run_dir, tmp_path / "run")
    last = copy / f"eval_{json.loads((copy / 'summary.json').read_text())['stages'][-1]['name']}.json"
    saved = json.loads(last.read_text())
    saved["samples"][0]["completion"] = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    saved["mistakes"] = [{"question": "<b>q", "answer": 7, "completion": "<script>alert(3)</script>", "format": False}]
    last.write_text(json.dumps(saved))
    page = report.main(copy).read_text(encoding="utf-8")
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert(3)" not in page and "&lt;script&gt;alert(3)&lt;/script&gt;" in page
    assert "<b>q" not in page and "(not in format)" in page


def test_the_page_shows_the_last_evaluations_wrong_answers(run_dir, tmp_path):
    copy = shutil.copytree(run_dir, tmp_path / "run")
    last_name = json.loads((copy / "summary.json").read_text())["stages"][-1]["name"]
    last = copy / f"eval_{last_name}.json"
    saved = json.loads(last.read_text())
    assert "mistakes" in saved  # what the run wrote
    wrong = {"question": "What is 2 + 3?", "answer": 5, "completion": "<answer>6</answer>", "format": False}
    saved.update(n=40, accuracy=0.5, mistakes=[dict(wrong, question=f"What is {i} + 3?") for i in range(20)])
    last.write_text(json.dumps(saved))
    page = report.main(copy).read_text(encoding="utf-8")
    assert f"Wrong answers after {last_name}" in page
    assert f"12 of 20 wrong (eval_{last_name}.json keeps 20" in page
    assert "What is 11 + 3?" in page and "What is 12 + 3?" not in page  # the first 12 only
    saved.update(accuracy=1.0, mistakes=[])
    last.write_text(json.dumps(saved))
    assert "None: every held-out problem was answered right" in report.main(copy).read_text(encoding="utf-8")
    del saved["mistakes"]  # a run saved before mistakes were kept: no section
    last.write_text(json.dumps(saved))
    assert "Wrong answers after" not in report.main(copy).read_text(encoding="utf-8")


def test_the_page_renders_in_headless_chromium(run_dir, tmp_path):
    """Needs Debian's chromium and chromium-driver: `make test` installs them (and requires them)."""
    driver = headless_chromium()
    try:
        driver.get(report.main(run_dir).as_uri())
        widths = driver.execute_script("return Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
        assert len(widths) >= 4 and all(w > 100 for w in widths), widths  # every plot decoded
        shot = tmp_path / "report.png"
        assert driver.save_screenshot(str(shot))
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []
    finally:
        driver.quit()
    from PIL import Image

    image = Image.open(shot).convert("RGB").resize((120, 240))
    pixels = list(image.getdata())
    not_white = sum(1 for p in pixels if sum(p) < 720) / len(pixels)
    colours = len(set(pixels))
    assert not_white > 0.05 and colours > 50, (not_white, colours)  # text and coloured curves, not a blank page


def make_sleepy(task):
    """A reward factory (dotted path in the fake recipe) that hangs far past its timeout."""
    import time

    def sleepy(completion, example):
        time.sleep(60)
        return 1.0

    return sleepy


def test_a_hanging_reward_does_not_hang_the_report(tmp_path):
    import time

    from tests.fake_runs import make_run

    rewards = [{"name": "format"}, {"name": "tests.report.test_report.make_sleepy", "timeout": 0.5}]
    run = make_run(tmp_path, recipe={"rewards": rewards})
    started = time.perf_counter()
    page = report.main(run).read_text(encoding="utf-8")
    assert time.perf_counter() - started < 15  # one 0.5 s timeout, then the reward is not called again
    assert "tests.report.test_report.make_sleepy error" in page and "format 1.0" in page
    assert re.search(
        r"scoring: tests\.report\.test_report\.make_sleepy: 6 completion\(s\) not scored .*TimeoutError", page
    )
    assert "stopped calling it after 1 timeout(s) of 0.5 s" in page


def test_a_prefill_think_runs_saved_completions_are_scored_with_the_prompts_thought_tag(tmp_path):
    from tests.fake_runs import make_run

    opened = make_run(tmp_path, "opened", recipe={"task": {"name": "arithmetic", "prefill_think": True}})
    plain = make_run(tmp_path, "plain")
    completion = "2 + 3 * 4 = 14.</think><answer>14</answer>"  # as saved: the prompt ended with <think>
    assert [score(completion, {"answer": 14}) for score in report._scorers(opened)] == [1.0, 1.0]
    assert [score(completion, {"answer": 14}) for score in report._scorers(plain)] == [0.0, 1.0]


def test_an_interrupted_run_gets_a_partial_report_marked_as_such(tmp_path):
    """No summary.json (the run stopped in its warm-up): the page shows what it logged, with its status."""
    import json

    from tests.fake_runs import eval_result, make_run

    status = {
        "status": "interrupted",
        "error": "TrainingInterrupted: SIGTERM",
        "checkpoint": "/runs/x/warmup/checkpoint-6",
    }
    run = make_run(tmp_path, status=status, finished=False)
    (run / "eval_before.json").write_text(json.dumps(eval_result(0.0, 0.0)), encoding="utf-8")
    before = {
        "name": "before",
        "kind": "eval",
        "split": "test",
        "accuracy": 0.0,
        "stderr": 0.0,
        "format_rate": 0.0,
        "n": 10,
        "minutes": 0.0,
    }
    (run / "stages.json").write_text(json.dumps([before]), encoding="utf-8")
    page = report.main(run).read_text(encoding="utf-8")
    assert "Partial report" in page and "interrupted" in page and "warmup/checkpoint-6" in page
    assert "SIGTERM" in page and "<td>before</td>" in page


def test_a_folder_that_is_not_a_run_gets_no_report(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a grpokit run directory"):
        report.main(tmp_path)
