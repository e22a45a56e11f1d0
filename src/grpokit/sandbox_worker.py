"""The confined side of grpokit's sandbox: the process that touches model output. Read this file first.

The trainer (`grpokit.sandbox`) starts it as `python -I -B sandbox_worker.py` with an empty
environment, then speaks one JSON object per line; nothing here ever unpickles or evals a message.

1. The first line says where grpokit lives and what to preload. The worker imports the verifiers and
   runs each once (`grpokit.scorers.warm_up`), so their lazy imports happen now.
2. It confines itself for good (`grpokit.confine.confine`): nobody instead of root, Landlock
   (reads only under the import roots, no writes, no TCP), seccomp (no exec, sockets, writes or file
   changes), no new privileges, the environment emptied. Then it reports what held, and only then
   reads a request.
3. Each request runs in a fresh child forked from this warmed-up process. The child's copies of the
   protocol pipes are replaced by /dev/null; it gets a memory cap, a CPU cap, and a second seccomp
   filter that forbids processes, threads and signals; it runs `module:function(*args)` in its main
   thread (math-verify's `signal.alarm` timeouts work there), writes one JSON reply into a private
   pipe and exits. Whatever a call does dies with its child: the next call starts clean.
4. This process reads at most `MAX_REPLY_BYTES` from the child until the deadline, kills it past
   that, checks the reply is a JSON object of the expected shape, and writes its own reply line with
   the request's id. A child cannot reach the trainer's pipe, so it cannot desynchronise or forge
   the protocol; it can only return a value for its own call, which the trainer range-checks.
5. A batch request (`"batch"`: a list of argument lists, one function) runs its items in order in
   one child, one fork for all of them: that is what makes scoring many completions cheap. The child
   stops after the first item that raises (whatever it left behind dies with the child; the trainer
   sends the items after it again, to a fresh one) and replies one result per item it ran. Items of
   one batch share the child's state, so the trainer batches only verifiers that read screened text,
   and it rescores a whole batch one item per child when any reply is not a plain, in-range number.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
import os
import select
import signal
import sys
import time

MAX_REPLY_BYTES = 1 << 20
MAX_REQUEST_BYTES = 1 << 22


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

    from grpokit import confine, scorers

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
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: confine further, run the one call (or batch), reply, exit
        status = 1
        try:
            os.close(read_end)
            for fd in protocol_fds:
                os.dup2(devnull, fd)
            _limit_child(memory_limit, timeout)
            if "batch" in request:
                _write(write_end, _call_each(request["function"], request["batch"]))
            else:
                _write(write_end, _call(request["function"], request["args"]))
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    deadline = time.monotonic() + timeout
    try:
        data, finished = _read_until(read_end, deadline)
    finally:
        os.close(read_end)
    pidfd = os.pidfd_open(pid)
    try:  # a child that closed its pipe must still exit by the deadline
        left = deadline - time.monotonic()
        finished = finished and left > 0 and bool(select.select([pidfd], [], [], left)[0])
    finally:
        os.close(pidfd)
    if not finished:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if not finished:
        return {"ok": False, "kind": "timeout", "error": f"ran past {timeout:g} s"}
    try:
        reply = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return {"ok": False, "kind": "died", "error": f"no valid reply (exit status {_describe(status)})"}
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        return {"ok": False, "kind": "error", "error": "malformed reply"}
    if not reply["ok"]:
        return {"ok": False, "kind": "error", "error": str(reply.get("error", ""))[:500]}
    if "batch" in request:
        items = _checked_items(reply.get("items"), len(request["batch"]))
        if items is None:
            return {"ok": False, "kind": "error", "error": "malformed batch reply"}
        return {"ok": True, "items": items}
    return {"ok": True, "value": reply.get("value")}


def _limit_child(memory_limit: int, timeout: float) -> None:
    import resource

    from grpokit import confine

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


def _call_each(function: str, batch: list) -> dict:
    """`_call` for each argument list in order, stopping after the first that fails."""
    items = []
    for args in batch:
        items.append(_call(function, args))
        if not items[-1]["ok"]:
            break  # this process may now be in any state: the items after it go to a fresh child
    return {"ok": True, "items": items}


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


def _read_until(fd: int, deadline: float) -> tuple[bytes, bool]:
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return b"", False
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            return b"", False


def _write(fd: int, message: dict) -> None:
    try:
        data = json.dumps(message, allow_nan=False).encode() + b"\n"
    except (TypeError, ValueError) as err:
        data = json.dumps({"ok": False, "error": f"unserialisable result: {err}"[:500]}).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed")


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.WEXITSTATUS(status)}"


if __name__ == "__main__":
    main()
