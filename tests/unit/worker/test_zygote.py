"""The worker zygote for real: a forked zygote forking real workers, the test playing broker.

Every test forks a zygote (it must exist before the secrets it protects) and answers its
workers' Jobs itself, as the TurnActor would; nothing under test is mocked. Processes are
checked in /proc: the zygote's descriptors, who is whose parent, and that nothing outlives stop().
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import secrets
import select
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from shelldon.config import Settings
from shelldon.contracts import (
    Message,
    RequestToolApproval,
    Result,
    ResumeRequest,
    Role,
    Tier,
    ToolCall,
    TurnRequest,
    encode,
)
from shelldon.proc import sandbox
from shelldon.proc.child import EXIT_UNKNOWN, SpawnError
from shelldon.worker import spawn
from shelldon.worker.handle import EXIT_OK
from shelldon.worker.remote import ZygoteError
from shelldon.worker.tools import Registry
from shelldon.worker.zygote import Zygote
from shelldon.worker.zygote_server import MAX_MESSAGE, MAX_REQUEST
from tests.pids import host_pid, host_ppid, inner, popen_host_pid
from tests.unit.worker.brain import call, calls, say
from tests.unit.worker.test_spawn import converse, registry_with, tool_output, wait_exit


def _spin(ctx: Any, **_: Any) -> str:
    while True:
        pass


def _family(ctx: Any, **_: Any) -> str:
    return json.dumps({"pid": host_pid(), "ppid": host_ppid()})


def _deploy(ctx: Any, **_: Any) -> str:
    Path("deployed.txt").write_text("yes")  # relative: the worker runs in the workspace
    return "deployed"


FACTORY: Callable[[Settings], Registry] = registry_with(
    ("spin", _spin, Tier.FREE),
    ("family", _family, Tier.FREE),
    ("deploy", _deploy, Tier.RISKY),
)


@pytest.fixture(params=[True, False], ids=["spare", "no-spare"])
def zygote(settings: Settings, request: pytest.FixtureRequest) -> Iterator[Zygote]:
    """A zygote with and without its spare worker: the behaviour is the same either way."""
    z = Zygote.start(settings, registry_factory=FACTORY, spare=request.param)
    try:
        yield z
    finally:
        z.stop()


def turn(text: str = "hi", turn_id: str = "t-zyg") -> TurnRequest:
    return TurnRequest(turn_id, 7, text)


def proc_state(pid: int) -> str | None:
    """The process's state letter, or None once it is gone (reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def gone(pid: int, timeout: float = 3.0) -> bool:
    """True once ``pid`` no longer exists (a zombie still counts as existing)."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if proc_state(pid) is None:
            return True
        time.sleep(0.005)
    return False


def dead(pid: int, timeout: float = 3.0) -> bool:
    """True once ``pid`` is gone or a zombie (no longer runs anything)."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if proc_state(pid) in (None, "Z"):
            return True
        time.sleep(0.005)
    return False


def fds_of(pid: int) -> dict[int, str]:
    base = Path(f"/proc/{pid}/fd")
    out = {}
    for entry in base.iterdir():
        with contextlib.suppress(FileNotFoundError):
            out[int(entry.name)] = os.readlink(entry)
    return out


def raw_call(z: Zygote, data: bytes) -> dict[str, Any]:
    """Send ``data`` as one control message, bypassing the client's framing."""
    sock = z._sock
    with z._lock:
        sock.settimeout(5)
        sock.send(data)
        reply, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
        for fd in fds:
            os.close(fd)
    out = msgpack.unpackb(reply)
    assert isinstance(out, dict)
    return out


# ------------------------------------------------------------------ turns through the zygote


def test_turn_through_the_zygote_ends_with_its_result_and_exit_0(zygote: Zygote) -> None:
    before = time.monotonic()
    handle = zygote.spawn_turn(turn())
    with handle:
        timeout = 25.0
        assert before + timeout - 1 <= handle.deadline <= time.monotonic() + timeout
        jobs, result = converse(handle, [calls(call("family")), say("Done.")])
        assert [j.turn_id for j in jobs] == ["t-zyg", "t-zyg"]
        assert jobs[0].deadline == handle.deadline
        assert result.reply == "Done." and result.tool_executions == 1
        assert wait_exit(handle) == EXIT_OK
    assert handle.exit_code == EXIT_OK  # the context manager keeps the real code
    assert handle.sock.fileno() == -1


def test_worker_is_a_child_of_the_zygote_not_of_the_service(zygote: Zygote) -> None:
    with zygote.spawn_turn(turn()) as handle:
        assert parent_of(handle.pid) == zygote.pid
        assert parent_of(zygote.pid) == os.getpid()
        worker = inner(handle.pid)
        jobs, _ = converse(handle, [calls(call("family")), say("ok")])
        seen = json.loads(tool_output(jobs[1]))
        if worker == handle.pid:
            assert seen == {"pid": handle.pid, "ppid": zygote.pid}
        else:
            # In a PID namespace of its own, below the stub the zygote forked.
            assert seen == {"pid": worker, "ppid": handle.pid}
        # Not our child: this process cannot reap it (and never steals it from the zygote).
        with pytest.raises(ChildProcessError):
            os.waitpid(handle.pid, os.WNOHANG)
        assert wait_exit(handle) == EXIT_OK


def test_resume_runs_the_approved_call(zygote: Zygote, settings: Settings) -> None:
    risky = ToolCall("r1", "deploy", {})
    parked = RequestToolApproval(
        risky,
        "deploy()",
        (
            Message(Role.SYSTEM, "sys"),
            Message(Role.USER, "deploy it"),
            Message(Role.ASSISTANT, "", (risky,)),
        ),
    )
    with zygote.spawn_turn(ResumeRequest("t-res", 7, parked, True)) as handle:
        jobs, result = converse(handle, [say("Deployed!")])
        assert tool_output(jobs[0]) == "deployed"
        assert result.reply == "Deployed!" and result.tool_executions == 1
        assert wait_exit(handle) == EXIT_OK
    assert (settings.workspace / "deployed.txt").read_text() == "yes"


def test_kill_of_a_spinning_worker_then_blocking_reap_is_prompt(zygote: Zygote) -> None:
    handle = zygote.spawn_turn(turn())
    try:
        with pytest.raises(AssertionError, match="no Result"):
            converse(handle, [calls(call("spin"))], timeout=0.2)
        assert handle.reap(block=False) is None
        started = time.monotonic()
        handle.kill()
        handle.kill()
        assert handle.reap(block=True) == -signal.SIGKILL
        assert time.monotonic() - started < 0.5
        handle.kill()  # after the reap: a no-op, never a signal to a recycled pid
        assert handle.reap(block=False) == -signal.SIGKILL
    finally:
        handle.close()
    assert gone(handle.pid)


def test_two_sequential_turns(zygote: Zygote) -> None:
    for n in range(2):
        with zygote.spawn_turn(turn(turn_id=f"t-{n}")) as handle:
            _, result = converse(handle, [say(f"reply {n}")])
            assert result.reply == f"reply {n}"
            assert wait_exit(handle) == EXIT_OK
        assert gone(handle.pid)


def test_spawn_while_a_previous_handle_is_unreaped(zygote: Zygote) -> None:
    first = zygote.spawn_turn(turn(turn_id="t-1"))
    second = zygote.spawn_turn(turn(turn_id="t-2"))
    try:
        assert first.pid != second.pid
        _, result = converse(second, [say("second")])
        assert result.reply == "second" and wait_exit(second) == EXIT_OK
        assert first.reap(block=False) is None  # still waiting on its Job's answer
        _, result = converse(first, [say("first")])
        assert result.reply == "first" and wait_exit(first) == EXIT_OK
    finally:
        for handle in (first, second):
            handle.close()


def test_a_request_larger_than_one_control_message_goes_whole(zygote: Zygote) -> None:
    text = "x" * (3 * MAX_MESSAGE + 17)
    with zygote.spawn_turn(turn(text)) as handle:
        jobs, _ = converse(handle, [say("long")])
        assert any(m.content == text for m in jobs[0].messages)


def test_close_of_an_unreaped_worker_kills_it_and_the_zygote_reaps_it_unasked(
    zygote: Zygote,
) -> None:
    handle = zygote.spawn_turn(turn())
    # Busy in a tool, so it is surely running when closed (a spare, already prepared, would
    # otherwise see the channel shut and exit by itself first).
    with pytest.raises(AssertionError, match="no Result"):
        converse(handle, [calls(call("spin"))], timeout=0.2)
    started = time.monotonic()
    handle.close()
    assert time.monotonic() - started < 0.2  # the close does not wait for the exit
    assert gone(handle.pid)  # killed, and reaped by the zygote: no zombie left
    handle.kill()  # idempotent after close
    assert handle.reap(block=True) in (-signal.SIGKILL, EXIT_UNKNOWN)
    assert zygote.alive()


def test_an_exit_is_reported_on_the_exit_pipe_without_any_request(zygote: Zygote) -> None:
    handle = zygote.spawn_turn(turn())
    try:
        converse(handle, [say("bye")])
        ready, _, _ = select.select([handle.exit_fileno()], [], [], 5.0)
        assert ready, "no exit reported"
        assert handle.reap(block=False) == EXIT_OK
        assert gone(handle.pid)
    finally:
        handle.close()


def test_the_zygote_kills_a_worker_the_service_forgot_past_its_backstop(
    settings: Settings,
) -> None:
    quick = dataclasses.replace(
        settings,
        limits=dataclasses.replace(
            settings.limits, turn_timeout_s=1.0, kill_grace_s=0.1, bail_margin_s=0.1
        ),
    )
    z = Zygote.start(quick, registry_factory=FACTORY, spare=False)
    try:
        handle = z.spawn_turn(turn())
        with pytest.raises(AssertionError, match="no Result"):
            converse(handle, [calls(call("spin"))], timeout=0.2)
        # The service does nothing more: the zygote's own ceiling ends the worker.
        ready, _, _ = select.select([handle.exit_fileno()], [], [], 1.0 + 0.1 + 1.0 + 2.0)
        assert ready, "the zygote did not hold the ceiling"
        assert handle.reap(block=False) == -signal.SIGKILL
        handle.close()
    finally:
        z.stop()


# ------------------------------------------------------------------ what the worker inherits

_held: dict[str, bytes] = {}
"""Stand-ins for credentials the service holds in memory."""


def _shift(data: bytes) -> str:
    return bytes((b + 1) % 256 for b in data).decode("latin-1")


def _unshift(text: str) -> bytes:
    return bytes((b - 1) % 256 for b in text.encode("latin-1"))


def _in_own_memory(head: bytes, tail: bytes) -> bool:
    """Whether ``head + tail`` lies anywhere in this process's memory; the two halves are
    compared separately so the search never builds the whole value itself."""
    found = False
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as mem:
        regions = [line.split() for line in maps]
        for fields in regions:
            if not fields[1].startswith("r"):
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            step = 4 << 20
            for at in range(lo, hi, step):
                try:
                    mem.seek(at)
                    chunk = mem.read(min(step + 64, hi - at))
                except (OSError, OverflowError, ValueError):
                    break
                i = chunk.find(head)
                while i >= 0:
                    if chunk[i + len(head) : i + len(head) + len(tail)] == tail:
                        found = True
                    i = chunk.find(head, i + 1)
    return found


def _reporting_run_turn(request, registry, ask, settings, deadline):  # type: ignore[no-untyped-def]
    """Stands in for the worker loop: reports which held values this worker can see."""
    probes = json.loads(request.text)
    seen = {
        label: _in_own_memory(_unshift(head), _unshift(tail))
        for label, (head, tail) in probes.items()
    }
    report = {"memory": seen, "globals": sorted(_held)}
    return Result(request.turn_id, json.dumps(report))


def test_a_secret_read_after_start_is_absent_from_the_worker(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spawn, "run_turn", _reporting_run_turn)
    held = _held
    held.clear()
    # The control: a value the service held before the zygote was forked does reach it.
    held["before"] = secrets.token_hex(24).encode()
    z = Zygote.start(settings, registry_factory=FACTORY)
    try:
        held["after"] = secrets.token_hex(24).encode()  # "read from the vault" after start
        probes = {k: (_shift(v[:24]), _shift(v[24:])) for k, v in held.items()}
        with z.spawn_turn(turn(json.dumps(probes))) as handle:
            _, result = converse(handle, [])
            assert wait_exit(handle) == EXIT_OK
        report = json.loads(result.reply)
        assert report["memory"] == {"before": True, "after": False}
        assert report["globals"] == ["before"]
    finally:
        held.clear()
        z.stop()


def test_the_same_probe_sees_the_secret_in_a_worker_forked_by_the_service(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The control for the test above: without the zygote, the late value is inherited.
    monkeypatch.setattr(spawn, "run_turn", _reporting_run_turn)
    held = _held
    held.clear()
    try:
        held["after"] = secrets.token_hex(24).encode()
        probes = {k: (_shift(v[:24]), _shift(v[24:])) for k, v in held.items()}
        request = turn(json.dumps(probes))
        with spawn.spawn_turn(request, settings, registry_factory=FACTORY) as handle:
            _, result = converse(handle, [])
        assert json.loads(result.reply)["memory"] == {"after": True}
    finally:
        held.clear()


# ------------------------------------------------------------------ the zygote process


def _zygote_fds(z: Zygote) -> dict[int, str]:
    return {fd: target for fd, target in fds_of(z.pid).items() if fd > 2}


def _sockets(fds: dict[int, str], *, running: int = 0) -> set[str]:
    """What the zygote holds besides a landlock ruleset it prebuilt for its workers, and for
    each of ``running`` workers the write end of its exit pipe and (kernel permitting) a pidfd."""
    held = {t for t in fds.values() if not t.startswith("anon_inode:[landlock")}
    watching = {t for t in held if t.startswith(("pipe:", "anon_inode:[pidfd]"))}
    assert sum(t.startswith("pipe:") for t in watching) == running, fds
    assert all(t.startswith("socket:") for t in held - watching), fds
    return held - watching


@pytest.mark.parametrize("spare", [True, False], ids=["spare", "no-spare"])
def test_zygote_holds_no_descriptor_but_stdio_and_its_control_socket(
    settings: Settings, spare: bool
) -> None:
    # Open things in the "service" first: none of them may reach the zygote.
    read_end, write_end = os.pipe()
    held_file = open(__file__, "rb")  # noqa: SIM115 - closed below
    try:
        z = Zygote.start(settings, registry_factory=FACTORY, spare=spare)
    finally:
        os.close(read_end)
        os.close(write_end)
        held_file.close()
    try:
        before = _sockets(_zygote_fds(z))
        # The control socket, and with a spare its idle channel end.
        assert len(before) == (2 if spare else 1), before
        with z.spawn_turn(turn()) as handle:
            ours = os.readlink(f"/proc/self/fd/{handle.sock.fileno()}")
            z.spare_pid()  # answered once the next spare (if any) was forked
            during = _sockets(_zygote_fds(z), running=1)  # it waits for its Job's answer
            converse(handle, [say("ok")])
            assert wait_exit(handle) == EXIT_OK
        after = _sockets(_zygote_fds(z))
        # The worker's channel went to us; the zygote kept no copy. With a spare, the one it
        # used was replaced by a new one: only the control socket is in both sets.
        (control,) = before & during if spare else before
        for fds in (during, after):
            assert ours not in fds
            assert control in fds
            assert len(fds) == len(before), fds
    finally:
        z.stop()


def test_zygote_runs_in_its_own_group_with_sigint_ignored(zygote: Zygote) -> None:
    assert os.getpgid(zygote.pid) == zygote.pid
    os.kill(zygote.pid, signal.SIGINT)
    time.sleep(0.05)
    assert zygote.alive()
    with zygote.spawn_turn(turn()) as handle:
        converse(handle, [say("still here")])


def test_stop_leaves_no_zygote_and_no_worker(settings: Settings) -> None:
    z = Zygote.start(settings, registry_factory=FACTORY)
    waiting = z.spawn_turn(turn(turn_id="t-wait"))  # blocked on its first Job's answer
    spinning = z.spawn_turn(turn(turn_id="t-spin"))
    with pytest.raises(AssertionError, match="no Result"):
        converse(spinning, [calls(call("spin"))], timeout=0.1)
    started = time.monotonic()
    z.stop()
    assert time.monotonic() - started < 2.0
    for pid in (z.pid, waiting.pid, spinning.pid):
        assert proc_state(pid) is None, pid
    assert not z.alive()
    z.stop()  # idempotent
    with pytest.raises(ZygoteError):
        z.spawn_turn(turn())
    # Handles of a stopped zygote are inert, never raise.
    for handle in (waiting, spinning):
        handle.kill()
        assert handle.reap(block=True) in (-signal.SIGKILL, EXIT_UNKNOWN)  # reported as it stopped
        handle.close()


def test_a_killed_zygote_fails_the_next_spawn_fast_and_takes_its_workers(
    settings: Settings,
) -> None:
    z = Zygote.start(settings, registry_factory=FACTORY)
    try:
        handle = z.spawn_turn(turn())
        with pytest.raises(AssertionError, match="no Result"):
            converse(handle, [calls(call("spin"))], timeout=0.1)
        os.kill(z.pid, signal.SIGKILL)
        assert dead(handle.pid), "the worker outlived its zygote"
        started = time.monotonic()
        with pytest.raises(ZygoteError):
            z.spawn_turn(turn())
        assert time.monotonic() - started < 0.5
        assert isinstance(ZygoteError("x"), SpawnError)  # the TurnActor's except catches it
        assert not z.alive()
        assert proc_state(z.pid) is None  # reaped by its client
        handle.kill()
        assert handle.reap(block=True) == EXIT_UNKNOWN
        handle.close()
    finally:
        z.stop()


def test_a_stalled_zygote_times_out_into_zygote_error_and_is_killed(settings: Settings) -> None:
    z = Zygote.start(settings, registry_factory=FACTORY)
    try:
        handle = z.spawn_turn(turn())
        z._timeout = 0.3  # the real one is REQUEST_TIMEOUT_S; a test need not wait 5 s
        os.kill(z.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(ZygoteError, match="did not answer"):
            z.spawn_turn(turn())
        assert time.monotonic() - started < 1.0
        assert proc_state(z.pid) is None  # SIGKILLed and reaped
        assert dead(handle.pid)  # PDEATHSIG
        assert handle.reap(block=True) == EXIT_UNKNOWN
        handle.close()
    finally:
        z.stop()


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xc1 not msgpack",
        msgpack.packb([1, 2, 3]),
        msgpack.packb({"op": "ping"}),  # no id
        msgpack.packb({"id": 1, "op": "fork-bomb"}),
        msgpack.packb({"id": 1, "op": "spawn", "kind": "turn", "request": b"\x00junk"}),
        msgpack.packb({"id": 1, "op": "gate"}),  # no reply socket
        msgpack.packb({"id": 1, "op": "reap", "pid": "x", "wait": 1}),
        msgpack.packb({"id": 1, "op": "part", "data": "text"}),
        b"\x00" * (MAX_MESSAGE + 10),
    ],
    ids=[
        "not-msgpack",
        "not-a-map",
        "no-id",
        "unknown-op",
        "spawn-without-descriptors",
        "gate-without-descriptors",
        "bad-pid",
        "retired-op-part",
        "oversized",
    ],
)
def test_garbage_gets_an_error_reply_and_the_zygote_keeps_serving(
    zygote: Zygote, garbage: bytes
) -> None:
    reply = raw_call(zygote, garbage)
    assert reply["ok"] is False and reply["error"]
    assert zygote.alive()
    with zygote.spawn_turn(turn()) as handle:
        _, result = converse(handle, [say("fine")])
        assert result.reply == "fine"


@pytest.mark.parametrize(
    "message",
    [{"op": "kill", "pid": 1}, {"op": "close", "pid": 1}, {"op": "kill", "pid": "x"}],
    ids=["kill-foreign-pid", "close-foreign-pid", "kill-bad-pid"],
)
def test_a_one_way_message_it_refuses_gets_no_reply_and_harms_nothing(
    zygote: Zygote, message: dict[str, Any]
) -> None:
    zygote.post(message)
    assert zygote.alive()
    # Nothing was answered on the control socket: the next ping's reply is the ping's own.
    assert zygote.call({"op": "ping"})["pid"] == zygote.pid
    with zygote.spawn_turn(turn()) as handle:
        _, result = converse(handle, [say("fine")])
        assert result.reply == "fine"


@pytest.mark.parametrize("size", [0, 5, MAX_REQUEST + 1], ids=["empty", "no-contract", "oversized"])
def test_a_spawn_request_that_is_no_turn_is_refused_on_its_own_reply_socket(
    zygote: Zygote, size: int
) -> None:
    memfd = os.memfd_create("junk")
    try:
        os.write(memfd, b"\x00junk"[:size])
        os.ftruncate(memfd, size)
        pending = zygote._begin({"op": "spawn"}, memfd)
    finally:
        os.close(memfd)
    with pytest.raises(SpawnError, match="refused"):
        pending.wait(5.0)
    assert zygote.alive()
    with zygote.spawn_turn(turn()) as handle:
        _, result = converse(handle, [say("fine")])
        assert result.reply == "fine"


def test_asking_for_a_worker_never_waits_for_the_zygote(zygote: Zygote) -> None:
    """Actors call ``begin_turn`` in a handler: it returns with the zygote stopped, and the
    worker arrives on the pending descriptor once it runs again."""
    os.kill(zygote.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        pending = zygote.begin_turn(turn())
        assert time.monotonic() - started < 0.05
        assert pending.poll() is None
        assert not select.select([pending.fileno()], [], [], 0.2)[0]
    finally:
        os.kill(zygote.pid, signal.SIGCONT)
    assert select.select([pending.fileno()], [], [], 5.0)[0]
    handle = pending.poll()
    assert handle is not None
    with handle:
        _, result = converse(handle, [say("after the stop")])
        assert result.reply == "after the stop"


def test_a_spawn_nobody_waits_for_any_more_leaves_no_worker(zygote: Zygote) -> None:
    before = set(children_of(zygote.pid)) - {zygote.spare_pid()}
    os.kill(zygote.pid, signal.SIGSTOP)
    try:
        zygote.begin_turn(turn()).close()
    finally:
        os.kill(zygote.pid, signal.SIGCONT)
    spare = zygote.spare_pid()  # answered after the spawn was carried out
    until = time.monotonic() + 3.0
    while set(children_of(zygote.pid)) - {spare} - before and time.monotonic() < until:
        time.sleep(0.01)
    assert set(children_of(zygote.pid)) - {spare} - before == set()
    assert zygote.alive()


@pytest.mark.parametrize("when", ["asking", "receiving"])
def test_a_service_out_of_descriptors_gets_spawn_error_and_no_stray_worker(
    zygote: Zygote, when: str
) -> None:
    before = set(children_of(zygote.pid)) - {zygote.spare_pid()}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    pending = zygote.begin_turn(turn()) if when == "receiving" else None
    lowest_free = os.dup(0)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        with pytest.raises(SpawnError, match=r"did not arrive|open files") as info:
            if pending is None:
                zygote.spawn_turn(turn())
            else:
                pending.wait(5.0)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not isinstance(info.value, ZygoteError)
    # The zygote ended and reaped it (a spare, if any, was used and replaced).
    until = time.monotonic() + 3.0
    while set(children_of(zygote.pid)) - {zygote.spare_pid()} != before:
        assert time.monotonic() < until, "the unreachable worker was not reaped"
        time.sleep(0.01)
    with zygote.spawn_turn(turn()) as handle:
        _, result = converse(handle, [say("back")])
        assert result.reply == "back"


def children_of(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_spawn_of_the_wrong_contract_is_refused_not_fatal(zygote: Zygote) -> None:
    memfd = os.memfd_create("result")
    try:
        os.write(memfd, encode(Result("t", "not a request")))
        pending = zygote._begin({"op": "spawn"}, memfd)
    finally:
        os.close(memfd)
    with pytest.raises(SpawnError, match="refused") as info:
        pending.wait(5.0)
    assert not isinstance(info.value, ZygoteError)
    assert zygote.alive()


# ------------------------------------------------------------------ a cgroup per turn

CGROUP_V2 = Path("/sys/fs/cgroup/unified")


def _straggler(ctx: Any, **_: Any) -> str:
    """Leave a process behind in its own session (out of the worker's process group)."""
    return str(popen_host_pid(["sleep", "30"], start_new_session=True))


STRAGGLING = registry_with(("straggle", _straggler, Tier.FREE), ("spin", _spin, Tier.FREE))


@pytest.fixture
def cgroup_settings(settings: Settings) -> Iterator[Settings]:
    """``settings`` whose turns each get a cgroup under one this test creates and removes."""
    if not (CGROUP_V2 / "cgroup.procs").exists() or not os.access(CGROUP_V2, os.W_OK):
        pytest.skip("no writable cgroup v2 hierarchy here")
    parent = CGROUP_V2 / f"shelldon-zygote-test-{os.getpid()}-{secrets.token_hex(4)}"
    parent.mkdir()
    try:
        box = dataclasses.replace(settings.sandbox, cgroup=str(parent))
        yield dataclasses.replace(settings, sandbox=box)
    finally:
        for child in parent.iterdir():
            if child.is_dir():
                sandbox.TurnCgroup(child).close()
        sandbox.TurnCgroup(parent).close()


def test_kill_through_the_zygote_sweeps_the_turns_cgroup(cgroup_settings: Settings) -> None:
    z = Zygote.start(cgroup_settings, registry_factory=STRAGGLING)
    try:
        handle = z.spawn_turn(turn())
        assert handle.cgroup_path is not None
        cgroup = Path(handle.cgroup_path)
        assert cgroup.parent == Path(cgroup_settings.sandbox.cgroup)
        jobs = converse_until_jobs(handle, [calls(call("straggle")), calls(call("spin"))], 2)
        straggler = int(tool_output(jobs[1]))
        assert straggler in sandbox.TurnCgroup(cgroup).pids()
        handle.kill()
        assert handle.reap(block=True) == -signal.SIGKILL
        handle.close()
        assert dead(straggler)
        assert not cgroup.exists()
    finally:
        z.stop()


def test_a_killed_zygote_leaves_no_straggler_once_its_client_notices(
    cgroup_settings: Settings,
) -> None:
    z = Zygote.start(cgroup_settings, registry_factory=STRAGGLING)
    try:
        handle = z.spawn_turn(turn())
        jobs = converse_until_jobs(handle, [calls(call("straggle")), calls(call("spin"))], 2)
        straggler = int(tool_output(jobs[1]))
        os.kill(z.pid, signal.SIGKILL)
        assert dead(handle.pid)
        assert not z.alive()  # noticing it sweeps the cgroups of its unreaped workers
        assert dead(straggler)
        assert handle.cgroup_path is not None and not Path(handle.cgroup_path).exists()
        handle.close()
    finally:
        z.stop()


def converse_until_jobs(handle: Any, answers: list[Any], count: int) -> list[Any]:
    """Answer Jobs until ``count`` have arrived (the worker is then busy with the last answer)."""
    jobs: list[Any] = []
    until = time.monotonic() + 5
    while len(jobs) < count and time.monotonic() < until:
        select.select([handle.sock], [], [], max(0.0, until - time.monotonic()))
        for frame in handle.read_frames():
            jobs.append(frame)
            handle.send(answers.pop(0))
    assert len(jobs) == count, jobs
    return jobs
