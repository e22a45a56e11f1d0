"""The `grpokit` command: argument parsing and dispatch (`grpokit.cli.commands`)."""

from grpokit.cli.commands import main

__all__ = ["main"]
