"""``sandbox.pidns``: a PID namespace of its own for a forked child, for real.

The stub that stays outside must look to its owner exactly like the child it stands for (the
same exit code, the same death by signal), hold nothing of what it inherited, and take the
whole namespace with it when it is killed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shelldon.proc import sandbox
from shelldon.proc.child import Child
from shelldon.proc.sandbox.pidns import enter_pid_namespace
from tests.pids import inner, running

pytestmark = pytest.mark.skipif(
    not sandbox.pidns_available(), reason="no PID namespaces for unprivileged processes here"
)


def in_namespace(body: Callable[[], object]) -> Child:
    """Fork a child that enters a PID namespace and runs ``body`` there as pid 1."""

    def child() -> None:
        enter_pid_namespace(orphan_exit=9)
        body()

    return Child.fork(child)


def test_the_child_is_pid_1_and_its_stub_mirrors_its_exit_code() -> None:
    def body() -> None:
        os._exit(42 if os.getpid() == 1 and os.getppid() == 0 else 1)

    with in_namespace(body) as proc:
        assert proc.reap(block=True) == 42


def test_a_child_killed_by_a_signal_is_reported_killed_by_that_signal() -> None:
    r, w = os.pipe()

    def body() -> None:
        os.write(w, b"in")
        time.sleep(30)

    with in_namespace(body) as proc:
        assert os.read(r, 2) == b"in"
        worker = inner(proc.pid)
        assert worker != proc.pid
        os.kill(worker, signal.SIGKILL)
        assert proc.reap(block=True) == -signal.SIGKILL
    os.close(r)
    os.close(w)


def test_the_stub_holds_no_descriptor_and_is_not_dumpable() -> None:
    r, w = os.pipe()

    def body() -> None:
        os.close(r)
        os.write(w, b"x")
        time.sleep(30)

    try:
        with in_namespace(body) as proc:
            assert os.read(r, 1) == b"x"
            worker = inner(proc.pid)
            # The stub closes what it inherited right after its fork, racing the worker's write.
            until = time.monotonic() + 2.0
            while os.listdir(f"/proc/{proc.pid}/fd") and time.monotonic() < until:
                time.sleep(0.01)
            assert os.listdir(f"/proc/{proc.pid}/fd") == []
            assert worker != proc.pid
            status = Path(f"/proc/{proc.pid}/status").read_text()
            # Blocked: no handler it inherited runs there.
            blocked = int(
                next(x for x in status.splitlines() if x.startswith("SigBlk")).split()[1], 16
            )
            assert blocked & (1 << (signal.SIGTERM - 1))
            proc.kill()
    finally:
        os.close(r)
        os.close(w)


def test_killing_the_stub_ends_everything_inside_setsid_and_all() -> None:
    marker = f"{600 + (os.getpid() % 1000) / 10**4:.4f}"

    def body() -> None:
        import subprocess

        subprocess.Popen(["setsid", "sleep", marker])
        subprocess.Popen(["sh", "-c", f"(sleep {marker} &) ; exit 0"]).wait()
        time.sleep(30)

    def sleepers() -> list[int]:
        return running("sleep", marker)

    with in_namespace(body) as proc:
        until = time.monotonic() + 5
        while len(sleepers()) < 2 and time.monotonic() < until:
            time.sleep(0.01)
        assert len(sleepers()) == 2
        proc.kill()  # only the stub: the owner knows no other pid
        assert proc.reap(block=True) == -signal.SIGKILL
    until = time.monotonic() + 3
    while sleepers() and time.monotonic() < until:
        time.sleep(0.01)
    assert sleepers() == []


def test_inside_no_pid_of_the_forker_names_anything() -> None:
    outside = os.getpid()
    r, w = os.pipe()

    def body() -> None:
        try:
            os.kill(outside, 0)
            said = b"allowed"
        except ProcessLookupError:
            said = b"ESRCH"
        except OSError as exc:
            said = str(exc.errno).encode()
        os.write(w, said)

    with in_namespace(body) as proc:
        proc.reap(block=True)
    os.close(w)
    assert os.read(r, 64) == b"ESRCH"
    os.close(r)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user first")
def test_an_unprivileged_process_gets_one_through_a_user_namespace() -> None:
    # The service's case (it runs as its own user): root makes the PID namespace alone, any
    # other user together with a user namespace mapping only its own ids.
    r, w = os.pipe()
    outside = os.getpid()
    outer_userns = os.readlink("/proc/self/ns/user")

    def child() -> None:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        enter_pid_namespace(orphan_exit=9)
        try:
            os.kill(outside, 0)
            reached = "allowed"
        except OSError as exc:
            reached = str(exc.errno)
        mine = os.readlink("/proc/self/ns/user") != outer_userns
        os.write(w, f"{os.getpid()} {os.getuid()} {reached} {mine}".encode())

    with Child.fork(child) as proc:
        assert proc.reap(block=True) == 0
    os.close(w)
    said = os.read(r, 100).decode()
    os.close(r)
    if not sandbox.userns_available():
        pytest.skip("no unprivileged user namespaces here")
    import errno

    assert said == f"1 65534 {errno.ESRCH} True", said
