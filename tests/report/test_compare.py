"""The comparison page: runs side by side, from fake run folders; it renders in headless Chromium."""

import json
import re

import pytest

from grpokit.report import compare
from tests.conftest import headless_chromium
from tests.fake_runs import make_run

STAGES = [
    {"name": "before", "kind": "eval", "accuracy": 0.0, "format_rate": 0.0, "n": 10, "minutes": 0.5},
    {"name": "sft", "kind": "sft", "accuracy": 0.8, "format_rate": 1.0, "n": 10, "minutes": 4.0},
    {"name": "grpo", "kind": "grpo", "accuracy": 0.95, "format_rate": 1.0, "n": 10, "minutes": 1.5},
]


@pytest.fixture
def two_runs(tmp_path):
    """A: a single-stage run in the older summary format; B: a multi-stage run with a stages list."""
    a = make_run(tmp_path / "runs", "smollm2/arithmetic_grpo", "20260101-100000", after=0.6)
    b = make_run(
        tmp_path / "runs",
        "smollm2/arithmetic_sft_grpo",
        "20260101-110000",
        recipe={"grpo": {"learning_rate": 5e-4, "max_steps": 9, "bf16": False}},
        steps=9,
        seconds_per_step=5.0,
        stages=STAGES,
        status={"status": "finished", "started": 1_700_000_000.0, "recipe": "recipes/smollm2/x.yaml"},
    )
    (b / "eval_grpo.json").write_text((b / "eval_after.json").read_text())
    saved = json.loads((b / "eval_grpo.json").read_text())
    saved["samples"][0]["completion"] = "<script>alert(1)</script>"
    (b / "eval_grpo.json").write_text(json.dumps(saved))
    return a, b


def test_the_page_goes_into_a_folder_that_does_not_exist_yet(two_runs, tmp_path):
    out = tmp_path / "new" / "folder" / "cmp.html"
    assert compare.main(list(two_runs), out) == out
    assert out.read_text(encoding="utf-8").startswith("<!")


def test_the_page_lays_the_runs_side_by_side(two_runs, tmp_path):
    a, b = two_runs
    page = compare.main([a, b], tmp_path / "cmp.html").read_text(encoding="utf-8")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<link" not in page and "http://" not in page and "https://" not in page
    # Recipe differences: the learning rate and step count, not the identical keys.
    assert re.search(r"grpo\.learning_rate</td><td class='l'>0\.0001</td><td class='l'>0\.0005", page)
    assert "grpo.max_steps" in page and "task.name" not in page
    # Stage table: the older evals (before, after) and the stages list (before, sft, grpo) in one table.
    for stage in ("before (eval)", "after (grpo)", "sft (sft)", "grpo (grpo)"):
        assert f"<td class='l'>{stage}</td>" in page
    assert "<td>95.0%</td>" in page and "<td>60.0%</td>" in page
    images = re.findall(r"<h2>([^<]+)</h2><img alt='[^']+' src='data:image/png;base64,", page)
    assert images == [
        "Reward by GRPO step",
        "Reward by wall time",
        "Held-out accuracy by step",
        "Held-out accuracy by wall time",
    ]
    # The same prompts, each run's final completion.
    assert page.count("<h3>What is 2 + 3 * 4?</h3>") == 1
    assert "A (arithmetic_grpo/20260101-100000): correct" in page
    assert "B (arithmetic_sft_grpo/20260101-110000): correct" in page


def test_series_share_axes_by_step_and_by_time(two_runs):
    a, b = (compare.load_run(path, label) for path, label in zip(two_runs, "AB", strict=True))
    steps, minutes, rewards = compare.reward_series(b)
    assert steps == list(range(1, 10)) and minutes[0] == pytest.approx((60 + 5) / 60) and rewards[-1] == 1.5
    (step_x, step_acc), (time_x, time_acc) = compare.heldout_series(b)
    assert step_x[0] == 0 and step_x[-1] == 9 and step_acc[-1] == 0.95
    assert time_x == sorted(time_x) and time_x[-1] == pytest.approx(6.0)  # 0.5 + 4.0 + 1.5 minutes
    assert time_acc[-1] == 0.95
    # The older run has no start time saved: its clock starts eval_before's 6 s before its first metric.
    assert compare.reward_series(a)[1][0] == pytest.approx(6 / 60)


def test_cli_report_with_several_runs_writes_one_page(two_runs, tmp_path, capsys):
    from grpokit.cli.commands import main

    assert main(["report", *map(str, two_runs), "--out", str(tmp_path / "x.html")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "x.html")
    assert main(["report", str(two_runs[0]), str(tmp_path)]) == 2
    assert "not a grpokit run directory" in capsys.readouterr().err


def test_the_page_renders_in_headless_chromium(two_runs, tmp_path):
    """Needs Debian's chromium and chromium-driver: `make test` installs them (and requires them)."""
    driver = headless_chromium()
    try:
        driver.get(compare.main(list(two_runs), tmp_path / "cmp.html").as_uri())
        widths = driver.execute_script("return Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
        assert len(widths) == 4 and all(w > 100 for w in widths), widths  # every plot decoded
        tables = driver.execute_script("return document.querySelectorAll('table').length")
        assert tables == 3  # runs, recipe differences, stages
        assert driver.execute_script("return document.querySelectorAll('script').length") == 0  # escaped output
        shot = tmp_path / "compare.png"
        assert driver.save_screenshot(str(shot))
        assert [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"] == []
    finally:
        driver.quit()
    from PIL import Image

    image = Image.open(shot).convert("RGB").resize((120, 240))
    pixels = list(image.getdata())
    assert sum(1 for p in pixels if sum(p) < 720) / len(pixels) > 0.05 and len(set(pixels)) > 50
