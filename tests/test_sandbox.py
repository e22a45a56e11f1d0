import os
import threading

import pytest

from grpokit.sandbox import Sandbox, SandboxError, SandboxTimeout


@pytest.fixture(scope="module")
def box():
    with Sandbox(preload=()) as sandbox:
        yield sandbox


def test_calls_return_results_and_errors_are_reported(box):
    assert box.call("operator:add", 2, 3) == 5
    with pytest.raises(SandboxError, match="ZeroDivisionError"):
        box.call("operator:truediv", 1, 0)
    assert box.call("operator:mul", 4, 5) == 20  # the worker lives on after an error


@pytest.mark.parametrize(
    ("function", "args", "blocked"),
    [
        ("os:system", ("touch pwned.txt",), "os.system"),
        ("subprocess:run", (["touch", "pwned.txt"],), "subprocess.Popen"),
        ("builtins:open", ("pwned.txt", "w"), "writing 'pwned.txt'"),
        ("os:remove", ("anything",), "os.remove"),
        ("socket:create_connection", (("127.0.0.1", 9),), "socket"),
        ("ctypes:CDLL", ("libc.so.6",), "ctypes"),
    ],
)
def test_the_worker_refuses_side_effects(box, function, args, blocked, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SandboxError, match=blocked):
        box.call(function, *args)
    assert not (tmp_path / "pwned.txt").exists()


def test_a_hung_call_is_cut_off_from_any_thread_and_the_worker_restarts(box):
    errors = []

    def hang():
        try:
            box.call("time:sleep", 30, timeout=0.5)
        except SandboxTimeout as err:
            errors.append(err)

    thread = threading.Thread(target=hang)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive() and len(errors) == 1, "the timeout must hold off the main thread"
    restarts = box.restarts
    assert box.call("operator:add", 1, 1) == 2 and box.restarts == restarts


def test_a_worker_that_dies_is_reported_and_replaced(box):
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


def test_worker_directory_is_removed_on_close():
    sandbox = Sandbox(preload=())
    sandbox.call("operator:add", 1, 1)
    workdir = sandbox._workdir
    assert workdir and os.path.isdir(workdir)
    sandbox.close()
    assert not os.path.exists(workdir)
