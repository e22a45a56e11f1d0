"""The errors every layer raises; this module imports nothing from grpokit."""

from __future__ import annotations

import errno
from pathlib import Path


class RecipeError(ValueError):
    """A recipe that cannot run; the message names the key and the fix."""


class HubUnreachable(OSError):
    """The id is not cached and the hub cannot be reached."""


class HubAuthError(OSError):
    """No Hugging Face token, or the hub refused it; the message says how to log in."""


class DiskFullError(OSError):
    """A save found (or hit) too little free space; the message says where, how much, and how to resume."""

    def __init__(self, message: str, folder: Path, needed: int, free: int, kept: Path | None) -> None:
        super().__init__(errno.ENOSPC, message)
        self.message, self.folder, self.needed, self.free, self.kept = message, folder, needed, free, kept

    def __str__(self) -> str:
        return self.message


class SandboxError(RuntimeError):
    """The call failed: the function raised, its child died, or the reply was not acceptable."""


class SandboxTimeout(SandboxError):
    """The call ran past its timeout; its process was killed."""


class SandboxRefused(SandboxError):
    """The worker is not fully confined on this machine and the recipe did not opt in."""


class ModelNotFoundError(FileNotFoundError):
    """The embedded model's package or its weights file is missing; the message says how to install it."""


class TrainingInterrupted(Exception):
    """Training stopped on a signal after saving a checkpoint; the message says how to resume."""
