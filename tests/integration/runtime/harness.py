"""A real shelldon service for tests: real actors, real forks, real sqlite, the console
transport over pipes (what `shelldon chat` uses), and the scripted brain.

Every actor runs in the test process, as in production (the driver loop in a thread of its own);
workers come from a real zygote. ``Service.crash(role)`` makes an actor's handler raise, as a bug
would, to test the supervisor's restarts."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from actors.inproc import Driver
from actors.messages import Boot, InboxChanged, Ping, Status
from actors.system import start_actor_system, stop_actor_system
from shelldon.config import Settings, load_settings
from shelldon.contracts import encode
from shelldon.store import Store


def service_processes(main_pid: int) -> set[int]:
    """Every process of a service started as a subprocess: the main process and its
    descendants (the zygote and its workers)."""
    from tests import proctree

    return proctree.with_descendants({main_pid})


def parent_of(pid: int) -> int:
    """The parent pid of ``pid`` (from /proc/<pid>/stat; raises OSError once it is gone)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@contextlib.contextmanager
def chat_service(
    home: Path, *, command: tuple[str, ...] = (sys.executable, "-m", "shelldon"), **env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``shelldon chat`` as the owner starts it (``command`` is how shelldon is run), in a
    session of its own; yields the process once it listens and SIGKILLs what is left after."""
    environ = {**os.environ, "SHELLDON_HOME": str(home), **env}
    proc = subprocess.Popen(
        [*command, "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environ,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        while b"listening" not in line:
            assert line, f"shelldon chat ended before it was ready: {proc.stderr.read()!r}"
            line = proc.stdout.readline()
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class ThreadedFakeTelegram:
    """The fake Bot API on an event loop of its own thread, scriptable from the test thread."""

    def __init__(self) -> None:
        import asyncio
        import threading

        from tests.fakes.fake_telegram import FakeTelegram

        self.fake = FakeTelegram()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.api_base = self.run(self.fake.start())

    def run(self, coro: Any) -> Any:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def do(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call a scripting method of the fake on its loop (so it can wake a waiting poll)."""

        async def call() -> Any:
            return fn(*args, **kwargs)

        return self.run(call())

    def wait(self, predicate: Any, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError("the fake Bot API never saw what the test waited for")
            time.sleep(0.01)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.fake.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Service:
    """Start with ``Service(home, script, **env)``; ``say``, ``expect``, ``stop``.

    ``telegram=True`` runs the Telegram transport against a ``ThreadedFakeTelegram`` (started
    after the actor system, so no actor inherits its listening socket) instead of the console.
    """

    def __init__(
        self, home: Path, script: list[dict[str, Any]], *, telegram: bool = False, **env: str
    ) -> None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "script.json").write_text(json.dumps(script))
        environ = {
            "SHELLDON_HOME": str(home),
            "SHELLDON_BRAIN_SCRIPT": "script.json",
            **env,
        }
        self.settings: Settings = load_settings(environ=environ)
        self.home = home
        self.in_r, self.in_w = os.pipe()
        self.out_r, self.out_w = os.pipe()
        self.done_r, self.done_w = os.pipe()
        os.set_blocking(self.out_r, False)
        self.output = ""
        self.seen = 0
        self.telegram: ThreadedFakeTelegram | None = None
        self.supervisor: Any = None
        from shelldon.worker.zygote import Zygote

        self.zygote: Any = Zygote.start(self.settings)
        try:
            self.system: Any = start_actor_system()
        except BaseException:
            self._stop_zygote()
            raise
        self.driver = Driver(self.system)
        try:
            from actors.supervisor import SupervisorActor

            if telegram:
                import dataclasses

                from tests.fakes.fake_telegram import TEST_TOKEN

                self.telegram = ThreadedFakeTelegram()
                (home / "vault").mkdir(exist_ok=True)
                (home / "vault" / "telegram_token").write_text(TEST_TOKEN + "\n")
                tg = dataclasses.replace(
                    self.settings.telegram, api_base=self.telegram.api_base, poll_timeout_s=2
                )
                self.settings = dataclasses.replace(self.settings, telegram=tg)
            # Only the driver's thread touches the actor system (and the actors' sqlite).
            self.driver.start_thread("test-actors")
            kind = "telegram" if telegram else "console"
            boot = Boot(
                self.settings, kind, (self.in_r, self.out_w, self.done_w), zygote=self.zygote
            )

            def start() -> Status:
                self.supervisor = self.system.createActor(SupervisorActor)
                return self.ask(self.supervisor, boot, 15)  # type: ignore[no-any-return]

            status = self.driver.call(start, 20)
            assert isinstance(status, Status) and status.ready, status
            self.peers = status.peers
        except BaseException:
            self.stop()
            raise
        self.store = Store(self.settings.database)

    # ------------------------------------------------------------ talking

    def say(self, line: str) -> None:
        """Type a line at the console."""
        os.write(self.in_w, line.encode() + b"\n")

    def _read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.out_r], [], [], timeout)
        if ready:
            with contextlib.suppress(BlockingIOError):
                self.output += os.read(self.out_r, 65536).decode("utf-8", "replace")

    def expect(self, text: str, timeout: float = 15.0) -> str:
        """Wait until ``text`` appears in output not yet consumed; return that output."""
        deadline = time.monotonic() + timeout
        while True:
            index = self.output.find(text, self.seen)
            if index >= 0:
                chunk = self.output[self.seen : index + len(text)]
                self.seen = index + len(text)
                return chunk
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{text!r} did not appear within {timeout}s; unread output:\n"
                    f"{self.output[self.seen :]}"
                )
            self._read(0.05)

    def quiet_for(self, seconds: float) -> str:
        """Collect whatever arrives during ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._read(0.05)
        chunk, self.seen = self.output[self.seen :], len(self.output)
        return chunk

    def inject(self, event: Any) -> None:
        """Hand an event to the inbox directly (as a transport would) and wake the arbiter."""
        self.store.inbox.put(encode(event), time.time())
        self.tell(self.peers["arbiter"], InboxChanged())

    def tell(self, address: Any, message: Any) -> None:
        """Send an actor a message from the test."""
        self.driver.tell(address, message)

    def ask(self, address: Any, message: Any, timeout: float = 10.0) -> Any:
        return self.driver.ask(address, message, timeout)

    def crash(self, role: str) -> None:
        """Make actor ``role``'s next handler raise (a Crash drill), as a bug would."""
        from actors.messages import Crash

        address = self.supervisor if role == "supervisor" else self.peers[role]
        self.tell(address, Crash(f"drill: {role} crashes"))

    def status(self) -> Status:
        status = self.ask(self.supervisor, Ping(), 10)
        assert isinstance(status, Status)
        self.peers = status.peers
        return status

    def pids(self) -> set[int]:
        """Processes of the service besides this test process: the zygote and its workers."""
        from tests import proctree

        return proctree.with_descendants({self.zygote.pid}) if self.zygote.alive() else set()

    def turn_workers(self) -> set[int]:
        """Workers of this service alive now, except the zygote's idle spare (which runs no
        turn until one is handed to it)."""
        parent, spare = self.zygote.pid, self.zygote.spare_pid()
        workers = set()
        for pid in self.pids():
            try:
                if parent_of(pid) == parent and pid != spare:
                    workers.add(pid)
            except OSError:
                continue
        return workers

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.store.close()
        driver = self.driver
        with contextlib.suppress(Exception):
            driver.call(lambda: driver.shutdown(self.supervisor), 10)
        driver.close()
        stop_actor_system(self.system)
        self._stop_zygote()
        if self.telegram is not None:
            self.telegram.close()
        for fd in (self.in_r, self.in_w, self.out_r, self.out_w, self.done_r, self.done_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _stop_zygote(self) -> None:
        self.zygote.stop()
