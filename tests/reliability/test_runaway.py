"""Runaway code: a live self-coded tool that loops forever, sleeps in C, allocates until the
kernel stops it, forks a child that ignores SIGTERM, or writes 100 MB to stdout. Each turn
ends within its budget with one answer, the service stays up, and a tool that keeps failing or
hanging collects strikes and ends in quarantine."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelldon.config import load_settings
from tests import proctree
from tests.integration.runtime.harness import Service
from tests.pids import holders

from .rig import install_tool, wait_until

pytestmark = pytest.mark.slow

TURN_S, BAIL_S, GRACE_S = 2.0, 0.5, 0.5
BUDGET_S = TURN_S + GRACE_S + 1.5  # the kill, the reap and an actor hop or two
STRIKES = 2

HEADER = """\
DESCRIPTION = "A tool that misbehaves on purpose."
PARAMS_SCHEMA = {"type": "object", "properties": {}}
"""
TOOLS = {
    "spin": HEADER + "\n\ndef run():\n    while True:\n        pass\n",
    "nap": HEADER + "import time\n\n\ndef run():\n    time.sleep(1000)\n    return 'rested'\n",
    "hog": HEADER
    + "\n\ndef run():\n    kept = []\n    while True:\n"
    + "        kept.append(bytearray(16 * 2**20))\n",
    "spawner": HEADER
    + """import os
import signal
import time


def run():
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # Kept open while it lives: how the test finds it (its pid inside the turn's PID
        # namespace names nothing outside).
        out = open("child.pid", "w")
        out.write(str(os.getpid()))
        out.flush()
        while True:
            time.sleep(1)
    time.sleep(1000)
""",
    # Shuts every descriptor but stdio (the worker's channel among them) and goes on running.
    "hangup": HEADER
    + """import os
import time


def run():
    os.closerange(3, 4096)
    time.sleep(1000)
""",
    # Ignores every signal it can and keeps running (SIGKILL it cannot ignore).
    "stubborn": HEADER
    + """import signal
import time


def run():
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGXCPU):
        signal.signal(sig, signal.SIG_IGN)
    time.sleep(1000)
""",
    "spew": HEADER
    + """import sys


def run():
    chunk = "x" * 2**20
    for _ in range(100):
        sys.stdout.write(chunk)
    sys.stdout.flush()
    return "wrote 100 MB"
""",
}


def script_for(name: str) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = [
        {"when": name, "tool_calls": [{"name": name, "args": {}}]} for _ in range(STRIKES)
    ]
    return [*calls, {"when": name, "text": f"{name} is done."}, {"text": "Still here."}]


def start(tmp_path: Path, name: str) -> Service:
    home = tmp_path / "home"
    install_tool(load_settings(environ={"SHELLDON_HOME": str(home)}), name, TOOLS[name])
    return Service(
        home,
        script_for(name),
        SHELLDON_LIMITS_TURN_TIMEOUT_S=str(TURN_S),
        SHELLDON_LIMITS_BAIL_MARGIN_S=str(BAIL_S),
        SHELLDON_LIMITS_KILL_GRACE_S=str(GRACE_S),
        SHELLDON_LIMITS_STRIKE_THRESHOLD=str(STRIKES),
        SHELLDON_LIMITS_RLIMIT_AS_MB="512",
    )


@pytest.fixture
def runaway(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Service]:
    svc = start(tmp_path, request.param)
    try:
        yield svc
    finally:
        svc.stop()
        kill_strays(svc.settings.workspace / "child.pid")


def kill_strays(pid_file: Path) -> None:
    """SIGKILL the child a spawner tool left behind (this test started it, indirectly)."""
    for pid in holders(pid_file):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def one_turn(svc: Service, text: str) -> tuple[str, float]:
    """Say ``text``; return the reply and how long it took."""
    before = time.monotonic()
    svc.say(text)
    chunk = svc.expect("shelldon › ", timeout=BUDGET_S + 5)
    elapsed = time.monotonic() - before
    chunk += svc.expect("\n", timeout=2)
    return chunk, elapsed


@pytest.mark.parametrize("runaway", ["spin", "nap", "hog", "spawner"], indirect=True)
def test_a_runaway_tool_ends_its_turn_in_budget_and_lands_in_quarantine(
    runaway: Service, request: pytest.FixtureRequest
) -> None:
    name = request.node.callspec.params["runaway"]
    notice = f"I put my tool {name} in quarantine"
    for _ in range(STRIKES):
        reply, elapsed = one_turn(runaway, f"use {name}")
        assert elapsed < BUDGET_S, (elapsed, reply)
        if notice in runaway.output:
            break  # a tool that fails fast may collect every strike in one turn
    wait_until(lambda: notice in runaway.quiet_for(0.05) or notice in runaway.output, 10, notice)
    assert (runaway.settings.toolbox / "quarantine" / f"{name}.py").exists()
    assert not (runaway.settings.live_tools / f"{name}.py").exists()
    # The service stays up: the next turn no longer sees the tool and is answered.
    runaway.say(f"use {name} once more")
    runaway.expect("shelldon › ", timeout=BUDGET_S + 5)
    assert runaway.status().restarts == 0


@pytest.mark.parametrize("runaway", ["spew"], indirect=True)
def test_a_tool_writing_100mb_to_stdout_ends_its_turn_in_budget(runaway: Service) -> None:
    reply, elapsed = one_turn(runaway, "use spew")
    assert elapsed < BUDGET_S, (elapsed, reply)
    runaway.say("hello")
    runaway.expect("shelldon › ", timeout=BUDGET_S + 5)
    assert runaway.status().restarts == 0


@pytest.mark.parametrize("runaway", ["spawner"], indirect=True)
def test_a_child_forked_by_a_runaway_tool_dies_with_its_turn(runaway: Service) -> None:
    pid_file = runaway.settings.workspace / "child.pid"
    one_turn(runaway, "use spawner")
    wait_until(pid_file.exists, 5, "the child to write its pid")
    try:
        time.sleep(1.0)
        alive = [p for p in holders(pid_file) if proctree.is_alive(p)]
        assert not alive, alive
    finally:
        kill_strays(pid_file)


@pytest.mark.parametrize("runaway", ["hangup", "stubborn", "nap"], indirect=True)
def test_every_actor_keeps_answering_while_a_worker_hangs_or_hangs_up(runaway: Service) -> None:
    """No actor ever waits on a process: while the tool runs, is killed and is reaped, the
    supervisor's status round trip (through the one actor thread) stays under 100 ms."""
    runaway.status()  # the path warmed once
    runaway.say("use " + runaway_tool(runaway))
    started, worst = time.monotonic(), 0.0
    while time.monotonic() - started < TURN_S + GRACE_S + 1.0:
        before = time.monotonic()
        status = runaway.status()
        worst = max(worst, time.monotonic() - before)
        assert status.restarts == 0
        time.sleep(0.02)
    assert worst < 0.1, f"a status request took {worst * 1000:.0f} ms"
    reply = runaway.expect("shelldon › ", timeout=BUDGET_S + 5)
    assert reply
    wait_until(lambda: not runaway.turn_workers(), 5, "the worker to be reaped")


def runaway_tool(svc: Service) -> str:
    (live,) = sorted(p.stem for p in svc.settings.live_tools.glob("*.py"))
    return live
