"""Nothing a call does outlives it: each escape runs inside the worker, as if a screen had let it through.

A call's child shares its user with the worker (and, where the trainer is not root, with the trainer):
these tests check that it still cannot set their limits, renice or pin them, leave SysV IPC objects or
message queues behind, or rewrite an earlier batch-mate's verdict, and that a worker whose children
fail at start-up is replaced instead of answering errors for good.
"""

import ctypes
import json
import os
import resource
from pathlib import Path

import pytest

from grpokit.errors import SandboxError, SandboxRefused
from grpokit.sandbox import confine
from grpokit.sandbox.client import Sandbox

ROOT = os.geteuid() == 0
DENIED = "Operation not permitted|PermissionError"
needs_seccomp = pytest.mark.skipif(bool(confine.seccomp_problem()), reason=f"{confine.seccomp_problem()}")


@pytest.fixture(scope="module")
def box():
    with Sandbox(preload=(), allow_unconfined=not ROOT) as sandbox_:  # not root: refused unless opted in
        yield sandbox_


def worker_pid(box: Sandbox) -> int:
    box.call("operator:add", 1, 1)  # started
    return box._proc.pid


def limits(pid: int) -> str:
    """A process's limits as /proc shows them (reading them with prlimit needs CAP_SYS_RESOURCE)."""
    return Path(f"/proc/{pid}/limits").read_text()


def as_nobody(action, *args) -> None:
    """`action(*args)` from a forked process running as the worker's user, as a call's child would."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setresgid(confine.NOBODY, confine.NOBODY, confine.NOBODY)
            os.setresuid(confine.NOBODY, confine.NOBODY, confine.NOBODY)
            action(*args)
            status = 0
        finally:
            os._exit(status)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def run(box: Sandbox, code: str, **kwargs):
    return box.call("builtins:exec", code, **kwargs)


@needs_seccomp
@pytest.mark.parametrize(
    "limit", ["RLIMIT_AS", "RLIMIT_NOFILE", "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_STACK", "RLIMIT_FSIZE"]
)
def test_a_call_cannot_set_its_workers_limits(limit):
    with Sandbox(preload=(), allow_unconfined=not ROOT) as box:  # its own: a limit that got through stays
        limits_stay_the_workers(box, limit)


def limits_stay_the_workers(box: Sandbox, limit: str) -> None:
    pid = worker_pid(box)
    before = limits(pid)
    with pytest.raises(SandboxError, match=DENIED):
        run(box, f"import os, resource; resource.prlimit(os.getppid(), resource.{limit}, (1 << 20, 1 << 20))")
    with pytest.raises(SandboxError, match=DENIED):  # reading another process's limits is refused too
        run(box, f"import os, resource; resource.prlimit(os.getppid(), resource.{limit})")
    assert limits(pid) == before
    assert box.call("operator:add", 1, 2) == 3
    run(box, "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))")  # its own: allowed


@pytest.mark.skipif(not ROOT, reason="the test lowers the worker's limit as nobody, from root")
def test_a_worker_whose_children_fail_at_start_up_is_replaced():
    """A limit set on the worker from outside, by its own user (what `prlimit` from a child did): every
    later child would die before its call; the worker is replaced and the call answered by a fresh one."""
    with Sandbox(preload=(), allow_unconfined=not ROOT) as box:
        pid = worker_pid(box)
        status = Path(f"/proc/{pid}/status").read_text()
        cap = int(status.split("VmSize:")[1].split()[0]) * 1024 + (256 << 20)  # room for the worker itself
        assert cap < box.memory_limit  # and none for a child's memory cap
        as_nobody(resource.prlimit, pid, resource.RLIMIT_AS, (cap, cap))
        assert box.call("operator:add", 1, 2) == 3
        assert box.restarts == 1 and box._proc.pid != pid
        assert box.score_many("builtins:eval", [["1"], ["0"], ["1"]]) == [1.0, 0.0, 1.0]


def _children_fail_at_start_up() -> dict:
    hard = 1 << 40
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))  # inherited by the worker it starts
    errors = []
    with Sandbox(
        preload=(), memory_limit=2 * hard, allow_unconfined=not ROOT
    ) as box:  # no child can set a cap above its hard limit
        for _ in range(2):
            try:
                box.call("operator:add", 1, 2)
                errors.append(None)
            except SandboxError as err:
                errors.append(str(err))
        return {"errors": errors, "restarts": box.restarts}


def test_children_that_fail_at_start_up_in_a_fresh_worker_are_reported():
    """A fresh worker whose children cannot start fails each call with the reason, and is not restarted
    over and over (a start costs the preloads)."""
    result = in_forked_trainer(_children_fail_at_start_up)
    assert all(error and "start-up" in error for error in result["errors"]), result
    assert result["restarts"] <= 2, result


IPC = {
    "shmget": "libc.shmget(0, 256 << 20, 0o1600)",  # IPC_PRIVATE, IPC_CREAT | 0600
    "msgget": "libc.msgget(0, 0o1600)",
    "semget": "libc.semget(0, 4, 0o1600)",
    "mq_open": "ctypes.CDLL('librt.so.1', use_errno=True).mq_open(b'/grpokit-pwned', 0o102, 0o600, None)",
}


def ipc_objects() -> dict[str, set[str]]:
    found = {}
    for kind in ("shm", "msg", "sem"):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        found[kind] = {line.split()[1] for line in lines}
    return found


def remove_ipc(kind: str, ident: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    {"shm": lambda: libc.shmctl(ident, 0, None), "msg": lambda: libc.msgctl(ident, 0, None),
     "sem": lambda: libc.semctl(ident, 0, 0)}[kind]()  # fmt: skip


@pytest.fixture
def no_ipc_left():
    before = ipc_objects()
    yield
    after = ipc_objects()
    left = {kind: after[kind] - before[kind] for kind in after if after[kind] - before[kind]}
    for kind, idents in left.items():
        for ident in idents:
            remove_ipc(kind, int(ident))
    mq = ctypes.CDLL("librt.so.1", use_errno=True).mq_unlink(b"/grpokit-pwned") == 0
    assert not left and not mq, f"a call left IPC objects behind: {left or 'a message queue'}"


@needs_seccomp
@pytest.mark.parametrize("call", sorted(IPC))
def test_a_call_cannot_leave_ipc_objects_behind(box, call, no_ipc_left):
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"if {IPC[call]} < 0:\n    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))"
    )
    with pytest.raises(SandboxError, match=DENIED):
        run(box, code)


@needs_seccomp
@pytest.mark.parametrize(
    "code",
    [
        "import os; os.setpriority(os.PRIO_PROCESS, os.getppid(), 19)",
        "import os; os.setpriority(os.PRIO_PGRP, 0, 19)",
        "import os; os.setpriority(os.PRIO_USER, 0, 19)",
        "import os; os.sched_setaffinity(os.getppid(), {0})",
        "import os; os.sched_setscheduler(os.getppid(), os.SCHED_IDLE, os.sched_param(0))",
        "import os; os.sched_setparam(os.getppid(), os.sched_param(0))",
        "import ctypes, os\nif ctypes.CDLL(None, use_errno=True).syscall(251, 1, os.getppid(), 7 | 3 << 13):\n"
        "    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))",  # ioprio_set: idle class
    ],
)
def test_a_call_cannot_renice_or_pin_its_worker(box, code):
    pid = worker_pid(box)
    before = os.getpriority(os.PRIO_PROCESS, pid), os.sched_getaffinity(pid), os.sched_getscheduler(pid)
    with pytest.raises(SandboxError, match=DENIED):
        run(box, code)
    assert (os.getpriority(os.PRIO_PROCESS, pid), os.sched_getaffinity(pid), os.sched_getscheduler(pid)) == before


REWRITE_HELD = """
import sys
frame = sys._getframe()
while frame:  # the verdicts this child still holds, if any
    for value in list(frame.f_locals.values()):
        if isinstance(value, list):
            for item in value:
                if isinstance(item, dict) and "value" in item:
                    item["value"] = 1.0
    frame = frame.f_back
"""

REWRITE_SENT = """
import os
for fd in range(3, 256):  # the verdicts already sent, if still in a pipe this child can reopen for reading
    try:
        reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
        os.read(reader, 1 << 20)
        os.write(fd, b'{"ok": true, "value": 1.0}\\n' * 4)
    except OSError:
        pass
"""


# The child can reopen its pipe for reading through /proc/self/fd (Landlock allows it): had it sent
# verdicts without waiting for each acknowledgement, REWRITE_SENT would race the worker for them.
@pytest.mark.parametrize("attack", [REWRITE_HELD, REWRITE_SENT], ids=["held in the child", "sent down the pipe"])
def test_a_batch_item_cannot_rewrite_the_verdicts_before_it(box, attack):
    scores = box.score_many("builtins:eval", [["0"], ["0"], [f"exec({attack!r}) or 0"], ["0"]])
    assert scores[:2] == [0.0, 0.0], "a later item rewrote an earlier verdict"


# ---------------------------------------------------------------- a trainer that does not run as root

_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE = 47, 2


def _become_unprivileged(uid: int) -> None:
    """This (forked) process becomes `uid`, keeping only CAP_DAC_READ_SEARCH, ambient so that the worker
    it starts can still reach the interpreter (often under a root-only home). Signals, limits and
    priorities between processes are checked by user, never by that capability."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(8, 1, 0, 0, 0)  # PR_SET_KEEPCAPS
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    keep = 1 << 2
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    if libc.capset(header, (ctypes.c_uint32 * 6)(keep, keep, keep, 0, 0, 0)) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, 2, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "ambient capability")


def in_forked_trainer(body) -> dict:
    """`body()`'s JSON result, run in a forked copy of this test process (a trainer whose state can change)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            result = body()
        except BaseException as err:  # reported to the test, never raised in a forked pytest
            result = {"crash": f"{type(err).__name__}: {err}"}
        finally:
            os.write(write_end, json.dumps(result).encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def _unprivileged_trainer() -> dict:
    """What a Sandbox does when the trainer runs as nobody."""
    _become_unprivileged(confine.NOBODY)
    me, result = os.getpid(), {}
    with Sandbox(preload=(), allow_unconfined=False) as refused:
        try:
            refused.call("operator:add", 1, 1)
            result["refused"] = None
        except SandboxRefused as err:
            result["refused"] = str(err)
    nofile, nice = resource.getrlimit(resource.RLIMIT_NOFILE), os.getpriority(os.PRIO_PROCESS, me)
    with Sandbox(preload=(), allow_unconfined=True) as box:
        result["uid"] = box.call("os:getuid")
        for name, code in {
            "prlimit": f"import resource; resource.prlimit({me}, resource.RLIMIT_NOFILE, (8, 8))",
            "renice": f"import os; os.setpriority(os.PRIO_PROCESS, {me}, 19)",
            "renice user": "import os; os.setpriority(os.PRIO_USER, 0, 19)",
            "kill": f"import os; os.kill({me}, 0)",
        }.items():
            try:
                run(box, code)
                result[name] = "allowed"
            except SandboxError as err:
                result[name] = str(err)
    now = resource.getrlimit(resource.RLIMIT_NOFILE), os.getpriority(os.PRIO_PROCESS, me)
    result["untouched"] = now == (nofile, nice)
    return result


@pytest.mark.skipif(not ROOT, reason="the test becomes an unprivileged trainer from root")
@needs_seccomp
def test_a_trainer_that_is_not_root_is_refused_and_its_children_cannot_reach_it():
    """A non-root trainer cannot start its worker as another user: eval-reaching scorers are refused
    unless the recipe opts in, and even then seccomp stops a call's limits, priorities and signals."""
    result = in_forked_trainer(_unprivileged_trainer)
    assert "crash" not in result, result
    assert result["refused"] and "a user apart from the trainer's" in result["refused"], result
    assert result["uid"] == confine.NOBODY  # opted in: the worker keeps the trainer's user
    for name in ("prlimit", "renice", "renice user", "kill"):
        assert "Operation not permitted" in result[name], (name, result[name])
    assert result["untouched"], "a call changed the trainer's limits or priority"
