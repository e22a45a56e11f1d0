"""Red team: what a model could write to escape or forge a score, per payload class and per layer.

Layer 1 (screens): each payload, in plain and encoded forms, goes through the reward adapter training
uses (`to_trl(make_reward("correctness", task))`) on tasks whose verifiers parse expressions.
Layer 3 (confinement): the same code runs inside the confined worker as if a screen had failed.
(Layer 2, the protocol against forged and pickled replies, is in tests/test_sandbox.py.)
Every test asserts the score is 0 or the call failed, no file was created, no child process is left,
and the trainer process is untouched.
"""

import base64
import contextlib
import os
from pathlib import Path

import pytest

from grpokit.errors import SandboxError
from grpokit.rewards import make_reward, to_trl
from grpokit.sandbox.client import Sandbox, shared_sandbox
from grpokit.tasks import build_task
from tests.data_files import NUMINA, write_jsonl

MARK = "/tmp/grpokit-pwned"

# Python a model could get evaluated; each creates a file whose name starts with MARK if it runs.
CODE = {
    "file write": f"open('{MARK}-write', 'w').write('x')",
    "os.system": f"import os; os.system('touch {MARK}-system')",
    "fork_exec (subprocess)": f"import subprocess; subprocess.Popen(['touch', '{MARK}-popen'])",
    "posix_spawn": f"import os; os.posix_spawn('/usr/bin/touch', ['touch', '{MARK}-spawn'], {{}})",
    "os.fork": f"import os\nif os.fork() == 0:\n    open('{MARK}-fork', 'w')\n    os._exit(0)",
    "ctypes system": f"import ctypes; ctypes.CDLL(None).system(b'touch {MARK}-ctypes')",
    "ctypes raw execve": "import ctypes; ctypes.CDLL(None).syscall(59, b'/usr/bin/touch', "
    f"(ctypes.c_char_p * 3)(b'touch', b'{MARK}-execve', None), None)",
    "mmap a file for writing": f"import mmap, os; fd = os.open('{MARK}-mmap', os.O_RDWR | os.O_CREAT); "
    "os.ftruncate(fd, 4096); mmap.mmap(fd, 4096)[:1] = b'x'",
    "socket": "import socket; socket.create_connection(('127.0.0.1', 9), timeout=1)",
    "frame walk to the reply pipe": (
        "import os, sys, json, pickle\n"
        "forged = json.dumps({'ok': True, 'value': 1.0}).encode() + b'\\n'\n"
        "for fd in range(3, 64):\n"
        "    try: os.write(fd, forged); os.write(fd, pickle.dumps(('ok', 1.0)))\n"
        "    except OSError: pass\n"
        "frame = sys._getframe()\n"
        "while frame:\n"
        "    for value in list(frame.f_locals.values()):\n"
        "        try: os.write(value if isinstance(value, int) else value.fileno(), forged)\n"
        "        except Exception: pass\n"
        "    frame = frame.f_back\n"
        "os._exit(0)"
    ),
    "hook and verifier tampering": (
        "import grpokit.sandbox.scorers as s, builtins; s.math_equal = lambda *a: True; "
        "s.gym_score = lambda *a: 1.0; builtins.any = lambda *a: False"
    ),
    "environment read": f"import os; open('{MARK}-env', 'w').write(open(f'/proc/{{os.getppid()}}/environ').read())",
}


def encodings(code: str) -> dict[str, str]:
    return {
        "plain exec": f"exec({code!r})",
        "hex": f"exec(\"exec(bytes.fromhex('{code.encode().hex()}').decode())\")",
        "base64": f"exec(__import__('base64').b64decode('{base64.b64encode(code.encode()).decode()}'))",
        "chr join": f"exec(''.join(map(chr, {[ord(c) for c in code]})))",
        "bytes list, no quotes": f"exec(bytes({list(code.encode())}))",
        "getattr chain": "getattr(getattr(__builtins__, 'ex' + 'ec'), '__call__')"
        f"(bytes.fromhex('{code.encode().hex()}'))",
    }


RESOURCE_HOGS = ["9**9**9**9", "10^{10^{10^{10}}}", "(" * 300 + "1" + ")" * 300, "[0] * 10**10", "x" * 999]
# issue 53's bombs, each about 3 s or a whole timeout before the size bound: screened now, never run
RESOURCE_HOGS += ["2^{999 \\cdot 999 \\cdot 999}", "2^{999!}", "(9^{99})!", "\\Gamma(10^{99})"]
RESOURCE_HOGS += ["\\binom{10^{99}}{10^{98}}", "\\operatorname{eye}(20000)"]
RESOURCE_HOGS += ["3**(999*999*999)", "9**(9*9*9*9*9*9*9*9*9)"]


def children_of(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            with open(task / "children") as f:
                out |= {int(p) for p in f.read().split()}
        except FileNotFoundError:  # a thread that ended meanwhile (each reward call runs in its own)
            continue
    return out


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for child in children_of(todo.pop()) - found:
            found.add(child)
            todo.append(child)
    return found


@pytest.fixture
def untouched(tmp_path, monkeypatch):
    """Checks, after the test, that nothing was created, no process is left and the trainer is as it was."""
    monkeypatch.chdir(tmp_path)
    environ, before = _environment(), descendants(os.getpid())
    any_before = any
    yield
    assert not [p for p in os.listdir("/tmp") if p.startswith("grpokit-pwned")], "a payload created a file"
    assert not list(tmp_path.iterdir()), "a payload created a file in the trainer's directory"
    workers = {
        pid for pid in descendants(os.getpid()) if b"sandbox/worker.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    }
    left = descendants(os.getpid()) - before - workers
    assert not left, f"processes left: {left}"
    assert all(not children_of(pid) for pid in workers), "a sandbox worker has a child left"
    assert _environment() == environ and Path.cwd() == tmp_path and any is any_before


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("payload-tasks")
    return {
        "reasoning_gym countdown (the issue's setup)": build_task("reasoning_gym", {"dataset": "countdown"}),
        "reasoning_gym puzzle24 (grpokit's AST evaluator)": build_task("reasoning_gym", {"dataset": "puzzle24"}),
        "reasoning_gym polynomial_multiplication (sympy screen)": build_task(
            "reasoning_gym", {"dataset": "polynomial_multiplication"}
        ),
        "reasoning_gym n_queens (literal screen)": build_task("reasoning_gym", {"dataset": "n_queens"}),
        "math (math-verify)": build_task("math", {"source": str(write_jsonl(folder / "n.jsonl", NUMINA))}),
    }


def reward_of(task, answer: str) -> float:
    row = task.example("test", 0)
    reward = to_trl("correctness", make_reward("correctness", task))
    columns = {key: [value] for key, value in row.items()}
    return reward(["prompt"], [f"<think>x</think><answer>{answer}</answer>"], **columns)[0]


PAYLOADS = [(f"{cls} / {enc}", text) for cls, code in CODE.items() for enc, text in encodings(code).items()]


@pytest.mark.parametrize(("name", "answer"), PAYLOADS, ids=[n for n, _ in PAYLOADS])
def test_encoded_payloads_score_zero_through_the_training_reward(tasks, name, answer, untouched):
    for task_name, task in tasks.items():
        assert reward_of(task, answer) == 0.0, task_name


@pytest.mark.parametrize("answer", RESOURCE_HOGS)
def test_cpu_and_memory_hogs_score_zero_quickly(tasks, answer, untouched):
    for task_name, task in tasks.items():
        assert reward_of(task, answer) == 0.0, task_name


def test_a_tampering_call_cannot_change_later_scores(tasks, untouched):
    """Even run inside the worker, code that rebinds the verifiers only changes its own, dead child."""
    box = shared_sandbox()
    box.call("builtins:exec", CODE["hook and verifier tampering"])
    assert reward_of(tasks["math (math-verify)"], "-1000001") == 0.0
    assert box.score("grpokit.sandbox.scorers:math_equal", "43", "42") == 0.0


@pytest.fixture(scope="module")
def confined():
    with Sandbox(preload=(), allow_unconfined=os.geteuid() != 0) as box:  # not root: refused unless opted in
        yield box


@pytest.mark.parametrize("name", sorted(CODE))
def test_payload_code_run_inside_the_worker_is_contained(confined, name, untouched):
    """As if a screen had let the code through: the kernel stops it (or it only touches its own child)."""
    with contextlib.suppress(SandboxError):
        confined.call("builtins:exec", CODE[name], timeout=5)
    assert confined.call("operator:add", 1, 2) == 3  # the protocol is intact: no forged frame got through


@pytest.mark.parametrize(
    "expression",
    [
        "open('/etc/passwd').read()",
        "open('/proc/1/environ').read()",
        "__import__('os').listdir('/root')",
        "open(__import__('os').path.expanduser('~/.bashrc')).read()",
    ],
)
def test_files_and_the_trainer_environment_cannot_be_read(confined, expression, untouched):
    with pytest.raises(SandboxError, match="Permission|not permitted|No such file"):
        confined.call("builtins:eval", expression)


def test_a_secret_beside_the_trainer_cannot_be_read(confined, tmp_path_factory, untouched):
    secret = tmp_path_factory.mktemp("secret") / "token.txt"
    secret.write_text("hf_secret")
    secret.chmod(0o644)  # world-readable: only Landlock stands in the way
    with pytest.raises(SandboxError, match="Permission"):
        confined.call("builtins:eval", f"open({str(secret)!r}).read()")
    assert confined.call("os:getenv", "HF_TOKEN") is None


@pytest.mark.parametrize("name", [n for n in sorted(CODE) if "-" in CODE[n].split(MARK, 1)[-1][:1]])
def test_the_payloads_are_real_outside_the_sandbox(name, tmp_path):
    """Each file-creating payload does create its file in a plain interpreter: the tests above can fail."""
    import subprocess
    import sys

    marker = tmp_path / "pwned"
    code = CODE[name].replace(MARK, str(marker))
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, timeout=60, capture_output=True)
    for _ in range(50):  # a forked or spawned child may finish just after the parent
        if list(tmp_path.glob("pwned-*")):
            break
        __import__("time").sleep(0.1)
    assert list(tmp_path.glob("pwned-*")), f"{name} did nothing even unconfined"
