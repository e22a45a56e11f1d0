"""The confined side of grpokit's sandbox: the process that touches model output. Read this file first.

The trainer (`grpokit.sandbox.client`) starts it as `python -I -B worker.py` with an empty
environment, then speaks one JSON object per line; nothing here ever unpickles or evals a message.

1. The first line says where grpokit lives and what to preload. The worker imports the verifiers and
   runs each once (`grpokit.sandbox.scorers.warm_up`), so their lazy imports happen now.
2. It confines itself for good (`grpokit.sandbox.confine.confine`): nobody instead of root, Landlock
   (reads only under the import roots, no writes, no TCP), seccomp (no exec, sockets, writes or file
   changes), no new privileges, the environment emptied. Then it reports what held, and only then
   reads a request.
3. Each request runs in a fresh child forked from this warmed-up process. The child's copies of the
   protocol pipes are replaced by /dev/null; it gets a memory cap, a CPU cap, and a second seccomp
   filter that forbids processes, threads and signals; it writes `STARTED` into a private pipe, runs
   `module:function(*args)` in its main thread (math-verify's `signal.alarm` timeouts work there),
   writes one JSON reply into that pipe and exits. Whatever a call does dies with its child: the next
   call starts clean (the worker's own limits, priority and CPUs are out of its reach, see
   `grpokit.sandbox.confine`).
4. This process reads at most `MAX_REPLY_BYTES` from the child until the deadline, kills it past
   that, checks the reply is a JSON object of the expected shape, and writes its own reply line with
   the request's id. A child that exits before `STARTED` ran no model output: this process's own state
   keeps children from starting, and it says so (kind `start`) so that the trainer replaces it. A child
   cannot reach the trainer's pipe, so it cannot desynchronise or forge the protocol; it can only
   return a value for its own call, which the trainer range-checks.
5. A batch request (`"batch"`: a list of argument lists, one function) runs its items in order in
   one child, one fork for all of them: that is what makes scoring many completions cheap. The child
   sends each item's verdict as soon as it is known and runs the next item only once this process has
   read it and acknowledged it, so a verdict is final before any later item runs: no item can change
   the verdict of one before it. The child stops after the first item that raises (whatever it left
   behind dies with the child; the trainer sends the items after it again, to a fresh one). Items of
   one batch share the child's state, so an item can still change the verdicts of those after it: the
   trainer batches only verifiers that read screened text, and it rescores a whole batch one item per
   child when any reply is not a plain, in-range number.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
import os
import resource
import select
import signal
import sys
import time

MAX_REPLY_BYTES = 1 << 20
MAX_REQUEST_BYTES = 1 << 22
STARTED = {"started": True}  # a child's first line: it is confined and about to run model output


def main() -> None:
    protocol_in = os.dup(0)
    protocol_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(2, 1)  # anything a verifier prints goes where stderr goes, never into the protocol
    sys.stdout = sys.stderr
    requests = os.fdopen(protocol_in, "rb")
    config = json.loads(requests.readline(MAX_REQUEST_BYTES))
    sys.path[:] = config["path"]
    os.environ.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")

    # grpokit imports only now: the worker runs as a script (-I), its sys.path the trainer's, set above
    from grpokit.sandbox import confine, scorers

    for module in config["preload"]:
        importlib.import_module(module)
    scorers.warm_up(config["preload"])
    os.environ.clear()  # also unsets the C environment; the worker never had the trainer's
    gc.collect()
    gc.freeze()  # children share these pages instead of copying them on the first collection
    held = confine.confine(confine.read_roots())
    _write(protocol_out, {"ready": True, "confinement": held.to_dict()})
    fds = (protocol_in, protocol_out, 0)
    while True:
        line = requests.readline(MAX_REQUEST_BYTES)
        if not line:
            return
        request = json.loads(line)
        reply = _run_in_child(request, config["memory_limit"], devnull, fds)
        _write(protocol_out, {"id": request["id"], **reply})


def _run_in_child(request: dict, memory_limit: int, devnull: int, protocol_fds: tuple[int, ...]) -> dict:
    timeout = float(request["timeout"])
    batch = request.get("batch")
    read_end, write_end = os.pipe()  # the child's lines: `STARTED`, then one verdict per call
    ack_read, ack_write = os.pipe()  # one byte per verdict taken here: a batch's go-ahead for its next item
    pid = os.fork()
    if pid == 0:  # the child: confine further, say so, run the one call (or batch), reply, exit
        status = 1
        try:
            os.close(read_end)
            os.close(ack_write)
            for fd in protocol_fds:
                os.dup2(devnull, fd)
            _limit_child(memory_limit, timeout)
            _write(write_end, STARTED)
            if batch is None:
                _write(write_end, _call(request["function"], request["args"]))
            else:
                _call_each(request["function"], batch, write_end, ack_read)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    os.close(ack_read)
    deadline = time.monotonic() + timeout
    lines, verdicts, single = _Lines(read_end, deadline), [], None
    try:
        started = lines.next() == json.dumps(STARTED).encode()
        if not started:
            finished = lines.eof
        elif batch is None:
            single = lines.rest()  # the whole rest is the one reply
            finished = single is not None
        else:
            verdicts = _read_verdicts(lines, ack_write, len(batch))
            finished = not lines.cut_off
    finally:
        os.close(read_end)
        os.close(ack_write)
    pidfd = os.pidfd_open(pid)
    try:  # a child must exit by the deadline, whatever it sent
        left = deadline - time.monotonic()
        finished = finished and left > 0 and bool(select.select([pidfd], [], [], left)[0])
    finally:
        os.close(pidfd)
    if not finished:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if not finished:
        return {"ok": False, "kind": "timeout", "error": f"ran past {timeout:g} s"}
    if not started:  # no model output ran yet: this worker's own state keeps its children from starting
        return {"ok": False, "kind": "start", "error": f"its child failed at start-up ({_describe(status)})"}
    if batch is not None:
        items = _checked_items(verdicts, len(batch))
        if items is None:
            return {"ok": False, "kind": "error", "error": "malformed batch reply"}
        return {"ok": True, "items": items}
    reply = _parsed(single)
    if reply is None:
        return {"ok": False, "kind": "died", "error": f"no valid reply (exit status {_describe(status)})"}
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        return {"ok": False, "kind": "error", "error": "malformed reply"}
    if not reply["ok"]:
        return {"ok": False, "kind": "error", "error": str(reply.get("error", ""))[:500]}
    return {"ok": True, "value": reply.get("value")}


def _read_verdicts(lines: _Lines, ack: int, size: int) -> list:
    """A batch's verdicts, each final once read: the child runs its next item only after this
    acknowledges the one before, so no later item can reach an earlier verdict, not even in the pipe."""
    verdicts = []
    while len(verdicts) < size:
        verdict = _parsed(lines.next())
        verdicts.append(verdict)
        if not isinstance(verdict, dict) or verdict.get("ok") is not True:
            break  # the end: a failure, a malformed line, or no line at all
        try:
            os.write(ack, b"\x01")
        except OSError:  # the child is gone; the verdicts so far stand
            break
    return verdicts


def _limit_child(memory_limit: int, timeout: float) -> None:
    # imported by main() already, once sys.path was set: the worker runs as a script (-I)
    from grpokit.sandbox import confine

    cpu = math.ceil(timeout) + 1
    for limit, value in (
        (resource.RLIMIT_AS, memory_limit),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(limit, (value, value))
    confine.forbid_processes()


def _call(function: str, args: list) -> dict:
    try:
        module, _, name = function.partition(":")
        value = getattr(importlib.import_module(module), name)(*args)
        json.dumps(value, allow_nan=False)  # only plain, finite data goes back
        return {"ok": True, "value": value}
    except BaseException as err:  # the trainer decides what an error means
        return {"ok": False, "error": f"{type(err).__name__}: {err}"[:500]}


def _call_each(function: str, batch: list, out: int, ack: int) -> None:
    """`_call` for each argument list in order, each verdict sent as soon as it is known, stopping after
    the first that fails. Each next item waits for the parent's acknowledgement of the one before."""
    for args in batch:
        item = _call(function, args)
        _write(out, item)
        if not item["ok"] or os.read(ack, 1) != b"\x01":
            return  # after a failure this process may be in any state: the rest go to a fresh child


def _checked_items(items: object, size: int) -> list[dict] | None:
    """A batch's per-item replies in plain shape, or None: 1 to `size` of them, only the last may fail,
    and fewer than `size` only when the last one failed."""
    if not isinstance(items, list) or not 1 <= len(items) <= size:
        return None
    if not all(isinstance(item, dict) and isinstance(item.get("ok"), bool) for item in items):
        return None
    if not all(item["ok"] for item in items[:-1]) or (len(items) < size and items[-1]["ok"]):
        return None
    return [
        {"ok": True, "value": item.get("value")}
        if item["ok"]
        else {"ok": False, "error": str(item.get("error", ""))[:500]}
        for item in items
    ]


class _Lines:
    """The child's lines, read until `deadline` and `MAX_REPLY_BYTES` in all (`cut_off` past either)."""

    def __init__(self, fd: int, deadline: float) -> None:
        self.fd, self.deadline, self.buffer, self.size, self.cut_off, self.eof = fd, deadline, b"", 0, False, False

    def next(self) -> bytes | None:
        """The next whole line, or None at the end of the pipe or when cut off."""
        while b"\n" not in self.buffer:
            if self.eof or not self._read():
                return None
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def rest(self) -> bytes | None:
        """Everything left until the child closes the pipe, or None when cut off."""
        while not self.eof:
            if not self._read():
                return None
        return self.buffer

    def _read(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0 or not select.select([self.fd], [], [], left)[0]:
            self.cut_off = True
            return False
        chunk = os.read(self.fd, 65536)
        self.eof, self.size, self.buffer = not chunk, self.size + len(chunk), self.buffer + chunk
        self.cut_off = self.size > MAX_REPLY_BYTES
        return not self.cut_off


def _write(fd: int, message: dict) -> None:
    try:
        data = json.dumps(message, allow_nan=False).encode() + b"\n"
    except (TypeError, ValueError) as err:
        data = json.dumps({"ok": False, "error": f"unserialisable result: {err}"[:500]}).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _parsed(line: bytes | None) -> object:
    """A line as plain JSON data, or None."""
    try:
        return None if line is None else json.loads(line, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed")


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.WEXITSTATUS(status)}"


if __name__ == "__main__":
    main()
