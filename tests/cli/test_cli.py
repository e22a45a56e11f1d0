import subprocess
import sys

import pytest

from grpokit.cli.commands import main


def test_tasks_and_rewards_list_what_is_registered(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "arithmetic" in out and "operands=3" in out
    assert main(["rewards"]) == 0
    out = capsys.readouterr().out
    for name in ("format", "format_partial", "correctness"):
        assert f"\n{name} " in "\n" + out


def test_bad_recipe_fails_before_any_model_loads(tmp_path, capsys, monkeypatch):
    import grpokit.models.load

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the recipe was validated")

    monkeypatch.setattr(grpokit.models.load, "load_model", no_model)
    path = tmp_path / "r.yaml"
    path.write_text("rewards: [{name: format}]\ngrpo: {bf16: false, learning_rat: 1e-5}\n")
    assert main(["train", str(path)]) == 2
    assert "unknown key grpo.learning_rat" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_override_errors_are_reported(tmp_path, capsys):
    path = tmp_path / "r.yaml"
    path.write_text("rewards: [{name: format}]\ngrpo: {bf16: false}\n")
    assert main(["train", str(path), "lora.r=-1"]) == 2
    assert "lora.r=-1" in capsys.readouterr().err


def test_unknown_command_exits_nonzero():
    with pytest.raises(SystemExit):
        main(["trian"])


def test_eval_prints_wrong_completions_with_control_characters_escaped(monkeypatch, capsys):
    """`grpokit eval` shows a few wrong completions; an OSC 52 clipboard write or a clear-screen in one is
    printed as text, not sent to the terminal."""
    from grpokit.cli import commands as cli
    from grpokit.eval import evaluate

    osc52, clear = "\x1b]52;c;cm0gLXJmIH4vKgo=\x07", "\x1b[2J"
    result = evaluate.EvalResult(
        task="arithmetic", n=1, accuracy=0.0, format_rate=0.0, mean_completion_tokens=5.0,
        max_completion_tokens=5, truncation_rate=0.0, tokens_per_second=1.0, seconds=1.0,
        mistakes=[{"question": "What is 1 + 1?\x1bc", "answer": 2, "completion": f"<answer>{osc52}{clear}3</answer>"}],
    )  # fmt: skip
    monkeypatch.setattr(cli, "eval_target", lambda args: (None, None))
    monkeypatch.setattr(evaluate, "main", lambda recipe, model: result)
    assert main(["eval", "anything"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\\x1b]52;c;cm0gLXJmIH4vKgo=\\x07\\x1b[2J3" in out and "What is 1 + 1?\\x1bc" in out


def test_the_command_line_starts_without_torch():
    # `grpokit --help` and the light commands (runs, report, tasks) must not pay for torch/transformers/trl:
    # a fresh interpreter, since this test process has them loaded already.
    heavy = ("torch", "transformers", "trl", "peft", "datasets", "matplotlib")
    code = f"import sys, grpokit.cli.commands; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
