"""The reliability suite's own rig: the real ``shelldon run`` process tree against the fake Bot
API, process and descriptor accounting from ``/proc``, and tool installation by hand.

``harness.Service`` (tests/integration/runtime) runs the actor system inside the test process;
here ``ShelldonRun`` runs the CLI as a subprocess, so a test can SIGKILL all of it at once like a
power cut and start it again on the same home.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from shelldon.config import Settings
from shelldon.store import Store
from shelldon.toolbox.manifest import code_hash
from shelldon.toolbox.toolbox import Toolbox
from tests import proctree
from tests.fakes.fake_telegram import TEST_TOKEN, Sent
from tests.integration.runtime.harness import ThreadedFakeTelegram

OWNER = 1001
STRANGER = 666


def wait_until(predicate: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    """Poll ``predicate`` every 10 ms until it holds, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.01)


def texts(tg: ThreadedFakeTelegram, chat: int = OWNER) -> list[str]:
    """What the owner's chat shows now (edited messages in their current state)."""
    return [m.visible for m in list(tg.fake.sent) if m.chat_id == chat]


def keyboards(tg: ThreadedFakeTelegram, chat: int = OWNER) -> list[Sent]:
    """Messages in ``chat`` that still carry approval buttons."""
    return [m for m in list(tg.fake.sent) if m.chat_id == chat and m.buttons()]


def fd_count(pids: Iterable[int]) -> int:
    """Open descriptors summed over ``pids`` (processes that vanish count zero)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{pid}/fd"))
    return total


def install_tool(settings: Settings, name: str, code: str) -> None:
    """Make ``code`` a live self-coded tool the owner approved (the gate is not the point)."""
    with Store(settings.database) as store:
        Toolbox.from_settings(settings, store).promote(name, code, expected_hash=code_hash(code))


class ShelldonRun:
    """``shelldon run`` as a subprocess in its own session, on ``home``, talking to ``tg``.

    ``start()`` waits until the command menu is registered (the poller is up); ``tree()`` is
    every process of the service; ``power_cut()`` SIGKILLs them all at once.
    """

    def __init__(
        self,
        home: Path,
        tg: ThreadedFakeTelegram,
        script: list[dict[str, Any]],
        **env: str,
    ) -> None:
        self.home, self.tg = home, tg
        home.mkdir(parents=True, exist_ok=True)
        (home / "vault").mkdir(exist_ok=True)
        (home / "vault" / "telegram_token").write_text(TEST_TOKEN + "\n")
        (home / "script.json").write_text(json.dumps(script))
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SHELLDON_")},
            "SHELLDON_HOME": str(home),
            "SHELLDON_BRAIN_SCRIPT": "script.json",
            "SHELLDON_TELEGRAM_API_BASE": tg.api_base,
            "SHELLDON_TELEGRAM_ALLOWED_USERS": str(OWNER),
            "SHELLDON_TELEGRAM_POLL_TIMEOUT_S": "1",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = home / "run.log"
        self.known: set[int] = set()

    def start(self, timeout: float = 20.0) -> None:
        """Start the service and wait until it polls (a fresh ``setMyCommands`` arrived)."""
        calls_before = self.tg.fake.calls.count("setMyCommands")
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "shelldon", "run"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(
            lambda: (
                self.tg.fake.calls.count("setMyCommands") > calls_before
                or self.proc is None
                or self.proc.poll() is not None
            ),
            timeout,
            "shelldon run to register its commands",
        )
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        self.known |= self.tree()

    def tree(self) -> set[int]:
        """Every live process of the service: main, zygote, workers, their children."""
        if self.proc is None:
            return set()
        roots = {self.proc.pid} | proctree.session_members(self.proc.pid)
        found = proctree.with_descendants(roots)
        self.known |= found
        return found

    def power_cut(self) -> None:
        """SIGKILL every process of the service at once (as losing power would)."""
        assert self.proc is not None
        for pid in self.tree():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(5)
        wait_until(lambda: not self.survivors(), 5, "the killed tree to vanish")

    def survivors(self) -> list[int]:
        """Processes this service ever had that are still alive."""
        return [pid for pid in self.known | self.tree() if proctree.is_alive(pid)]

    def stop(self) -> None:
        """SIGTERM, wait, then SIGKILL whatever is left."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(8)
        for pid in self.survivors():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def output(self) -> str:
        """Everything the service logged so far (JSON lines)."""
        return self.log.read_text(errors="replace")
