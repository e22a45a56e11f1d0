"""The public surface: `import grpokit` names it without loading torch, and the README's plain-TRL script runs."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import trl

import grpokit

ROOT = Path(__file__).resolve().parents[1]


def test_the_public_names_import_from_grpokit_without_torch():
    code = (
        "import sys, grpokit\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('grpokit.'))\n"
        "missing = [n for n in grpokit.__all__ if not hasattr(grpokit, n)]\n"
        "heavy = [m for m in ('torch', 'transformers', 'trl', 'peft') if m in sys.modules]\n"
        "print(loaded, missing, heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # `import grpokit` alone loads none of its modules (the sandbox worker imports grpokit.sandbox.worker)
    assert out.strip() == "[] [] []"


def test_every_public_name_is_the_defining_modules_object():
    from grpokit.rewards import make_reward
    from grpokit.tasks import build_task

    assert grpokit.make_reward is make_reward and grpokit.build_task is build_task
    assert set(grpokit.__all__) == {*grpokit._EXPORTS, "__version__", "train"}
    assert set(grpokit.__all__) <= set(dir(grpokit))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        grpokit.nothing  # noqa: B018


def test_train_refuses_overrides_with_a_loaded_recipe(tmp_path):
    recipe = grpokit.load_recipe(ROOT / "recipes" / "smollm2" / "arithmetic_grpo.yaml")
    try:
        grpokit.train(recipe, ["seed=3"])
    except grpokit.RecipeError as err:
        assert "overrides apply to a recipe file" in str(err)
    else:
        raise AssertionError("overrides with a Recipe object were accepted")


def readme_trl_script() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## grpokit's rewards in a plain TRL script") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readmes_trl_script_trains_with_grpokits_rewards(tiny_model_dir, tmp_path, monkeypatch):
    """The README's script as written, on the tiny model for its hub id and with one short step: TRL's own
    GRPOTrainer calls grpokit's rewards and logs them under their names."""
    script = readme_trl_script()
    assert '"Qwen/Qwen2.5-0.5B-Instruct"' in script
    script = script.replace('"Qwen/Qwen2.5-0.5B-Instruct"', repr(str(tiny_model_dir)))
    real = trl.GRPOConfig

    def one_short_step(**kwargs):  # shrunk: one step, short completions, CPU, nothing saved or reported
        kwargs.update(output_dir=str(tmp_path / "out"), max_steps=1, max_completion_length=8, bf16=False)
        kwargs.update(use_cpu=True, per_device_train_batch_size=8, report_to="none", save_strategy="no")
        return real(**kwargs, logging_steps=1)

    monkeypatch.setattr(trl, "GRPOConfig", one_short_step)
    namespace: dict = {}
    exec(compile(script, "README.md", "exec"), namespace)  # the project's own README text, not model output
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 1
    logged = {key for row in trainer.state.log_history for key in row}
    assert {"rewards/format/mean", "rewards/steps/mean", "rewards/correctness/mean"} <= logged
