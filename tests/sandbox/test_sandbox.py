import os
import textwrap
import threading

import pytest

from grpokit.errors import SandboxError, SandboxRefused, SandboxTimeout
from grpokit.sandbox import client as sandbox
from grpokit.sandbox import confine
from grpokit.sandbox.client import Sandbox

ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def box():
    with Sandbox(preload=(), allow_unconfined=not ROOT) as sandbox_:  # not root: refused unless opted in
        yield sandbox_


def test_calls_return_plain_data_and_errors_are_reported(box):
    assert box.call("operator:add", 2, 3) == 5
    assert box.call("builtins:sorted", [3, 1, 2]) == [1, 2, 3]
    with pytest.raises(SandboxError, match="ZeroDivisionError"):
        box.call("operator:truediv", 1, 0)
    with pytest.raises(SandboxError, match="unserialisable|not JSON serializable"):
        box.call("builtins:object")  # a reply that is not plain data is refused, never pickled
    with pytest.raises(SandboxError, match="not plain JSON"):
        box.call("operator:add", object(), 1)
    assert box.call("operator:mul", 4, 5) == 20  # the worker lives on after errors


def test_score_accepts_only_a_finite_number_in_bounds(box):
    assert box.score("builtins:abs", -1) == 1.0
    assert box.score("builtins:bool", 1) == 1.0
    for function, args in (("builtins:float", ("nan",)), ("builtins:str", (1,)), ("builtins:abs", (-2,))):
        with pytest.raises(SandboxError):
            box.score(function, *args)
    assert box.score("builtins:abs", -2, bounds=(0.0, 2.0)) == 2.0


def test_the_kernel_mechanisms_hold_here(box):
    """CI runs as root on this kernel: every mechanism must be in force, not merely asked for."""
    held = box.confinement
    if not ROOT:
        pytest.skip("the trainer is not root, so its worker keeps its user (tests/test_confinement.py)")
    problem = confine.seccomp_problem()
    if problem or not confine.landlock_abi():
        pytest.skip(f"this kernel lacks a mechanism: seccomp={problem or 'ok'}, Landlock ABI {confine.landlock_abi()}")
    assert held.complete, held
    assert held.seccomp and held.landlock_abi >= 1 and held.no_new_privs
    assert box.call("os:getuid") == (confine.NOBODY if ROOT else os.getuid())
    assert box.call("os:getgroups") == ([] if ROOT else os.getgroups())
    assert box.call("os:getenv", "PATH") is None and box.call("os:getenv", "HOME") is None


@pytest.mark.parametrize(
    ("function", "args"),
    [
        ("subprocess:run", (["touch", "/tmp/grpokit-pwned-sub"],)),
        ("os:posix_spawn", ("/usr/bin/touch", ["touch", "/tmp/grpokit-pwned-spawn"], {})),
        ("os:fork", ()),
        ("builtins:open", ("/tmp/grpokit-pwned-open", "w")),
        ("os:mkdir", ("/tmp/grpokit-pwned-dir",)),
        ("socket:create_connection", (("127.0.0.1", 9),)),
        ("socket:socket", ()),
        ("builtins:open", ("/etc/passwd",)),
        ("os:listdir", ("/root",)),
        ("os:kill", (os.getpid(), 15)),
    ],
)
def test_the_worker_refuses_side_effects(box, function, args):
    with pytest.raises(SandboxError, match="PermissionError|Operation not permitted|Permission denied"):
        box.call(function, *args)
    assert not any(name.startswith("grpokit-pwned") for name in os.listdir("/tmp"))


def test_os_system_cannot_start_a_shell(box):
    assert box.call("os:system", "touch /tmp/grpokit-pwned-system") != 0  # glibc's 127: no process
    assert not os.path.exists("/tmp/grpokit-pwned-system")


def test_threads_cannot_start_in_a_call(box):
    with pytest.raises(SandboxError, match="can't start new thread"):
        box.call("builtins:exec", "import threading; t = threading.Thread(target=print); t.start()")


def test_a_hung_call_is_cut_off_from_any_thread_without_restarting_the_worker(box):
    errors = []
    restarts = box.restarts

    def hang():
        try:
            box.call("time:sleep", 30, timeout=0.5)
        except SandboxTimeout as err:
            errors.append(err)

    thread = threading.Thread(target=hang)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive() and len(errors) == 1, "the timeout must hold off the main thread"
    assert box.call("operator:add", 1, 1) == 2 and box.restarts == restarts
    with pytest.raises(SandboxTimeout):  # a busy loop in C is killed as well
        box.call("builtins:exec", "while True: pass", timeout=0.5)


def test_a_call_that_dies_is_reported_and_the_next_one_works(box):
    with pytest.raises(SandboxError, match="died"):
        box.call("os:_exit", 3)
    assert box.call("operator:add", 1, 2) == 3


def test_memory_is_capped(box):
    with pytest.raises(SandboxError, match="MemoryError|died"):
        box.call("builtins:bytearray", 8 * 1024**3)
    assert box.call("operator:add", 1, 2) == 3


def test_prints_do_not_corrupt_the_protocol(box):
    assert box.call("builtins:print", "noise " * 1000) is None
    assert box.call("operator:add", 2, 2) == 4


def test_what_a_call_changes_dies_with_it(box):
    """A call that rebinds a verifier cannot change the next call: each runs in a fresh child."""
    box.call("builtins:exec", "import operator; operator.add = lambda a, b: 1.0")
    assert box.call("operator:add", 2, 2) == 4


# ---------------------------------------------------------------- the protocol against a lying worker

FAKE_WORKER = """
import json, os, pickle, sys
config = json.loads(sys.stdin.buffer.readline())
complete = {{"seccomp": True, "landlock_abi": 7, "uid": 65534, "no_new_privs": True, "notes": []}}
hello = {{"ready": True, "confinement": {{**complete, **{missing}}}}}
sys.stdout.buffer.write(json.dumps(hello).encode() + b"\\n"); sys.stdout.buffer.flush()
marker = {marker!r}

class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {{marker}}-$PPID",))

for line in sys.stdin.buffer:
    request = json.loads(line)
    reply = {reply}
    sys.stdout.buffer.write(reply if isinstance(reply, bytes) else json.dumps(reply).encode() + b"\\n")
    sys.stdout.buffer.flush()
"""


def fake_box(tmp_path, monkeypatch, reply: str, missing: str = "{}", **kwargs) -> Sandbox:
    script = tmp_path / "fake_worker.py"
    marker = str(tmp_path / "pwned-by-reply")
    script.write_text(textwrap.dedent(FAKE_WORKER.format(missing=missing, marker=marker, reply=reply)))
    monkeypatch.setattr(sandbox, "WORKER", script)
    return Sandbox(preload=(), **kwargs)


@pytest.mark.parametrize(
    "reply",
    [
        "pickle.dumps(('ok', 1.0))",
        "pickle.dumps(Payload())",
        "len(pickle.dumps(Payload())).to_bytes(4, 'big') + pickle.dumps(Payload())",  # the old frame format
        "{'id': request['id'] + 1, 'ok': True, 'value': 1.0}",  # a reply to another request
        'b\'{"id": %d, "ok": true, "value": NaN}\\n\' % request[\'id\']',
        "{'id': request['id'], 'ok': True, 'value': 2.0}",
        "{'id': request['id'], 'ok': True, 'value': '1.0'}",
        "{'id': request['id'], 'ok': 'yes', 'value': 1.0}",
        "{'id': request['id'], 'ok': False}",
        "b'{' * 100000 + b'\\n'",
        "b'1' * (1 << 22)",
    ],
)
def test_forged_and_pickled_replies_score_zero_and_run_nothing(reply, tmp_path, monkeypatch):
    from grpokit.tasks import math_problems

    box = fake_box(tmp_path, monkeypatch, reply)
    monkeypatch.setattr(math_problems, "shared_sandbox", lambda: box)
    try:
        assert math_problems.math_score("42", "42") == 0.0
        with pytest.raises(SandboxError):
            box.score("grpokit.sandbox.scorers:math_equal", "42", "42")
    finally:
        box.close()
    assert not list(tmp_path.glob("pwned-by-reply*")), "a reply ran code in the trainer"


def test_a_worker_without_its_confinement_is_refused_unless_the_recipe_opts_in(tmp_path, monkeypatch):
    reply = "{'id': request['id'], 'ok': True, 'value': 1.0}"
    box = fake_box(tmp_path, monkeypatch, reply, missing='{"seccomp": False}', allow_unconfined=False)
    with pytest.raises(SandboxRefused, match=r"lacks seccomp .*sandbox.allow_unconfined"):
        box.call("operator:add", 1, 1)
    with pytest.raises(SandboxRefused):  # refused at once from then on, no worker started again
        box.call("operator:add", 1, 1)
    opted_in = fake_box(tmp_path, monkeypatch, reply, missing='{"seccomp": False}', allow_unconfined=True)
    assert opted_in.score("operator:add", 1, 1) == 1.0
    opted_in.close()


def test_env_reports_the_mechanisms(capsys):
    from grpokit.cli.commands import main

    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "sandbox worker confinement:" in out and "seccomp: " in out and "Landlock: " in out


def test_a_recipe_is_refused_where_confinement_is_missing(monkeypatch):
    from grpokit.errors import RecipeError
    from grpokit.recipe.load import build_recipe

    monkeypatch.setattr(confine, "missing_here", lambda: ["Landlock"])
    raw = {"task": {"name": "math", "params": {"source": "data/word_problems.jsonl"}}, "rewards": [{"name": "format"}]}
    with pytest.raises(RecipeError, match="lacks Landlock .*sandbox.allow_unconfined"):
        build_recipe(raw)
    build_recipe({**raw, "sandbox": {"allow_unconfined": True}})
    sandbox.allow_unconfined(False)
    build_recipe({**raw, "task": {"name": "arithmetic"}})  # a task that never uses the sandbox


# ---------------------------------------------------------------- batches: one round trip, per-item verdicts

EVAL = "builtins:eval"  # the tests' own expressions, run confined; no model text reaches eval anywhere


def alone(box, expressions, **kwargs):
    """What `score` says of each expression on its own, errors as their messages."""
    results = []
    for expression in expressions:
        try:
            results.append(box.score(EVAL, expression, **kwargs))
        except SandboxError as err:
            results.append(str(err))
    return results


def readable(results):
    return [r if isinstance(r, float) else str(r) for r in results]


def test_a_batch_scores_each_item_as_its_own_call_would_in_one_round_trip(box):
    expressions = ["1", "0.5", "True", "0", "2", "3 / 4", "False", "1.0"]
    before = box.requests
    scores = box.score_many(EVAL, [[e] for e in expressions], bounds=(0.0, 2.0))
    assert box.requests - before == 1
    assert scores == alone(box, expressions, bounds=(0.0, 2.0)) == [1.0, 0.5, 1.0, 0.0, 2.0, 0.75, 0.0, 1.0]
    before = box.requests
    assert box.score_many(EVAL, [["1"]] * 300) == [1.0] * 300
    assert box.requests - before == 2  # at most MAX_BATCH items per round trip
    assert box.score_many(EVAL, []) == []


def test_an_item_that_raises_fails_alone_and_what_it_changed_dies_with_its_child(box):
    sqrt = "__import__('math').sqrt(0.25)"
    expressions = [sqrt, "1 / 0", sqrt, "setattr(__import__('math'), 'sqrt', lambda x: 1.0) or 1 / 0", sqrt, sqrt]
    scores = box.score_many(EVAL, [[e] for e in expressions])
    assert readable(scores) == alone(box, expressions)
    assert scores[0] == scores[2] == scores[4] == scores[5] == 0.5  # not the rebound sqrt's 1.0
    assert "ZeroDivisionError" in str(scores[1]) and "ZeroDivisionError" in str(scores[3])
    assert isinstance(scores[1], SandboxError) and not isinstance(scores[1], SandboxTimeout)


def test_a_hung_item_times_out_alone_and_its_batch_mates_still_score(box):
    restarts = box.restarts
    hang, spin = "__import__('time').sleep(30)", "any(iter(int, 1))"  # asleep; busy in C
    scores = box.score_many(EVAL, [["1"], [hang], ["0.5"], ["0"], [spin], ["True"]], timeout=0.5)
    assert [s if isinstance(s, float) else type(s) for s in scores] == [
        1.0, SandboxTimeout, 0.5, 0.0, SandboxTimeout, 1.0
    ]  # fmt: skip
    assert box.restarts == restarts  # the worker killed the children; it never fell silent


@pytest.mark.parametrize("bad", ["3", "-0.5", "'1'", "[1]", "None", "float('nan')", "10 ** 400"])
def test_a_reply_out_of_range_is_refused_for_its_own_item_only(box, bad):
    scores = box.score_many(EVAL, [["1"], [bad], ["0.25"], ["0"]])
    assert scores[0] == 1.0 and scores[2] == 0.25 and scores[3] == 0.0
    assert isinstance(scores[1], SandboxError)
    assert readable(scores) == alone(box, ["1", bad, "0.25", "0"])


BATCH_LIES = [
    "[{'ok': True, 'value': 2.0}] * n",  # out of range
    "[{'ok': True, 'value': '1.0'}] * n",
    "[{'ok': True, 'value': 1.0}] * (n + 1)",  # more replies than items
    "[{'ok': True, 'value': 1.0}] * (n - 1)",  # fewer, with no failure to explain it
    "[]",
    "[{'ok': 1, 'value': 1.0}] * n",
    "[{'ok': True}] * n",
    "[{'ok': False, 'error': 'x'}] + [{'ok': True, 'value': 1.0}] * (n - 1)",  # a failure, then more replies
    "'all right'",
]


@pytest.mark.parametrize("items", BATCH_LIES)
def test_forged_batch_replies_score_nothing(items, tmp_path, monkeypatch):
    """A lying worker: every batch reply is malformed and every single reply is out of range."""
    from grpokit.tasks import math_problems

    reply = (
        f"{{'id': request['id'], 'ok': True, 'items': (lambda n: {items})(len(request['batch']))}} "
        "if 'batch' in request else {'id': request['id'], 'ok': True, 'value': 2.0}"
    )
    box = fake_box(tmp_path, monkeypatch, reply)
    monkeypatch.setattr(math_problems, "shared_sandbox", lambda: box)
    try:
        assert all(
            isinstance(s, SandboxError) for s in box.score_many("grpokit.sandbox.scorers:math_equal", [["1", "1"]] * 3)
        )
        assert math_problems.math_scores(["42", "42", "42"], ["42", "42", "42"]) == [0.0, 0.0, 0.0]
    finally:
        box.close()


def test_one_impossible_reply_makes_the_whole_batch_score_again_one_item_per_child(tmp_path, monkeypatch):
    """A child that replies 2.0 for a 0/1 verifier is not trusted for its other replies either."""
    reply = (
        "{'id': request['id'], 'ok': True, 'items': [{'ok': True, 'value': v} for v in (1.0, 2.0, 1.0)]} "
        "if 'batch' in request else {'id': request['id'], 'ok': True, 'value': 0.0}"
    )
    box = fake_box(tmp_path, monkeypatch, reply)
    try:
        assert box.score_many("grpokit.sandbox.scorers:math_equal", [["1", "2"]] * 3) == [0.0, 0.0, 0.0]
    finally:
        box.close()


def test_sandbox_batch_1_gives_every_item_its_own_child(box):
    from grpokit.sandbox import client as sandbox

    sqrt = "__import__('math').sqrt(0.25)"
    tamper = "setattr(__import__('math'), 'sqrt', lambda x: 1.0) or 1"  # succeeds, and stays in its child
    try:
        shared = box.score_many(EVAL, [[tamper], [sqrt]])
        sandbox.share_children(1)
        before = box.requests
        alone_each = box.score_many(EVAL, [[tamper], [sqrt]])
        assert box.requests - before == 2
    finally:
        sandbox.share_children(sandbox.MAX_BATCH)
    assert shared == [1.0, 1.0], "batch-mates share a child: the documented cost of one round trip"
    assert alone_each == [1.0, 0.5]
