"""A cgroup per turn: a straggler that a tool started in its own session is gone after the
turn (``cgroup.kill``), the cgroup is removed; a run_shell ``setsid sleep`` is gone either way
(cgroup, or the subreaper sweep where no cgroup can be made).

Attack inspiration: the RISKY-tools issue's double-fork/daemonize escapes; systemd's
``KillMode=control-group`` (the cgroup, not the process tree, is what gets killed).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.contracts import (
    Message,
    RequestToolApproval,
    ResumeRequest,
    Role,
    ToolCall,
    TurnRequest,
)
from shelldon.core import sandbox
from shelldon.worker.spawn import spawn_resume, spawn_turn

from .probe import calls, converse, finish, outputs, promote, say, wait_gone

SPAWNER = """\
import subprocess

DESCRIPTION = "Leave a sleeper behind in its own session."
PARAMS_SCHEMA = {"type": "object", "properties": {}}


def run():
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    return str(child.pid)
"""


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
        jobs, _result = converse(handle, [calls(ToolCall("c1", "spawner", {})), say("ok")])
        ok, text = outputs(jobs[-1])["c1"]
        assert ok, text
        straggler = int(text)
        # It outlived the worker's own loop, and sits in the turn's cgroup.
        assert straggler in handle.cgroup.pids()
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
        jobs, _ = converse(handle, [calls(ToolCall("c1", "spawner", {})), say("ok")])
        straggler = int(outputs(jobs[-1])["c1"][1])
        handle.kill()  # what the turn watchdog does on overrun
        assert wait_gone(straggler)
    finally:
        finish(handle)


def run_shell_setsid(settings: Settings) -> int:
    """Resume an approved ``run_shell`` that leaves a ``setsid sleep``; returns its pid."""
    shell = ToolCall("r1", "run_shell", {"command": "setsid sleep 300 > /dev/null 2>&1 & echo $!"})
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
        assert ok, text
        return int(text.split()[-1])
    finally:
        finish(handle)


def test_run_shell_setsid_sleep_is_gone_after_the_turn_cgroup_path(
    settings: Settings, test_cgroup: Path
) -> None:
    straggler = run_shell_setsid(with_cgroup(settings, test_cgroup))
    assert wait_gone(straggler)


def test_run_shell_setsid_sleep_is_gone_after_the_turn_subreaper_path(settings: Settings) -> None:
    settings = with_cgroup(settings, None)
    assert sandbox.cgroup_parent(settings.sandbox) is None
    straggler = run_shell_setsid(settings)
    assert wait_gone(straggler)


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
