"""A cgroup per turn: a straggler that a tool started in its own session is gone after the
turn (``cgroup.kill``), the cgroup is removed; a run_shell ``setsid sleep`` is gone either way
(cgroup, or the subreaper sweep where no cgroup can be made).

Attack inspiration: the RISKY-tools issue's double-fork/daemonize escapes; systemd's
``KillMode=control-group`` (the cgroup, not the process tree, is what gets killed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.contracts import (
    Job,
    Message,
    RequestToolApproval,
    ResumeRequest,
    Role,
    ToolCall,
    TurnRequest,
)
from shelldon.proc import sandbox
from shelldon.worker.channel import FrameError
from shelldon.worker.spawn import spawn_resume, spawn_turn

from .probe import (
    calls,
    converse,
    finish,
    outputs,
    promote,
    running,
    say,
    wait_gone,
    wait_none_running,
)

SPAWNER = """\
import subprocess

DESCRIPTION = "Leave a sleeper behind in its own session."
PARAMS_SCHEMA = {"type": "object", "properties": {"seconds": {"type": "string"}}}


def run(seconds):
    subprocess.Popen(["sleep", seconds], start_new_session=True)
    return "started"
"""


def unique_seconds() -> str:
    """A ``sleep`` argument no other process has: how the test finds the sleeper from outside
    (its pid inside the turn's PID namespace means nothing here)."""
    return f"{300 + secrets.randbelow(10**6) / 10**7:.7f}"


def with_cgroup(settings: Settings, parent: Path | None) -> Settings:
    box = dataclasses.replace(settings.sandbox, fs="landlock", cgroup=str(parent or ""))
    return dataclasses.replace(settings, sandbox=box)


def test_setsid_straggler_of_a_self_coded_tool_dies_with_the_turn_cgroup(
    settings: Settings, test_cgroup: Path
) -> None:
    settings = with_cgroup(settings, test_cgroup)
    promote(settings, "spawner", SPAWNER)
    handle = spawn_turn(TurnRequest("t-cg", 7, "spawn"), settings)
    assert handle.cgroup is not None and handle.cgroup.path.parent == test_cgroup
    try:
        seconds = unique_seconds()
        spawn = ToolCall("c1", "spawner", {"seconds": seconds})
        seen: list[int] = []

        def after_the_tool(job: Job) -> None:
            if outputs(job):
                # It outlived the tool's own child, and sits in the turn's cgroup.
                seen.extend(running("sleep", seconds))
                assert handle.cgroup is not None
                assert set(seen) <= set(handle.cgroup.pids()), seen

        jobs, _result = converse(handle, [calls(spawn), say("ok")], mid_turn=after_the_tool)
        assert outputs(jobs[-1])["c1"] == (True, "started")
        (straggler,) = seen
    finally:
        finish(handle)
    assert wait_gone(straggler)
    assert not handle.cgroup.path.exists()


def test_killed_worker_takes_its_whole_cgroup_along(settings: Settings, test_cgroup: Path) -> None:
    settings = with_cgroup(settings, test_cgroup)
    promote(settings, "spawner", SPAWNER)
    handle = spawn_turn(TurnRequest("t-cg2", 7, "spawn"), settings)
    assert handle.cgroup is not None
    try:
        seconds = unique_seconds()
        seen: list[int] = []

        def kill_mid_turn(job: Job) -> None:
            if outputs(job):
                seen.extend(running("sleep", seconds))
                handle.kill()  # what the turn watchdog does on overrun

        with contextlib.suppress(AssertionError, FrameError):  # no Result: it was killed
            converse(
                handle,
                [calls(ToolCall("c1", "spawner", {"seconds": seconds})), say("ok")],
                mid_turn=kill_mid_turn,
            )
        (straggler,) = seen
        assert wait_gone(straggler)
    finally:
        finish(handle)


def run_shell_setsid(settings: Settings) -> str:
    """Resume an approved ``run_shell`` that leaves a ``setsid sleep``; returns what its
    command line says (the pid inside the turn means nothing outside it)."""
    marker = unique_seconds()
    shell = ToolCall(
        "r1", "run_shell", {"command": f"setsid sleep {marker} > /dev/null 2>&1 & echo $!"}
    )
    parked = RequestToolApproval(
        shell,
        "run_shell(...)",
        (
            Message(Role.SYSTEM, "s"),
            Message(Role.USER, "go"),
            Message(Role.ASSISTANT, "", (shell,)),
        ),
    )
    handle = spawn_resume(ResumeRequest("t-sh", 7, parked, True), settings)
    try:
        jobs, _ = converse(handle, [say("ok")])
        ok, text = outputs(jobs[-1])["r1"]
        assert ok and text.split()[-1].isdigit(), text  # it did start: $! is its pid
        return marker
    finally:
        finish(handle)


def test_run_shell_setsid_sleep_is_gone_after_the_turn_cgroup_path(
    settings: Settings, test_cgroup: Path
) -> None:
    straggler = run_shell_setsid(with_cgroup(settings, test_cgroup))
    assert wait_none_running("sleep", straggler)


def test_run_shell_setsid_sleep_is_gone_after_the_turn_subreaper_path(settings: Settings) -> None:
    settings = with_cgroup(settings, None)
    assert sandbox.cgroup_parent(settings.sandbox) is None
    straggler = run_shell_setsid(settings)
    assert wait_none_running("sleep", straggler)


@pytest.mark.parametrize("knob", ["memory.max", "pids.max"])
def test_turn_cgroup_gets_its_caps_where_the_controller_exists(
    settings: Settings, test_cgroup: Path, knob: str
) -> None:
    group = sandbox.open_turn_cgroup(with_cgroup(settings, test_cgroup).sandbox, "caps")
    assert group is not None
    try:
        path = group.path / knob
        if path.exists():
            want = settings.sandbox.memory_max_mb * 1024 * 1024 if knob == "memory.max" else 64
            assert int(path.read_text()) == want
        else:
            # This machine's v2 hierarchy lacks that controller (hybrid layout): nothing to set.
            assert (
                knob.split(".", maxsplit=1)[0]
                not in (test_cgroup / "cgroup.controllers").read_text()
            )
    finally:
        group.close()
