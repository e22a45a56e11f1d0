"""Kernel confinement for the sandbox worker: seccomp, Landlock, an unprivileged user, no new privileges.

Each mechanism holds against native code (ctypes, `_posixsubprocess`, raw syscalls), unlike an audit
hook. `grpokit.sandbox.worker` installs them after its preloads and before the first untrusted call:

- **user**: when started as root, the worker becomes nobody (65534) with no supplementary groups, so
  it cannot signal, trace or read the files of the trainer. It keeps one capability, reading files
  past permission bits, and only where Landlock is on, which confines those reads to the Python trees
  (the interpreter often lives under a root-only home, and scorers import lazily). A trainer that is
  not root cannot start it as another user (that takes privileges): the worker keeps the trainer's
  user, counts as missing this mechanism, and is refused unless the recipe opts in
  (`sandbox.allow_unconfined`). Opted in, seccomp still keeps a call's limits, priorities and signals
  off the trainer, and Landlock its files and signals.
- **Landlock** (Linux 5.13+): reads only under the Python import roots and the system library
  folders; no writes, removals, device nodes or links anywhere; no TCP bind or connect (ABI 4+); no
  signals to processes outside the worker (ABI 6+).
- **seccomp** (libseccomp through `pyseccomp`): no exec, no sockets, no opening files for writing, no
  changes to files by path, no tracing or signalling other processes, no namespaces, mounts, BPF,
  io_uring or kernel keyrings. Nothing that outlives a call or reaches past its process: no SysV IPC
  or POSIX message queues, no `setpriority` or `ioprio_set` (they can name a group or a user), and
  limits, scheduling and memory placement only for the calling process itself (pid 0). These hold
  whatever the user: a call cannot set its worker's limits, or the trainer's where both share a user.
  The per-call child adds a second filter: no fork and no threads.

None of them stops `stat` on a path outside the read roots (its size, times and owner, never its
contents): Landlock has no access right for it and seccomp cannot read a path.

`probe()` tells what this kernel offers without changing the calling process (`grpokit env`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
from dataclasses import asdict, dataclass

NOBODY = 65534
_CAP_DAC_READ_SEARCH = 2
_PR_SET_KEEPCAPS = 8
_PR_SET_NO_NEW_PRIVS = 38
_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446  # same on every arch
_READ_FILE, _READ_DIR = 1 << 2, 1 << 3
_SHARED_USER = "a user apart from the trainer's (only a trainer run as root can start its worker as another user)"
_SYSTEM_LIBRARIES = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")

# Syscalls the worker never needs; each fails with EPERM. Names this libseccomp does not know are skipped.
DENIED = (
    "execve", "execveat", "fork", "vfork", "socket", "socketpair", "creat", "open_by_handle_at",
    "name_to_handle_at", "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir",
    "link", "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown",
    "lchown", "fchownat", "truncate", "ftruncate", "mknod", "mknodat", "utime", "utimes", "utimensat",
    "futimesat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "personality", "fanotify_init", "memfd_create",
    # objects that outlive the process that made them
    "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
    "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
    "mq_getsetattr",
    # settings of other processes, named by group or user as well as by pid
    "setpriority", "ioprio_set", "migrate_pages", "process_madvise",
)  # fmt: skip
# Allowed only on the calling process (first argument 0): the worker's limits, priority and CPUs would
# otherwise be every later call's, and a same-user trainer's too.
SELF_ONLY = ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr", "move_pages")
# clone3 passes its flags in memory that seccomp cannot read: ENOSYS makes libc fall back to clone.
_ENOSYS = ("clone3", "openat2")
_WRITE_FLAGS = (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND)


@dataclass
class Confinement:
    seccomp: bool = False
    landlock_abi: int = 0  # 0: not enforced
    uid: int = -1  # the worker's user after the drop
    no_new_privs: bool = False
    notes: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """Every mechanism held, seen from the calling process (the trainer): the worker's user is apart."""
        return not self.missing()

    def missing(self) -> list[str]:
        """The mechanisms that did not hold, as the trainer sees them: a worker under the trainer's own
        user could set the trainer's limits or read its files wherever a filter has a gap."""
        out = [] if self.seccomp else ["seccomp"]
        out += [] if self.landlock_abi else ["Landlock"]
        if self.uid == 0:
            out.append("an unprivileged user")
        elif self.uid == os.getuid():
            out.append(_SHARED_USER)
        return out + ([] if self.no_new_privs else ["no_new_privs"])

    def to_dict(self) -> dict:
        return {**asdict(self), "notes": list(self.notes)}


def landlock_abi() -> int:
    """Landlock's ABI version in this kernel, or 0 when it is absent or disabled."""
    version = _syscall(_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(version, 0)


def seccomp_problem() -> str | None:
    """Why a seccomp filter cannot be loaded here, or None when it can."""
    try:
        import pyseccomp  # noqa: F401  (a ctypes binding: it fails here when libseccomp is absent)
    except (ImportError, RuntimeError, OSError) as err:
        return f"no libseccomp binding ({err}); pip install pyseccomp and apt-get install libseccomp2"
    with open("/proc/self/status", encoding="ascii") as f:
        if not any(line.startswith("Seccomp:") for line in f):
            return "this kernel has no seccomp"
    return None


def missing_here() -> list[str]:
    """Mechanisms this machine cannot give the worker (a user apart from this process's: only root can)."""
    out = (["seccomp"] if seccomp_problem() else []) + ([] if landlock_abi() else ["Landlock"])
    return out + ([] if os.geteuid() == 0 else [_SHARED_USER])


def probe() -> list[str]:
    """What the sandbox worker will get on this machine, one line per mechanism (for `grpokit env`)."""
    problem = seccomp_problem()
    abi = landlock_abi()
    uid = os.getuid()
    return [
        "seccomp: " + (problem or "yes (libseccomp via pyseccomp)"),
        "Landlock: " + (f"yes (ABI {abi})" if abi else "no (kernel without Landlock, or not enabled)"),
        "user: "
        + ("root: the worker drops to nobody (65534)" if uid == 0 else f"no: {_SHARED_USER} (this is uid {uid})"),
    ]


def confine(read_roots: list[str]) -> Confinement:
    """Confine this process for good: drop the user, then Landlock, then seccomp. Returns what held."""
    notes: list[str] = []
    try:  # imported while everything is still readable: it looks libseccomp up with ldconfig
        import pyseccomp  # noqa: F401
    except (ImportError, RuntimeError, OSError) as err:
        notes.append(f"seccomp: no libseccomp binding ({err})")
    ruleset = _landlock_ruleset([*read_roots, *_module_roots("pyseccomp")], notes)
    _drop_user(keep_read_capability=ruleset is not None, notes=notes)
    nnp = _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    abi = 0
    if ruleset is not None:
        fd, version = ruleset
        if _syscall(_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) == 0:
            abi = version
        else:
            notes.append(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
        os.close(fd)
    seccomp = False
    if nnp:
        try:
            seccomp = _load_filter(_base_rules)
        except (ImportError, RuntimeError, OSError) as err:
            notes.append(f"seccomp: {err}")
    return Confinement(seccomp=seccomp, landlock_abi=abi, uid=os.getuid(), no_new_privs=nnp, notes=tuple(notes))


def forbid_processes() -> None:
    """For the per-call child: no new processes or threads, and signals only to itself."""
    # Unix only: this module imports anywhere, so `grpokit env` can say what a machine lacks
    import resource

    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    _load_filter(_child_rules)


def _base_rules(sc, add) -> None:
    for name in DENIED:
        add(sc.ERRNO(errno.EPERM), name)
    for name in SELF_ONLY:
        add(sc.ERRNO(errno.EPERM), name, sc.Arg(0, sc.NE, 0))
    for name in _ENOSYS:
        add(sc.ERRNO(errno.ENOSYS), name)
    for flag in _WRITE_FLAGS:
        for name, arg in (("open", 1), ("openat", 2)):
            add(sc.ERRNO(errno.EPERM), name, sc.Arg(arg, sc.MASKED_EQ, flag, flag))


def _child_rules(sc, add) -> None:
    # The parent worker keeps kill() to stop an overrunning child; the child has no one to signal.
    for name in ("clone", "kill", "tkill", "rt_sigqueueinfo", "pidfd_open", "pidfd_send_signal"):
        add(sc.ERRNO(errno.EPERM), name)
    add(sc.ERRNO(errno.EPERM), "tgkill", sc.Arg(0, sc.NE, os.getpid()))
    add(sc.ERRNO(errno.EPERM), "rt_tgsigqueueinfo")


def _load_filter(rules) -> bool:
    # optional dependency: pyseccomp (a missing binding is a note in the Confinement, not an import error)
    import pyseccomp as sc

    syscall_filter = sc.SyscallFilter(sc.ALLOW)

    def add(action, name, *args) -> None:
        with contextlib.suppress(ValueError, OSError):  # a syscall this libseccomp or arch does not have
            syscall_filter.add_rule(action, name, *args)

    rules(sc, add)
    syscall_filter.load()
    return True


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _landlock_ruleset(read_roots: list[str], notes: list[str]) -> tuple[int, int] | None:
    abi = landlock_abi()
    if abi < 1:
        notes.append("Landlock: not available in this kernel")
        return None
    # Every file-system right this ABI knows is handled (denied unless a rule grants it); rules grant reads.
    fs_bits = {1: 13, 2: 14, 3: 15, 4: 15}.get(abi, 16)
    attr = _RulesetAttr(handled_access_fs=(1 << fs_bits) - 1)
    size = 8
    if abi >= 4:
        attr.handled_access_net, size = 0b11, 16  # TCP bind and connect
    if abi >= 6:
        attr.scoped, size = 0b11, 24  # abstract unix sockets and signals stay inside the worker
    fd = _syscall(_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        notes.append(f"Landlock: create_ruleset failed: {os.strerror(ctypes.get_errno())}")
        return None
    for root in sorted({*read_roots, *_SYSTEM_LIBRARIES}):
        try:
            path_fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        is_dir = os.path.isdir(root)
        rule = _PathBeneath(allowed_access=_READ_FILE | (_READ_DIR if is_dir else 0), parent_fd=path_fd)
        _syscall(_LANDLOCK_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0))
        os.close(path_fd)
    return fd, abi


def _drop_user(keep_read_capability: bool, notes: list[str]) -> int:
    if os.getuid() != 0 and os.geteuid() != 0:
        return os.getuid()
    libc = _libc()
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    libc.prctl(_PR_SET_KEEPCAPS, int(keep_read_capability), 0, 0, 0)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    keep = (1 << _CAP_DAC_READ_SEARCH) if keep_read_capability else 0
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)(keep, keep, 0, 0, 0, 0)  # effective, permitted, inheritable (x2 words)
    if libc.capset(header, data) != 0:
        notes.append(f"capset failed: {os.strerror(ctypes.get_errno())}")
    return os.getuid()


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _syscall(number: int, *args) -> int:
    return _libc().syscall(ctypes.c_long(number), *args)


def read_roots() -> list[str]:
    """The import roots that hold a loaded module: what a confined worker may still read."""
    return _module_roots(*sys.modules)


def _module_roots(*names: str) -> list[str]:
    entries = [os.path.realpath(p) for p in sys.path if p and os.path.exists(p)]
    roots = set()
    for name in names:
        file = getattr(sys.modules.get(name), "__file__", None)
        if not file:
            continue
        file = os.path.realpath(file)
        matches = [e for e in entries if file.startswith(e.rstrip("/") + "/")]
        if matches:
            roots.add(max(matches, key=len))
    return sorted(roots)
