"""The console of a run: stage lines, one progress line per stage (in place on a terminal), warnings once."""

import io
import logging
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpokit.stages import console
from tests.conftest import tiny_recipe

ROOT = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_rewritten_in_place_on_a_terminal_and_printed_when_piped():
    tty = console.Console(stream=Terminal())
    tty.progress("grpo 1/3")
    tty.line("12:00:00 eval at step 1: accuracy 50.0%")
    tty.progress("grpo 2/3")
    tty.end_progress()
    assert tty.stream.getvalue() == (
        "\r\x1b[Kgrpo 1/3\r\x1b[K12:00:00 eval at step 1: accuracy 50.0%\ngrpo 1/3\r\x1b[Kgrpo 2/3\n"
    )
    piped = console.Console(stream=io.StringIO())
    piped.progress("grpo 1/3")
    piped.progress("grpo 2/3")
    piped.end_progress()
    assert piped.stream.getvalue() == "grpo 1/3\ngrpo 2/3\n"


def handler_output(verbosity, records):
    stream = io.StringIO()
    handler = console.ConsoleHandler(console.Console(verbosity, stream))
    for name, level, message, extra in records:
        record = logging.LogRecord(name, level, __file__, 1, message, None, None)
        record.__dict__.update(extra)
        handler.emit(record)
    return stream.getvalue()


RECORDS = [
    ("grpokit.stages.pipeline", logging.INFO, "run directory: x", {}),
    ("grpokit.stages.pipeline", logging.INFO, "grpo step 1/2 loss=0", {"console": False}),
    ("trl.trainer", logging.INFO, "library chatter", {}),
    ("grpokit.stages.health", logging.WARNING, "the same sentence", {}),
    ("grpokit.stages.health", logging.WARNING, "the same sentence", {}),
    ("transformers", logging.WARNING, "a library warning", {}),
]


@pytest.mark.parametrize(
    ("verbosity", "shown", "hidden"),
    [
        ("normal", ["run directory: x", "warning: the same sentence", "warning: a library warning"], ["chatter"]),
        ("quiet", ["warning: the same sentence"], ["run directory", "chatter", "grpo step"]),
        ("verbose", ["INFO trl.trainer: library chatter", "INFO grpokit.stages.pipeline: grpo step 1/2"], []),
    ],
)
def test_verbosity_levels_and_warnings_once(verbosity, shown, hidden):
    out = handler_output(verbosity, RECORDS)
    for text in shown:
        assert text in out
    for text in hidden:
        assert text not in out
    if verbosity != "verbose":
        assert out.count("the same sentence") == 1 and "grpo step" not in out


def test_piped_progress_prints_every_n_steps():
    class State:
        max_steps, global_step = 30, 0

    progress = console.ConsoleProgress(console.Console(stream=io.StringIO(), every=10), "grpo")
    due = []
    for step in range(1, 31):
        State.global_step = step
        if progress._due(State):
            progress.printed_at = step
            due.append(step)
    assert due == [10, 20, 30]


@pytest.fixture(scope="module")
def recipe_file(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("console")
    raw = tiny_recipe(
        tiny_model_dir,
        out,
        cold_start={"enabled": True},  # two stages: two stage lines, two progress lines
        grpo={"max_steps": 10},  # two health windows of 5: the warning, then its "still:" note
        eval={"every": 5, "every_n": 2},
        output={"dir": str(out), "name": "tiny", "save_every": 0},
    )
    path = out / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def run_cli(recipe_file, on_terminal):
    command = [sys.executable, "-m", "grpokit.cli", "train", str(recipe_file)]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "TERM": "xterm"}
    if not on_terminal:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout + done.stderr
    main, child = pty.openpty()
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=child, stderr=child, env=env, cwd=ROOT)
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert proc.wait(timeout=600) == 0, b"".join(chunks)[-3000:]
    return b"".join(chunks).decode("utf-8", "replace")


def check_common(out):
    assert re.search(r"cold_start: 2 steps of 4 examples, on cpu \(fp32\), training [\d.]+M of [\d.]+M parameters", out)
    assert re.search(r"grpo: 10 steps of 2 prompts x 4 completions, on cpu \(fp32\)", out)
    assert re.search(r"grpo 10/10  ETA 0 s  [\d.]+ s/step  reward [\d.]+ \(format [\d.]+, correctness [\d.]+\)", out)
    assert re.search(r"validation [\d.]+% \(step 5\)", out)
    assert "cold_start 2/2" in out and "grpo: done, 10 steps in" in out
    # TRL's metric dicts and tqdm bars stay off the console; per-step lines go to train.log only.
    assert "{'loss'" not in out and "'reward'" not in out and "it/s]" not in out and "grpo step " not in out
    # The health warning says its sentence once, then a short note with the new figure.
    assert out.count("of groups had identical rewards over the last 5 steps") == 1
    assert "run health (step 10): still: 100% of groups had identical rewards" in out
    assert "accuracy" in out and "run directory:" in out
    assert "FutureWarning" not in out and "warnings.warn(" not in out


def test_a_piped_run_prints_lines(recipe_file):
    out = run_cli(recipe_file, on_terminal=False)
    check_common(out)
    assert "\r" not in out and "\x1b[" not in out
    assert len(re.findall(r"^grpo \d+/10 ", out, flags=re.M)) == 10  # every step: 10 // 10
    run_dir = Path(re.search(r"run directory: (\S+)", out).group(1))
    assert "grpo step 10/10" in (run_dir / "train.log").read_text()


def screen(out):
    """What a terminal shows: a carriage return (and erase-line) starts the line again."""
    lines, current = [], ""
    for part in re.split(r"(\r\n|\n|\r\x1b\[K|\r)", out):
        if part in ("\n", "\r\n"):
            lines.append(current)
            current = ""
        elif part in ("\r\x1b[K", "\r"):
            current = ""
        else:
            current += part
    return [*lines, current]


def test_a_terminal_run_rewrites_one_line(recipe_file):
    out = run_cli(recipe_file, on_terminal=True)
    check_common(out)
    assert out.count("\r\x1b[Kgrpo ") >= 10  # each step rewrote the line
    shown = screen(out)
    # On screen: one progress line per stage, left at its last state; the evaluations' progress is gone.
    assert [line.split("  ")[0] for line in shown if re.match(r"(grpo|cold_start) \d+/", line)] == [
        "cold_start 2/2",
        "grpo 10/10",
    ]
    assert not any(re.search(r"\d+/\d+ problems", line) for line in shown)


OSC52 = "\x1b]52;c;cm0gLXJmIH4vKgo=\x07"  # sets the terminal's clipboard to `rm -rf ~/*`
CLEAR_SCREEN = "\x1b[2J\x1b[H"


def test_model_text_reaches_the_terminal_escaped():
    """A log line or progress line carrying model text cannot write the clipboard or clear the screen."""
    tty = console.Console(stream=Terminal())
    handler = console.ConsoleHandler(tty)
    record = logging.LogRecord("grpokit.eval.evaluate", logging.WARNING, __file__, 1, "wrote %s", (OSC52,), None)
    handler.emit(record)
    tty.progress(f"grpo 1/3 {CLEAR_SCREEN}\x9b2J\u202eok")
    out = tty.stream.getvalue()
    assert "\x1b]" not in out and "\x1b[2J" not in out and "\x9b" not in out and "\u202e" not in out
    assert "\\x1b]52;c;cm0gLXJmIH4vKgo=\\x07" in out and "\\x1b[2J\\x1b[H\\x9b2J\\u202eok" in out
    assert out.endswith("\n\r\x1b[Kgrpo 1/3 \\x1b[2J\\x1b[H\\x9b2J\\u202eok")  # the console's own sequences stay
