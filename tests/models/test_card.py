"""The model card of an exported run: front matter the Hub reads, the stage table, rewards, suites, the recipe,
usage and limits, all from what the run folder logged."""

import json
from pathlib import Path

import yaml

from grpokit.models.card import build_card, write_card
from tests.fake_runs import make_run

PROVENANCE = {
    "system_prompt": "Think inside <think> </think>, then answer inside <answer> </answer>.",
    "tags": {"think": "think", "answer": "answer"},
    "prefill_think": False,
}
SUITE = {"accuracy": 0.125, "stderr": 0.0826797, "format_rate": 0.75, "n": 16}
STAGES = [
    {"name": "before", "kind": "eval", "split": "test", "accuracy": 0.0625, "stderr": 0.0605, "format_rate": 0.25,
     "n": 16, "minutes": 0.0, "eval_minutes": 0.31, "suites": {"big": {**SUITE, "accuracy": 0.0}}},
    {"name": "warmup", "kind": "sft", "split": "test", "accuracy": 0.3125, "stderr": 0.1159, "format_rate": 1.0,
     "n": 16, "minutes": 1.27, "eval_minutes": 0.22, "suites": {"big": SUITE}},
    {"name": "grpo", "kind": "grpo", "split": "test", "accuracy": 0.8125, "stderr": 0.0976, "format_rate": 1.0,
     "n": 16, "minutes": 7.46, "eval_minutes": 0.2, "suites": {"big": SUITE}, "gain": 0.5},
]  # fmt: skip
RECIPE = {
    "task": {"name": "arithmetic", "params": {"operands": 3, "max_value": 10}, "train_size": 500},
    "rewards": [{"name": "format", "weight": 0.25}, {"name": "correctness", "weight": 1.0, "params": {}}],
    "lora": {"enabled": True, "r": 8, "alpha": 16},
    "eval": {"n": 16, "max_new_tokens": 48, "suites": [{"name": "big", "params": {"max_value": 99}, "n": None}]},
    "stages": [{"name": "warmup", "kind": "sft", "steps": 3}, {"name": "grpo", "kind": "grpo", "steps": 4}],
    "seed": 11,
}


def fabricated_run(tmp_path: Path, stages=STAGES, status="finished") -> Path:
    run = make_run(tmp_path, recipe=RECIPE, steps=4, status={"status": status, "error": None})
    (run / "stages.json").write_text(json.dumps(stages), encoding="utf-8")
    with (run / "metrics.jsonl").open("a", encoding="utf-8") as f:
        f.writelines(json.dumps({"stage": "warmup", "step": step, "loss": 1.0}) + "\n" for step in (1, 2, 3))
    warning = {"step": 2, "condition": "entropy_collapse", "message": "...", "repeat": False}
    (run / "warnings.jsonl").write_text(json.dumps(warning) + "\n", encoding="utf-8")
    return run


def test_the_card_holds_the_runs_own_numbers_and_recipe(tmp_path):
    from huggingface_hub import ModelCard

    run = fabricated_run(tmp_path)
    out = tmp_path / "export"
    out.mkdir()
    (out / "grpokit_export.json").write_text(json.dumps(PROVENANCE), encoding="utf-8")
    path = write_card(run, out, repo_id="someone/tiny-grpo")
    card = ModelCard.load(path)  # the Hub's own parser
    assert card.data.library_name == "transformers"
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct" and card.data.license == "apache-2.0"
    assert {"grpo", "grpokit", "trl", "reasoning"} <= set(card.data.tags)
    text = card.text
    lines = text.splitlines()
    assert "| stage | kind | steps | test accuracy | format rate | big | train min | eval min |" in lines
    assert "| before | eval | — | 6.2% ± 6.0 (n=16) | 25.0% | 0.0% ± 8.3 (n=16) | — | 0.3 |" in lines
    assert "| warmup | sft | 3 | 31.2% ± 11.6 (n=16) | 100.0% | 12.5% ± 8.3 (n=16) | 1.3 | 0.2 |" in lines
    assert "| grpo | grpo | 4 | 81.2% ± 9.8 (n=16) | 100.0% | 12.5% ± 8.3 (n=16) | 7.5 | 0.2 |" in lines
    assert "- `format`, weight 0.25" in lines and "- `correctness`, weight 1.0" in lines
    assert "- Suite `big`: the task with max_value=99, 16 problems." in lines
    assert (run / "recipe.yaml").read_text().strip() in text  # the recipe, as the run wrote it
    assert "AutoTokenizer.from_pretrained('someone/tiny-grpo')" in text and PROVENANCE["system_prompt"] in text
    assert "max_new_tokens=48" in text and "What is 2 + 3 * 4?" in text  # eval's budget, a logged question
    assert "seed 11" in text and "entropy_collapse (step 2)" in text
    assert "did not finish" not in text and "pass@" not in text  # no sampled evaluation was logged


def test_an_interrupted_run_says_so_and_lists_the_stage_it_did_not_finish(tmp_path):
    run = fabricated_run(tmp_path, stages=STAGES[:2], status="interrupted")
    text = build_card(run, PROVENANCE)
    assert "**This run did not finish** (status: interrupted)" in text
    assert "| grpo | grpo | 4 | not finished | — | — | — | — |" in text.splitlines()
    assert "81.2%" not in text
    front = yaml.safe_load(text.split("---")[1])
    assert front["library_name"] == "transformers"


def test_a_local_base_model_is_no_hub_id_and_its_license_comes_from_its_card(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "README.md").write_text("---\nlicense: mit\n---\n# base\n", encoding="utf-8")
    run = fabricated_run(tmp_path)
    recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    recipe["model"]["name"] = str(base)
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    front = yaml.safe_load(build_card(run, PROVENANCE).split("---")[1])
    assert "base_model" not in front and front["license"] == "mit"


def test_a_run_that_did_not_record_its_split_does_not_claim_one(tmp_path):
    stages = [{k: v for k, v in row.items() if k != "split"} for row in STAGES]
    text = build_card(fabricated_run(tmp_path, stages=stages), PROVENANCE)
    assert "evaluated after it on held-out problems" in text and "`test` split" not in text
