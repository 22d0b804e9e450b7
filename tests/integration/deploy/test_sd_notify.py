"""`shelldon run` speaks systemd's notify protocol: READY=1 once the actors are up and the
transport polls, WATCHDOG=1 only after a healthy supervisor ping, STOPPING=1 on SIGTERM."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import proctree
from tests.integration.runtime.harness import ThreadedFakeTelegram

pytestmark = pytest.mark.slow

OWNER = 1001
WATCHDOG_USEC = 600_000  # 0.6 s: the main loop must ping every 0.2 s


@dataclass
class Run:
    """A `shelldon run` subprocess, the notify socket it talks to, and what arrived."""

    proc: subprocess.Popen[str]
    log: Path
    sock: socket.socket
    tg: ThreadedFakeTelegram
    got: list[tuple[float, str]] = field(default_factory=list)

    def read(self, timeout: float) -> None:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return
        for line in data.decode().splitlines():
            self.got.append((time.monotonic(), line))

    def wait_for(self, line: str, timeout: float = 20.0) -> float:
        """Block until ``line`` arrived; return when it did."""
        deadline = time.monotonic() + timeout
        while True:
            for at, seen in self.got:
                if seen == line:
                    return at
            if time.monotonic() > deadline or self.proc.poll() is not None:
                out = self.output()
                raise AssertionError(f"{line!r} never arrived; got {self.got}\n{out[-3000:]}")
            self.read(0.2)

    def output(self) -> str:
        """What the process logged so far."""
        return self.log.read_text(errors="replace")

    def lines(self) -> list[str]:
        return [line for _, line in self.got]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    tg = ThreadedFakeTelegram()
    home = tmp_path / "home"
    (home / "vault").mkdir(parents=True)
    from tests.fakes.fake_telegram import TEST_TOKEN

    (home / "vault" / "telegram_token").write_text(TEST_TOKEN + "\n")
    (home / "script.json").write_text(json.dumps([{"when": "hi", "text": "hello"}]))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"shelldon-test-{uuid.uuid4().hex}"
    sock.bind(b"\0" + name.encode())  # abstract namespace: what systemd hands out as '@...'
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_", "WATCHDOG_"))},
        "SHELLDON_HOME": str(home),
        "SHELLDON_BRAIN_SCRIPT": "script.json",
        "SHELLDON_TELEGRAM_API_BASE": tg.api_base,
        "SHELLDON_TELEGRAM_ALLOWED_USERS": str(OWNER),
        "SHELLDON_TELEGRAM_POLL_TIMEOUT_S": "1",
        "NOTIFY_SOCKET": "@" + name,
        "WATCHDOG_USEC": str(WATCHDOG_USEC),
    }
    log = tmp_path / "service.log"
    with log.open("w") as out:
        # A file, not a pipe: a full pipe would block the service's logging.
        proc = subprocess.Popen(
            [sys.executable, "-m", "shelldon", "run"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    r = Run(proc, log, sock, tg)
    try:
        yield r
    finally:
        if proc.poll() is None:
            for pid in proctree.with_descendants([proc.pid]):
                os.kill(pid, signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        sock.close()
        tg.close()


def test_ready_watchdog_and_stopping_arrive_in_order(run: Run) -> None:
    run.wait_for("READY=1")
    # READY waits for the transport: the poller has already registered the owner's commands.
    assert run.tg.fake.commands
    run.wait_for("WATCHDOG=1")
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        run.read(0.1)
    pets = [at for at, line in run.got if line == "WATCHDOG=1"]
    assert len(pets) >= 4, run.got  # every 0.2 s for a 0.6 s watchdog
    gaps = [b - a for a, b in itertools.pairwise(pets)]
    assert max(gaps) < WATCHDOG_USEC / 1e6 / 2, gaps  # at least twice per interval
    assert "STOPPING=1" not in run.lines()
    run.proc.send_signal(signal.SIGTERM)
    run.wait_for("STOPPING=1", timeout=10)
    assert run.proc.wait(15) == 0
    out = run.output()
    assert "Traceback" not in out
    assert '"service_polling"' in out


# Every actor runs in the main process, on the loop that also sends the pets: a wedged actor
# system is a frozen main process (what the VM's system test does with the real watchdog).
def test_a_wedged_actor_system_stops_the_watchdog(run: Run) -> None:
    run.wait_for("READY=1")
    run.wait_for("WATCHDOG=1")
    os.kill(run.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(0.3)  # a pet already under way may still arrive
        run.got.clear()
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            run.read(0.1)
        assert "WATCHDOG=1" not in run.lines(), run.got
    finally:
        os.kill(run.proc.pid, signal.SIGCONT)
    run.wait_for("WATCHDOG=1", timeout=15)  # healthy again: the pets resume
