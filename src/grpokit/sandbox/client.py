"""Score untrusted model output in a separate, confined worker process: the trainer's side.

Some verifiers evaluate Python under the hood (sympy's `parse_expr` calls `eval`, and so do several
reasoning-gym scorers), and math-verify's timeouts need a main thread. grpokit screens model text
before any such verifier sees it (`grpokit.sandbox.scorers`), and runs the verifiers in one long-lived worker
(`grpokit.sandbox.worker`, the confined side), which forks a fresh, further-confined child per call.

This side holds these promises:
- **Plain data.** Requests and replies are JSON lines; a reply is checked for its request id and
  shape, and `score` accepts only a finite number within the caller's bounds. Nothing the worker
  sends is unpickled or evaluated, so nothing it sends can run code here.
- **Batches score like single calls.** `score_many` sends many argument lists in one request (one
  round trip, one confined child) and holds each item to `score`'s checks. A batch that times out,
  dies, or replies anything but in-range numbers is scored again one item per child, so a failure
  lands on the item that caused it and never on its batch-mates.
- **Time.** The worker kills a call's child at its timeout; if the worker itself falls silent, this
  side kills it and starts another on the next call.
- **A broken worker is replaced.** When a worker that has served calls reports that a child failed
  at start-up (before any model output ran, so its own state is to blame), this side replaces it and
  sends the request once more; a fresh worker whose children cannot start is reported, not restarted.
- **Confinement or refusal.** The worker reports which kernel mechanisms held (`grpokit.sandbox.confine`).
  When one is missing the start-up log says which, and calls are refused unless the recipe opts in
  (`sandbox.allow_unconfined: true`).

>>> with Sandbox(preload=()) as box:
...     box.call("operator:add", 2, 3), box.score_many("operator:truediv", [[1, 2], [1, 0], [1, 1]])
(5, [0.5, SandboxError('operator:truediv: ZeroDivisionError: division by zero'), 1.0])
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import logging
import math
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grpokit.errors import SandboxError, SandboxRefused, SandboxTimeout
from grpokit.recipe.schema import SandboxSection
from grpokit.sandbox.confine import Confinement

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5.0
START_TIMEOUT = 180.0  # room to preload math-verify and reasoning-gym on a busy machine
MEMORY_LIMIT_BYTES = 4 * 1024**3
MAX_LINE_BYTES = 1 << 21
MAX_REQUEST_BYTES = 1 << 22  # the worker reads no longer line
MAX_BATCH = 256  # items per round trip in `score_many`
BATCH_ITEM_TIMEOUT = 0.25  # seconds a batch gets per item on top of one call's timeout
_batch_limit = MAX_BATCH  # the recipe's sandbox.batch
WORKER = Path(__file__).with_name("worker.py")
_allow_unconfined = False


def share_children(items: int) -> None:
    """The recipe's `sandbox.batch`: at most this many items of one `score_many` share a confined child
    (1: a fresh child for every completion, so no completion can touch another's verdict)."""
    global _batch_limit
    if items < 1:
        raise ValueError(f"sandbox.batch={items}; use >= 1")
    _batch_limit = min(int(items), MAX_BATCH)


def allow_unconfined(allowed: bool) -> None:
    """The recipe's `sandbox.allow_unconfined`: run verifiers even where a kernel mechanism is missing."""
    global _allow_unconfined
    _allow_unconfined = bool(allowed)


def configure(section: SandboxSection) -> None:
    """Apply a recipe's `sandbox:` section to this process (`allow_unconfined`, `share_children`). Whatever
    runs a recipe's scoring (training, evaluation, `rewards check`) calls it once, after loading the recipe."""
    allow_unconfined(section.allow_unconfined)
    share_children(section.batch)


@contextlib.contextmanager
def configured(section: SandboxSection) -> Iterator[None]:
    """`configure(section)` while the block runs, then the settings from before it again: a check that
    scores in the sandbox scores as the run will, and leaves this process as it found it."""
    global _allow_unconfined, _batch_limit
    saved = _allow_unconfined, _batch_limit
    configure(section)
    try:
        yield
    finally:
        _allow_unconfined, _batch_limit = saved


class Sandbox:
    """A restartable confined worker. Thread-safe: calls from several threads are served one at a time."""

    def __init__(
        self,
        memory_limit: int = MEMORY_LIMIT_BYTES,
        preload: tuple[str, ...] = ("math_verify",),
        allow_unconfined: bool | None = None,
    ) -> None:
        self.memory_limit = memory_limit
        self.preload = tuple(preload)  # imported (and warmed up) before the worker confines itself
        self.allow_unconfined = allow_unconfined
        self.confinement: Confinement | None = None
        self.restarts = 0  # workers killed: they fell silent, broke the protocol, or their children stopped starting
        self._children_started = False  # whether a child of the current worker ever got past its start-up
        self._proc: subprocess.Popen | None = None
        self._refused: str | None = None  # why this machine cannot confine the worker, once known
        self._buffer = b""
        self._next_id = 0
        self._lock = threading.Lock()

    @property
    def requests(self) -> int:
        """Requests sent so far: one round trip each, a batch counting once."""
        return self._next_id

    def call(self, function: str, *args: Any, timeout: float = DEFAULT_TIMEOUT) -> Any:
        """Run `module:function(*args)` in a confined child and return its JSON result."""
        reply = self._request(function, {"args": list(args)}, timeout)
        if reply["ok"]:
            return reply["value"]
        if reply["kind"] == "timeout":
            raise SandboxTimeout(f"{function} ran past {timeout:g} s; its process was killed")
        raise SandboxError(f"{function}: {reply['error']}" + (" (its process died)" if reply["kind"] == "died" else ""))

    def score(
        self, function: str, *args: Any, bounds: tuple[float, float] = (0.0, 1.0), timeout: float = DEFAULT_TIMEOUT
    ) -> float:
        """`call` for a verifier: the reply must be a finite number within `bounds`, or this raises."""
        return _checked_score(function, self.call(function, *args, timeout=timeout), bounds)

    def score_many(
        self,
        function: str,
        arg_lists: list[list[Any]],
        bounds: tuple[float, float] = (0.0, 1.0),
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[float | SandboxError]:
        """`score(function, *args)` for each of `arg_lists`, up to `MAX_BATCH` items per round trip.

        Per item: the score, or the `SandboxError` that `score` would have raised for it alone.
        `timeout` is one item's, as in `score`; a batch gets `BATCH_ITEM_TIMEOUT` more per item. An
        item that raises ends its child's batch and the items after it go to a fresh child; a batch
        that fails as a whole (timeout, a dead child, a reply out of range) is scored one item per
        child. `SandboxRefused` is raised, as from `score`.
        """
        results: list[float | SandboxError] = []
        while len(results) < len(arg_lists):
            chunk = arg_lists[len(results) : len(results) + _batch_limit]
            scores = self._score_batch(function, chunk, bounds, timeout) if len(chunk) > 1 else None
            if scores is None:  # one by one, so a failure lands on the item that caused it
                scores = [self._score_alone(function, args, bounds, timeout) for args in chunk]
            results += scores
        return results

    def _score_batch(
        self, function: str, chunk: list[list[Any]], bounds: tuple[float, float], timeout: float
    ) -> list[float | SandboxError] | None:
        """The scores of a prefix of `chunk` from one round trip, or None when the batch failed as a whole."""
        batch_timeout = timeout + BATCH_ITEM_TIMEOUT * len(chunk)
        try:
            reply = self._request(function, {"batch": [list(a) for a in chunk]}, batch_timeout)
        except SandboxRefused:
            raise
        except SandboxError:
            return None
        if not reply["ok"]:
            return None
        scores: list[float | SandboxError] = []
        for item in reply["items"]:
            if not item["ok"]:
                scores.append(SandboxError(f"{function}: {item['error']}"))
                continue
            try:
                scores.append(_checked_score(function, item["value"], bounds))
            except SandboxError:
                return None  # no verifier replies that: distrust every reply from this child
        return scores

    def _score_alone(
        self, function: str, args: list[Any], bounds: tuple[float, float], timeout: float
    ) -> float | SandboxError:
        try:
            return self.score(function, *args, bounds=bounds, timeout=timeout)
        except SandboxRefused:
            raise
        except SandboxError as err:
            return err

    def _request(self, function: str, payload: dict[str, Any], timeout: float) -> dict:
        """Send one request and return the worker's checked reply; a broken worker is killed (and restarted
        by the next request) and raises. A worker whose children stopped starting is replaced at once."""
        with self._lock:
            reply = self._exchange(function, payload, timeout)
            if not reply["ok"] and reply["kind"] == "start" and self._children_started:
                # Its children die before any model output runs (a limit set on it from outside, say):
                # every later call would fail the same way, so a fresh worker takes this one.
                logger.warning("sandbox worker replaced: %s", reply["error"])
                self._kill()
                self.restarts += 1
                reply = self._exchange(function, payload, timeout)
            if reply["ok"] or reply["kind"] != "start":
                self._children_started = True
            elif not self._children_started:
                reply = {**reply, "error": reply["error"] + " in a fresh worker; is memory_limit above this "
                         "process's own RLIMIT_AS?"}  # fmt: skip
            return reply

    def _exchange(self, function: str, payload: dict[str, Any], timeout: float) -> dict:
        proc = self._ensure_started()
        self._next_id += 1
        request = {"id": self._next_id, "function": function, **payload, "timeout": timeout}
        try:
            data = json.dumps(request, allow_nan=False).encode() + b"\n"
        except (TypeError, ValueError) as err:
            raise SandboxError(f"{function}: arguments are not plain JSON data: {err}") from None
        if len(data) > MAX_REQUEST_BYTES:
            raise SandboxError(f"{function}: the request is {len(data)} bytes; the worker reads {MAX_REQUEST_BYTES}")
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
            return self._read_reply(proc, time.monotonic() + timeout + 10.0, len(payload.get("batch", ())))
        except (OSError, ValueError, SandboxError) as err:
            code = proc.poll()
            self._kill()
            self.restarts += 1
            raise SandboxError(f"{function}: sandbox worker failed (exit code {code}): {err}") from None

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
        if self._refused:
            raise SandboxRefused(self._refused)
        self._buffer = b""
        self._children_started = False
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd="/",
            env={},  # the trainer's tokens and keys stay here
        )
        self._proc = proc
        config = {"path": [p for p in sys.path if p], "preload": list(self.preload), "memory_limit": self.memory_limit}
        try:
            proc.stdin.write(json.dumps(config).encode() + b"\n")
            proc.stdin.flush()
            hello = json.loads(self._read_line(proc, time.monotonic() + START_TIMEOUT))
            self.confinement = Confinement(**{**hello["confinement"], "notes": tuple(hello["confinement"]["notes"])})
        except (OSError, ValueError, KeyError, TypeError, SandboxError) as err:
            self._kill()
            raise SandboxError(f"the sandbox worker did not start: {err}") from None
        missing = self.confinement.missing()
        allowed = _allow_unconfined if self.allow_unconfined is None else self.allow_unconfined
        if missing:
            logger.warning(
                "sandbox worker is missing %s on this machine%s", ", ".join(missing),
                "; running anyway (sandbox.allow_unconfined)" if allowed else "; verifiers that need it are refused",
            )  # fmt: skip
            if not allowed:
                self._kill()
                self._refused = (
                    f"the sandbox lacks {', '.join(missing)} here (see grpokit env); "
                    "set sandbox.allow_unconfined: true in the recipe to score anyway"
                )
                raise SandboxRefused(self._refused)
        return proc

    def _read_reply(self, proc: subprocess.Popen, deadline: float, batch: int) -> dict:
        reply = json.loads(self._read_line(proc, deadline), parse_constant=_reject_constant)
        if not isinstance(reply, dict) or reply.get("id") != self._next_id or not isinstance(reply.get("ok"), bool):
            raise SandboxError(f"malformed reply {str(reply)[:80]!r}")
        if not reply["ok"] and (reply.get("kind") not in ("timeout", "error", "died", "start") or "error" not in reply):
            raise SandboxError(f"malformed error reply {str(reply)[:80]!r}")
        if reply["ok"] and not (_plain_items(reply.get("items"), batch) if batch else "value" in reply):
            raise SandboxError(f"malformed reply {str(reply)[:80]!r}")
        return reply

    def _read_line(self, proc: subprocess.Popen, deadline: float) -> bytes:
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise SandboxError("the worker fell silent")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise SandboxError("the worker closed its pipe")
            self._buffer += chunk
            if not self._buffer.startswith(b"{"):  # e.g. a pickle: refused unread, never waited out
                raise SandboxError("the reply is not a JSON object")
            if len(self._buffer) > MAX_LINE_BYTES:
                raise SandboxError("reply too long")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    stream.close()
            self._proc = None


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a finite number")


def _checked_score(function: str, value: Any, bounds: tuple[float, float]) -> float:
    # Compared, never converted first: float(10 ** 400) raises OverflowError, which is not a SandboxError.
    if type(value) not in (bool, int, float) or not bounds[0] <= value <= bounds[1] or abs(value) == math.inf:
        raise SandboxError(f"{function} replied {str(value)[:80]!r}; expected a number in {list(bounds)}")
    return float(value)


def _plain_items(items: Any, size: int) -> bool:
    """A batch reply's items as the worker promises them: 1 to `size` of them, each `{"ok": true, "value"}`
    or `{"ok": false, "error": str}`, only the last one failed, and fewer than `size` only after a failure."""
    if not isinstance(items, list) or not 1 <= len(items) <= size:
        return False
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("ok"), bool):
            return False
        if "value" not in item if item["ok"] else not isinstance(item.get("error"), str):
            return False
    return all(item["ok"] for item in items[:-1]) and (len(items) == size or not items[-1]["ok"])


_shared: Sandbox | None = None
_shared_lock = threading.Lock()


def shared_sandbox() -> Sandbox:
    """The process-wide worker that tasks share (started on first use, stopped at exit)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            preload = tuple(m for m in ("math_verify", "reasoning_gym") if importlib.util.find_spec(m) is not None)
            _shared = Sandbox(preload=preload)
            atexit.register(_shared.close)
        return _shared
