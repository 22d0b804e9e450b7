"""The per-turn fork for real: a forked worker, a test parent answering its Jobs on the channel.

Inspired by trio's test_subprocess (leaked descriptors, reaping) and the Thespian facts in
DESIGN.md (inherited fds, signal handlers, never waitpid(-1)).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shelldon.config import Settings
from shelldon.contracts import (
    Completion,
    Job,
    JobFailed,
    Message,
    Remember,
    RequestToolApproval,
    Result,
    ResumeRequest,
    Role,
    Tier,
    ToolCall,
    ToolDefinition,
    TurnRequest,
)
from shelldon.proc.child import EXIT_UNKNOWN
from shelldon.secrets import find_secret, forget_env_secrets, take_env_secrets
from shelldon.worker.channel import HEADER, FrameReader, pack_frame
from shelldon.worker.handle import EXIT_CHANNEL, EXIT_CRASH, EXIT_OK, WorkerHandle
from shelldon.worker.prepare import ENV_ALLOWLIST
from shelldon.worker.relay import TOO_BIG_REPLY, channel_ask, result_frame
from shelldon.worker.spawn import CRASH_REPLY, above_stdio, spawn_resume, spawn_turn
from shelldon.worker.tools import Registry, ToolSpec, context_from_settings
from tests.unit.worker.brain import OPEN_SCHEMA, call, calls, say

Answer = Completion | JobFailed | bytes


def converse(
    handle: WorkerHandle, answers: list[Answer], timeout: float = 5.0
) -> tuple[list[Job], Result]:
    """Play the TurnActor: answer each Job with the next scripted answer until the Result."""
    jobs: list[Job] = []
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        ready, _, _ = select.select([handle.sock], [], [], max(0.0, until - time.monotonic()))
        if not ready:
            break
        for frame in handle.read_frames():
            if isinstance(frame, Result):
                return jobs, frame
            assert isinstance(frame, Job), frame
            jobs.append(frame)
            answer = answers.pop(0)
            if isinstance(answer, bytes):
                handle.sock.sendall(answer)
            else:
                handle.send(answer)
        if handle.eof:
            break
    raise AssertionError(f"no Result from worker {handle.pid} (eof={handle.eof}, jobs={jobs})")


def wait_exit(handle: WorkerHandle, timeout: float = 5.0) -> int:
    """Reap without ever blocking the test forever."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        code = handle.reap(block=False)
        if code is not None:
            return code
        time.sleep(0.005)
    handle.kill()
    raise AssertionError(f"worker {handle.pid} did not exit in {timeout} s")


def registry_with(*tools: tuple[str, Callable[..., str], Tier]) -> Callable[[Settings], Registry]:
    """A registry factory (it runs in the child) holding just ``tools``."""

    def factory(settings: Settings) -> Registry:
        registry = Registry(context_from_settings(settings))
        for name, fn, tier in tools:
            registry.add(ToolSpec(ToolDefinition(name, name, OPEN_SCHEMA, tier), fn))
        return registry

    return factory


def inspect_process(ctx: Any) -> str:
    """What the worker sees of its own process, as JSON."""
    soft_as, hard_as = resource.getrlimit(resource.RLIMIT_AS)
    soft_cpu, _ = resource.getrlimit(resource.RLIMIT_CPU)
    return json.dumps(
        {
            "env": dict(os.environ),
            "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
            "rlimit_as": [soft_as, hard_as],
            "rlimit_cpu": soft_cpu,
            "env_secret": find_secret("anthropic_api_key", ctx.vault, {}),
            "sigusr1_default": signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL,
            "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        }
    )


INSPECT = registry_with(("inspect", inspect_process, Tier.FREE))


def tool_output(job: Job) -> str:
    """The payload inside the last TOOL message's <tool_output> frame."""
    content = job.messages[-1].content
    return content.split("\n", 1)[1].rsplit("\n", 1)[0]


@pytest.fixture
def handles() -> Iterator[list[WorkerHandle]]:
    """Every handle a test spawns is killed, reaped and closed, whatever happens."""
    spawned: list[WorkerHandle] = []
    yield spawned
    for handle in spawned:
        handle.kill()
        handle.reap(block=True)
        handle.close()


def spawn(
    handles: list[WorkerHandle], settings: Settings, text: str = "hi", **kw: Any
) -> WorkerHandle:
    handle = spawn_turn(TurnRequest("t-fork", 7, text), settings, **kw)
    handles.append(handle)
    return handle


# ------------------------------------------------------------------ the happy path


def test_forked_worker_runs_a_turn_and_sends_one_result(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    handle = spawn(handles, settings, registry_factory=INSPECT)
    final = say('Done.\n```ops\n{"op":"remember","fact":"forks work"}\n```')
    jobs, result = converse(handle, [calls(call("inspect")), final])
    assert len(jobs) == 2 and all(j.turn_id == "t-fork" for j in jobs)
    assert jobs[0].deadline == handle.deadline
    assert result.reply == "Done."
    assert result.ops == (Remember("forks work"),)
    assert (result.model_calls, result.tool_executions) == (2, 1)
    assert wait_exit(handle) == EXIT_OK


def test_deadline_is_fixed_before_the_fork_from_the_turn_timeout(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    before = time.monotonic()
    handle = spawn(handles, settings, registry_factory=INSPECT)
    after = time.monotonic()
    timeout = settings.limits.turn_timeout_s
    assert before + timeout <= handle.deadline <= after + timeout
    jobs, _ = converse(handle, [say("ok")])
    assert jobs[0].deadline == handle.deadline


def test_real_build_registry_is_the_default(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    handle = spawn(handles, settings)
    jobs, result = converse(handle, [calls(call("get_time")), say("hello")])
    names = [t.name for t in jobs[0].tools]
    assert "propose_tool" in names and "get_time" in names
    answer = jobs[1].messages[-1]
    assert answer.role is Role.TOOL and not answer.is_error
    assert time.strftime("%Y-") in answer.content
    assert result.reply == "hello" and result.tool_executions == 1


def test_resume_runs_the_approved_call_in_a_fresh_worker(
    settings: Settings, handles: list[WorkerHandle], tmp_path: Path
) -> None:
    # In the workspace: the approved call's child may write there and nowhere else.
    settings.workspace.mkdir(parents=True, exist_ok=True)
    marker = settings.workspace / "ran"

    def risky(ctx: Any, **_: Any) -> str:
        marker.write_text("yes")
        return "deployed"

    factory = registry_with(("deploy", risky, Tier.RISKY))
    risky_call = ToolCall("r1", "deploy", {})
    parked = RequestToolApproval(
        risky_call,
        "deploy()",
        (
            Message(Role.SYSTEM, "sys"),
            Message(Role.USER, "deploy it"),
            Message(Role.ASSISTANT, "", (risky_call,)),
        ),
    )
    handle = spawn_resume(
        ResumeRequest("t-res", 7, parked, True), settings, registry_factory=factory
    )
    handles.append(handle)
    jobs, result = converse(handle, [say("Deployed!")])
    assert marker.read_text() == "yes"
    assert tool_output(jobs[0]) == "deployed"
    assert result.reply == "Deployed!" and result.tool_executions == 1
    assert wait_exit(handle) == EXIT_OK


# ------------------------------------------------------------------ what the child inherits


def test_child_sees_only_the_allowlisted_environment(
    settings: Settings, handles: list[WorkerHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake-secret")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:fake-token")
    monkeypatch.setenv("SHELLDON_PROBE", "probe")
    monkeypatch.setenv("LANG", "C.UTF-8")
    handle = spawn(handles, settings, registry_factory=INSPECT)
    jobs, _ = converse(handle, [calls(call("inspect")), say("ok")])
    seen = json.loads(tool_output(jobs[1]))
    assert set(seen["env"]) <= set(ENV_ALLOWLIST)
    assert seen["env"]["LANG"] == "C.UTF-8"
    everything_sent = "".join(m.content for m in jobs[1].messages)
    assert "sk-ant-fake-secret" not in everything_sent
    assert "fake-token" not in everything_sent
    assert os.environ["ANTHROPIC_API_KEY"] == "sk-ant-fake-secret"  # the parent is untouched


def test_child_drops_secrets_the_parent_took_from_its_environment(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    take_env_secrets({"ANTHROPIC_API_KEY": "sk-ant-held-in-memory"})
    try:
        assert find_secret("anthropic_api_key", settings.vault, {}) is not None
        handle = spawn(handles, settings, registry_factory=INSPECT)
        jobs, _ = converse(handle, [calls(call("inspect")), say("ok")])
    finally:
        forget_env_secrets()
    seen = json.loads(tool_output(jobs[1]))
    assert seen["env_secret"] is None


def test_child_closes_descriptors_the_parent_had_open(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    read_end, write_end = os.pipe()
    try:

        def write_to_parent_pipe(ctx: Any, **_: Any) -> str:
            try:
                os.write(write_end, b"smuggled")
            except OSError as exc:
                return f"refused: {exc.strerror}"
            return "wrote"

        factory = registry_with(
            ("inspect", inspect_process, Tier.FREE), ("leak", write_to_parent_pipe, Tier.FREE)
        )
        handle = spawn(handles, settings, registry_factory=factory)
        jobs, _ = converse(handle, [calls(call("inspect"), call("leak")), say("ok")])
        tool_texts = [m.content for m in jobs[1].messages if m.role is Role.TOOL]
        seen = json.loads(tool_texts[0].split("\n", 1)[1].rsplit("\n", 1)[0])
        assert "refused: Bad file descriptor" in tool_texts[1]
        assert write_end not in seen["fds"] and read_end not in seen["fds"]
        # Only stdio, the channel and listdir's own directory handle remain.
        assert len(set(seen["fds"]) - {0, 1, 2}) <= 2
        # With the parent's copy closed, the pipe reports EOF: the child holds no writer.
        os.close(write_end)
        write_end = -1
        os.set_blocking(read_end, False)
        assert os.read(read_end, 16) == b""
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def test_child_resets_inherited_signal_handlers(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        handle = spawn(handles, settings, registry_factory=INSPECT)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    jobs, _ = converse(handle, [calls(call("inspect")), say("ok")])
    seen = json.loads(tool_output(jobs[1]))
    assert seen["sigusr1_default"] and seen["sigterm_default"]


def test_child_runs_under_the_configured_rlimits(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    handle = spawn(handles, settings, registry_factory=INSPECT)
    jobs, _ = converse(handle, [calls(call("inspect")), say("ok")])
    seen = json.loads(tool_output(jobs[1]))
    cap = settings.limits.rlimit_as_mb * 1024 * 1024
    assert seen["rlimit_as"] == [cap, cap]
    assert seen["rlimit_cpu"] == settings.limits.rlimit_cpu_s


# ------------------------------------------------------------------ lifecycle


def test_reap_leaves_no_zombie(settings: Settings, handles: list[WorkerHandle]) -> None:
    handle = spawn(handles, settings, registry_factory=INSPECT)
    converse(handle, [say("bye")])
    assert wait_exit(handle) == EXIT_OK
    assert not Path(f"/proc/{handle.pid}").exists()
    with pytest.raises(ChildProcessError):
        os.waitpid(handle.pid, os.WNOHANG)
    assert handle.reap(block=True) == EXIT_OK  # idempotent, never waits on a stranger


def test_kill_stops_a_worker_stuck_in_a_tool(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    def spin(ctx: Any, **_: Any) -> str:
        while True:
            pass

    handle = spawn(handles, settings, registry_factory=registry_with(("spin", spin, Tier.FREE)))
    with pytest.raises(AssertionError, match="no Result"):
        converse(handle, [calls(call("spin"))], timeout=0.2)
    assert handle.reap(block=False) is None
    handle.kill()
    handle.kill()
    assert handle.reap(block=True) == -signal.SIGKILL
    handle.kill()  # after the reap: must not signal a pid that may now belong to another
    assert handle.reap(block=False) == -signal.SIGKILL


def test_reap_waits_only_on_its_own_pid(settings: Settings, handles: list[WorkerHandle]) -> None:
    first = spawn(handles, settings, registry_factory=INSPECT)
    second = spawn(handles, settings, registry_factory=INSPECT)
    converse(second, [say("second")])
    assert wait_exit(second) == EXIT_OK
    assert first.reap(block=False) is None  # still waiting on its Job answer
    converse(first, [say("first")])
    assert wait_exit(first) == EXIT_OK


def test_reap_after_someone_else_reaped_reports_unknown(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    handle = spawn(handles, settings, registry_factory=INSPECT)
    converse(handle, [say("bye")])
    os.waitpid(handle.pid, 0)  # a stray reaper got there first
    assert handle.reap(block=True) == EXIT_UNKNOWN
    handle.kill()  # and the handle no longer signals that pid


def test_handle_as_context_manager_kills_reaps_and_closes(settings: Settings) -> None:
    with spawn_turn(TurnRequest("t", 1, "hi"), settings, registry_factory=INSPECT) as handle:
        pass
    assert handle.exit_code == -signal.SIGKILL
    assert handle.sock.fileno() == -1


# ------------------------------------------------------------------ a hostile or broken parent


@pytest.mark.parametrize(
    "garbage",
    [
        HEADER.pack(5) + b"hello",  # a body that is no contract
        b"\xff\xff\xff\xff",  # a 4 GB length prefix
        HEADER.pack(0),  # an empty frame
        pack_frame(TurnRequest("t", 1, "a contract, but not an answer")),
    ],
    ids=["garbage-body", "oversize-length", "empty-frame", "wrong-contract"],
)
def test_bad_frame_from_the_parent_ends_the_turn_with_an_apology(
    settings: Settings, handles: list[WorkerHandle], garbage: bytes
) -> None:
    handle = spawn(handles, settings, registry_factory=INSPECT)
    started = time.monotonic()
    jobs, result = converse(handle, [garbage])
    assert time.monotonic() - started < 2.0
    assert len(jobs) == 1
    assert result.reply.startswith("Sorry") and "lost contact" in result.reply
    assert result.model_calls == 1
    assert wait_exit(handle) == EXIT_OK


def test_parent_hanging_up_mid_turn_ends_the_worker(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    handle = spawn(handles, settings, registry_factory=INSPECT)
    ready, _, _ = select.select([handle.sock], [], [], 5)
    assert ready and isinstance(handle.read_frames()[0], Job)
    handle.close()
    assert wait_exit(handle) == EXIT_CHANNEL


def test_crash_inside_the_worker_still_sends_an_apology_and_exits(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    def broken_factory(settings: Settings) -> Registry:
        raise RuntimeError("registry exploded")

    handle = spawn(handles, settings, registry_factory=broken_factory)
    jobs, result = converse(handle, [])
    assert jobs == []
    assert result.reply == CRASH_REPLY
    assert wait_exit(handle) == EXIT_CRASH


def test_worker_that_tries_to_exit_still_ends_in_os_exit(
    settings: Settings, handles: list[WorkerHandle]
) -> None:
    def leave(ctx: Any, **_: Any) -> str:
        raise SystemExit(0)

    handle = spawn(handles, settings, registry_factory=registry_with(("leave", leave, Tier.FREE)))
    jobs, result = converse(handle, [calls(call("leave")), say("still here")])
    assert "SystemExit" in tool_output(jobs[1])
    assert result.reply == "still here"
    assert wait_exit(handle) == EXIT_OK


def test_worker_dies_when_the_process_that_forked_it_dies(settings: Settings) -> None:
    # A crashed TurnActor must not leave a worker behind, even one too busy to notice EOF.
    def spin(ctx: Any, **_: Any) -> str:
        while True:
            pass

    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:  # pragma: no cover - the stand-in TurnActor
        try:
            os.close(read_end)
            factory = registry_with(("spin", spin, Tier.FREE))
            request = TurnRequest("t-orphan", 1, "hi")
            handle = spawn_turn(request, settings, registry_factory=factory)
            select.select([handle.sock], [], [], 5)
            assert isinstance(handle.read_frames()[0], Job)
            handle.send(calls(call("spin")))  # the worker now spins and never reads again
            os.write(write_end, str(handle.pid).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        worker_pid = int(os.read(read_end, 32))
    finally:
        os.close(read_end)
        os.waitpid(middle, 0)
    until = time.monotonic() + 5
    while time.monotonic() < until:
        try:
            state = Path(f"/proc/{worker_pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":
            return
        time.sleep(0.01)
    os.kill(worker_pid, signal.SIGKILL)
    raise AssertionError(f"worker {worker_pid} outlived the process that forked it")


# ------------------------------------------------------------------ the child's channel pieces


def test_silent_parent_is_a_timeout_not_a_lost_channel() -> None:
    parent, child = socket.socketpair()
    with parent, child:
        ask = channel_ask(child, "t", time.monotonic() + 0.1)
        answer = ask(Job("t", (), (), 0.0))
        assert isinstance(answer, JobFailed) and answer.kind == "timeout"
        assert isinstance(FrameReader().feed(parent.recv(65536))[0], Job)


def test_parent_answer_arrives_through_channel_ask() -> None:
    parent, child = socket.socketpair()
    with parent, child:
        parent.sendall(pack_frame(say("hi")))
        answer = channel_ask(child, "t", time.monotonic() + 1)(Job("t", (), (), 0.0))
        assert answer == say("hi")


def test_result_too_big_for_the_channel_becomes_an_apology_with_its_counts() -> None:
    huge = Result("t", "x" * (2 * 1024 * 1024), model_calls=3, tool_executions=2)
    (back,) = FrameReader().feed(result_frame(huge))
    assert back.reply == TOO_BIG_REPLY
    assert (back.model_calls, back.tool_executions) == (3, 2)


def test_result_that_fits_is_framed_unchanged() -> None:
    result = Result("t", "fine", ops=(Remember("x"),), model_calls=1)
    assert FrameReader().feed(result_frame(result)) == [result]


def test_a_flooding_worker_cannot_pin_the_reader() -> None:
    parent, child = socket.socketpair()
    parent.setblocking(False)
    handle = WorkerHandle(pid=-1, sock=parent, deadline=time.monotonic() + 5, turn_id="t")
    stop = threading.Event()
    frame = pack_frame(say("x" * 4000))

    def flood() -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set():
                child.sendall(frame)

    writer = threading.Thread(target=flood)
    writer.start()
    try:
        time.sleep(0.05)
        started = time.monotonic()
        frames = handle.read_frames()  # returns though the worker never stops writing
        assert time.monotonic() - started < 2.0
        assert frames and all(f == say("x" * 4000) for f in frames)
    finally:
        stop.set()
        parent.close()
        writer.join(5)
        child.close()


def test_channel_never_lands_on_a_stdio_descriptor() -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - a throwaway process that may close its own stdin
        code = 1
        try:
            os.close(0)
            a, b = socket.socketpair()
            assert a.fileno() == 0
            moved = above_stdio(a)
            moved.sendall(b"x")
            if moved.fileno() > 2 and a.fileno() == -1 and b.recv(1) == b"x":
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
