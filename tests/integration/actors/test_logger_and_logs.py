"""Thespian's logger process can die without taking the system down, and every process logs
JSON lines straight to its own stdout, with no hop through that logger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from actors import proctree
from actors.system import RunningSystem
from tests.integration.actors.messages import Ping, Pong
from tests.integration.actors.probes import ProbeActor


def _children(pid: int) -> set[int]:
    return proctree.with_descendants([pid]) - {pid} - _grandchildren(pid)


def _grandchildren(pid: int) -> set[int]:
    found: set[int] = set()
    for child in proctree.with_descendants([pid]) - {pid}:
        found |= proctree.with_descendants([child]) - {child}
    return found


def test_the_system_keeps_working_after_its_logger_process_is_killed(
    running: RunningSystem,
) -> None:
    (admin,) = proctree.listeners_on_port(running.admin_port)
    (logger,) = _children(admin)  # before any actor exists, the Admin's only child

    os.kill(logger, signal.SIGKILL)
    time.sleep(0.3)

    assert proctree.is_alive(admin)
    probe = running.system.createActor(ProbeActor)
    assert isinstance(running.system.ask(probe, Ping("after"), 5), Pong)
    restarted = _children(admin) - {logger}
    assert len(restarted) == 2  # a new logger, and the probe


_SCRIPT = textwrap.dedent(
    """
    import sys
    from shelldon.logs import configure_logging
    configure_logging()
    from actors.hardening import TRUSTED
    TRUSTED.trust_module("tests.integration.actors.messages")
    TRUSTED.trust_actor_package("tests.integration.actors")
    from actors.system import start_actor_system, stop_actor_system
    from tests.integration.actors.messages import Explode, Ping
    from tests.integration.actors.probes import PlainActor, ProbeActor

    running = start_actor_system(admin_port=int(sys.argv[1]))
    try:
        probe = running.system.createActor(ProbeActor)
        running.system.ask(probe, Ping("hello", turn_id="t-42"), 5)
        running.system.tell(probe, Explode(turn_id="t-43"))
        plain = running.system.createActor(PlainActor)
        running.system.tell(plain, Explode())
        running.system.ask(probe, Ping("flush"), 5)
    finally:
        stop_actor_system(running)
    """
)


@pytest.mark.slow
def test_every_process_logs_json_lines_straight_to_stdout(admin_port: int, tmp_path: Path) -> None:
    # A real service process: its stdout is a pipe, as under systemd/journald.
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(admin_port)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).resolve().parents[3],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]  # every line is JSON

    by_event = {e["event"]: e for e in events}
    assert by_event["pinged"]["actor"] == "ProbeActor"
    assert by_event["stdlib record from probe"]["logger"] == "probe.stdlib"
    failed = by_event["handler_failed"]
    assert (failed["actor"], failed["message_type"], failed["turn_id"]) == (
        "ProbeActor",
        "Explode",
        "t-43",
    )
    assert "probe exploded on purpose" in failed["exception"]
    # Thespian's own warning about the plain actor, rendered in the same shape.
    assert any("retryable exception" in e["event"] and e["actor"] == "PlainActor" for e in events)
    # thesplog no longer writes its own file.
    assert not (tmp_path / "thespian.log").exists()
