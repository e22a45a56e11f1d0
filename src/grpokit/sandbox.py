"""Score untrusted model output in a separate, locked-down worker process with a hard timeout.

Some verifiers evaluate Python under the hood: sympy's `parse_expr` calls `eval`, and several
reasoning-gym scorers hand the model's answer to it. math-verify bounds its own work with
`signal.alarm`, which only works in a process's main thread; TRL calls reward functions from wherever
it runs, so those timeouts would silently be off. grpokit therefore runs such verifiers in one
long-lived worker process:

- the parent waits at most `timeout` seconds per call; a worker that overruns is killed and restarted
  lazily, and the call raises `SandboxTimeout`;
- the worker runs each call in its own main thread (so math-verify's own timeouts work there too),
  in an empty temporary directory, with a memory cap, no new processes (RLIMIT_NPROC 0), and an audit
  hook that refuses process creation, writing or deleting files, sockets and ctypes;
- calls name a trusted function as "module:function"; only the arguments come from the model.

>>> with Sandbox() as box:
...     box.call("operator:add", 2, 3)
5
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import pickle
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from typing import Any

DEFAULT_TIMEOUT = 5.0
MEMORY_LIMIT_BYTES = 4 * 1024**3
_HEADER = struct.Struct("!I")


class SandboxError(RuntimeError):
    """The worker failed to answer: it crashed, or the function raised (the message says which)."""


class SandboxTimeout(SandboxError):
    """The call ran past its timeout; the worker was killed and will be restarted on the next call."""


class Sandbox:
    """A restartable worker process. Thread-safe: calls from several threads are served one at a time."""

    def __init__(self, memory_limit: int = MEMORY_LIMIT_BYTES, preload: tuple[str, ...] = ("math_verify",)) -> None:
        self.memory_limit = memory_limit
        # Libraries the worker imports before it locks down (imports may load native code, which the
        # locked-down worker refuses).
        self.preload = tuple(preload)
        self._proc: subprocess.Popen | None = None
        self._workdir: str | None = None
        self._lock = threading.Lock()
        self.restarts = 0  # workers killed after a timeout or a crash

    def call(self, function: str, *args: Any, timeout: float = DEFAULT_TIMEOUT) -> Any:
        """Run `module:function(*args)` in the worker and return its result."""
        with self._lock:
            proc = self._ensure_started()
            try:
                _send(proc.stdin, (function, args))
                status, value = _receive(proc.stdout, timeout)
            except SandboxTimeout:
                self._kill()
                self.restarts += 1
                raise SandboxTimeout(f"{function} ran past {timeout:g} s; the sandbox worker was restarted") from None
            except (OSError, EOFError, pickle.UnpicklingError) as err:
                code = proc.poll()
                self._kill()
                self.restarts += 1
                raise SandboxError(f"{function}: sandbox worker died (exit code {code}): {err}") from None
        if status == "error":
            raise SandboxError(f"{function} raised {value}")
        return value

    def close(self) -> None:
        with self._lock:
            self._kill()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure_started(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._workdir = tempfile.mkdtemp(prefix="grpokit-sandbox-")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "grpokit.sandbox", str(self.memory_limit), ",".join(self.preload)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self._workdir,
            env=env,
        )
        return self._proc

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    stream.close()
            self._proc = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


_shared: Sandbox | None = None
_shared_lock = threading.Lock()


def shared_sandbox() -> Sandbox:
    """The process-wide worker that tasks share (started on first use, stopped at exit)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            import atexit

            preload = tuple(m for m in ("math_verify", "reasoning_gym") if importlib.util.find_spec(m) is not None)
            _shared = Sandbox(preload=preload)
            atexit.register(_shared.close)
        return _shared


def _send(stream: Any, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: Any, timeout: float | None) -> Any:
    if timeout is not None:
        ready, _, _ = select.select([stream], [], [], timeout)
        if not ready:
            raise SandboxTimeout
    header = _read_exactly(stream, _HEADER.size)
    return pickle.loads(_read_exactly(stream, _HEADER.unpack(header)[0]))


def _read_exactly(stream: Any, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise EOFError("sandbox worker closed its pipe")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


# ---------------------------------------------------------------- the worker side

_BLOCKED_EVENTS = (
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "subprocess.Popen",
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.chown",
    "os.link",
    "os.symlink",
    "os.truncate",
    "os.putenv",
    "os.unsetenv",
    "os.chdir",
    "shutil.",
    "socket.",
    "ctypes.",
    "pty.",
    "webbrowser.",
    "urllib.",
    "http.",
    "ftplib.",
    "smtplib.",
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _audit(event: str, args: tuple) -> None:
    if event.startswith(_BLOCKED_EVENTS):
        raise PermissionError(f"blocked in the grpokit sandbox: {event}")
    if event == "open" and len(args) >= 3:
        mode, flags = args[1], args[2]
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
        if writes:
            raise PermissionError(f"blocked in the grpokit sandbox: writing {args[0]!r}")


def _lock_down(memory_limit: int) -> None:
    import resource

    for limit, value in ((resource.RLIMIT_AS, memory_limit), (resource.RLIMIT_NPROC, 0), (resource.RLIMIT_FSIZE, 0)):
        with contextlib.suppress(ValueError, OSError):  # not permitted here: the audit hook still applies
            resource.setrlimit(limit, (value, value))
    sys.dont_write_bytecode = True
    sys.addaudithook(_audit)


def _resolve(function: str) -> Any:
    module, _, name = function.partition(":")
    return getattr(importlib.import_module(module), name)


def _serve(memory_limit: int, preload: list[str]) -> None:
    # The protocol owns the real stdout; anything a scorer prints goes to stderr (discarded).
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    protocol_in = sys.stdin.buffer
    from grpokit import scorers

    for module in preload:
        importlib.import_module(module)
    scorers.warm_up(preload)  # runs each verifier once, so its lazy imports happen before the lock-down
    _lock_down(memory_limit)
    while True:
        try:
            function, args = _receive(protocol_in, None)
        except EOFError:
            return
        try:
            reply = ("ok", _resolve(function)(*args))
        except BaseException as err:  # the parent decides what an error means; the worker lives on
            if isinstance(err, KeyboardInterrupt):
                return
            reply = ("error", f"{type(err).__name__}: {err}"[:500])
        try:
            _send(protocol_out, reply)
        except (pickle.PicklingError, TypeError) as err:
            _send(protocol_out, ("error", f"unpicklable result: {err}"[:500]))


if __name__ == "__main__":
    _serve(int(sys.argv[1]), [m for m in sys.argv[2].split(",") if m])
