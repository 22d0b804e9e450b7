"""With no delegated cgroup (a plain ``shelldon chat``, a dev machine), nothing a self-coded
tool or a gate test starts outlives its turn or its gate run: ``setsid``, a double fork and
``nohup`` alike. Each worker and gate run is the first process of a PID namespace of its own,
and when it ends the kernel kills everything left in it.

Attack inspiration: issue 23 (a ``setsid`` daemon started by a self-coded tool — or by a gate
test, before the owner has seen anything — kept running after the turn and after the service
stopped); the daemonize recipes of Stevens' APUE (double fork, ``setsid``) and ``nohup``.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import time
from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.contracts import Job, ToolCall, TurnRequest
from shelldon.proc import sandbox
from shelldon.store import Store
from shelldon.toolbox.toolbox import Toolbox
from shelldon.worker.handle import EXIT_OK
from shelldon.worker.spawn import spawn_turn

from .conftest import confined
from .probe import (
    calls,
    converse,
    finish,
    outputs,
    promote,
    running,
    say,
    wait_none_running,
)

LEAVER = """\
import subprocess

DESCRIPTION = "Leave a sleeper behind the way a daemon would."
PARAMS_SCHEMA = {
    "type": "object",
    "properties": {"how": {"type": "string"}, "seconds": {"type": "string"}},
}
QUIET = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


def run(how, seconds):
    if how == "setsid":
        subprocess.Popen(["setsid", "sleep", seconds], **QUIET)
    elif how == "double_fork":
        subprocess.run(["sh", "-c", f"(sleep {seconds} &) ; exit 0"], check=True, **QUIET)
    elif how == "nohup":
        subprocess.Popen(["nohup", "sleep", seconds], start_new_session=True, **QUIET)
    else:
        raise ValueError(how)
    return "started"
"""

HOWS = ("setsid", "double_fork", "nohup")
LAYERS = ("landlock", "userns")


def unique_seconds() -> str:
    """A ``sleep`` argument no other process has: how a sleeper is found from outside."""
    return f"{400 + secrets.randbelow(10**6) / 10**7:.7f}"


def no_cgroup(settings: Settings, layer: str) -> Settings:
    settings = confined(settings, layer)
    assert not settings.sandbox.cgroup
    assert sandbox.cgroup_parent(settings.sandbox) is None, "a cgroup would hide the point"
    return settings


def available(layer: str) -> None:
    if layer == "landlock" and sandbox.landlock_abi() < 1:
        pytest.skip("the kernel has no Landlock")
    if layer == "userns" and not sandbox.userns_available():
        pytest.skip("no unprivileged user namespaces")
    if not sandbox.pidns_available():
        pytest.skip("no PID namespaces for unprivileged processes here")


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("layer", LAYERS)
def test_nothing_a_self_coded_tool_starts_outlives_its_turn(
    settings: Settings, layer: str, how: str
) -> None:
    available(layer)
    settings = no_cgroup(settings, layer)
    promote(settings, "leaver", LEAVER)
    seconds = unique_seconds()
    seen: list[int] = []

    def while_the_turn_runs(job: Job) -> None:
        # The double fork's grandchild may not have exec'd ``sleep`` yet when the tool returns.
        deadline = time.monotonic() + 3.0
        while outputs(job) and not seen and time.monotonic() < deadline:
            seen.extend(running("sleep", seconds))
            time.sleep(0.02)

    handle = spawn_turn(TurnRequest("t-left", 7, "leave"), settings)
    try:
        jobs, result = converse(
            handle,
            [calls(ToolCall("c1", "leaver", {"how": how, "seconds": seconds})), say("left")],
            mid_turn=while_the_turn_runs,
        )
    finally:
        code = finish(handle)
    assert outputs(jobs[-1])["c1"] == (True, "started")
    assert result.reply == "left" and code == EXIT_OK
    assert len(seen) == 1, f"the {how} sleeper was not running during the turn: {seen}"
    assert wait_none_running("sleep", seconds), f"the {how} sleeper outlived its turn"


def gate_test(seconds: str) -> str:
    return (
        "import subprocess\n\nfrom leaver import run\n\n\n"
        "def test_leaves_sleepers_behind():\n"
        + "".join(f"    assert run({how!r}, {seconds!r}) == 'started'\n" for how in HOWS)
    )


@pytest.mark.parametrize("layer", LAYERS)
def test_nothing_a_gate_test_starts_outlives_its_gate_run(
    settings: Settings, layer: str, tmp_path: Path
) -> None:
    # The gate runs model-written code before the owner has seen anything.
    available(layer)
    settings = no_cgroup(settings, layer)
    seconds = unique_seconds()
    with Store(settings.database) as store:
        sc = Toolbox.from_settings(settings, store)
        report = sc.run_gate(sc.stage("leaver", LEAVER, gate_test(seconds)))
    assert report.passed, (report.findings, report.output)
    assert wait_none_running("sleep", seconds), running("sleep", seconds)


def test_the_same_gate_without_a_pid_namespace_leaves_them_running(
    settings: Settings, tmp_path: Path
) -> None:
    # The control: the gate's sleepers are really started, and only the PID namespace's end
    # stops them where no cgroup is delegated.
    layer = "landlock" if sandbox.landlock_abi() > 0 else "userns"
    available(layer)
    settings = no_cgroup(settings, layer)
    settings = dataclasses.replace(
        settings, sandbox=dataclasses.replace(settings.sandbox, pidns="off")
    )
    assert not sandbox.plan(settings.sandbox).pidns
    seconds = unique_seconds()
    try:
        with Store(settings.database) as store:
            sc = Toolbox.from_settings(settings, store)
            report = sc.run_gate(sc.stage("leaver", LEAVER, gate_test(seconds)))
        assert report.passed, (report.findings, report.output)
        # The double fork stayed in pytest's process group, which the gate kills; the setsid
        # and nohup (own session) sleepers got away.
        assert len(running("sleep", seconds)) == 2
    finally:
        for pid in running("sleep", seconds):
            os.kill(pid, signal.SIGKILL)
