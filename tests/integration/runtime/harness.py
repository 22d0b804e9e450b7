"""A real shelldon service for tests: multiprocTCPBase actors, real forks, real sqlite, the
console transport over pipes (what `shelldon chat` uses), and the scripted brain."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import time
from pathlib import Path
from typing import Any

from actors.messages import Boot, InboxChanged, Ping, Status
from actors.service import trust_runtime_classes
from actors.system import RunningSystem, start_actor_system, stop_actor_system
from shelldon.config import Settings, load_settings
from shelldon.contracts import encode
from shelldon.core.history import Store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
            "SHELLDON_ACTORS_ADMIN_PORT": str(free_port()),
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
        trust_runtime_classes()
        self.telegram: ThreadedFakeTelegram | None = None
        self.running: RunningSystem = start_actor_system(admin_port=self.settings.actors.admin_port)
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
            asys = self.running.system
            self.supervisor = asys.createActor(SupervisorActor)
            kind = "telegram" if telegram else "console"
            boot = Boot(self.settings, kind, (self.in_r, self.out_w, self.done_w))
            status = asys.ask(self.supervisor, boot, 15)
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
        self.store.put_inbox(encode(event), time.time())
        self.running.system.tell(self.peers["arbiter"], InboxChanged())

    def status(self) -> Status:
        status = self.running.system.ask(self.supervisor, Ping(), 10)
        assert isinstance(status, Status)
        self.peers = status.peers
        return status

    def pids(self) -> set[int]:
        return self.running.pids()

    def pid_of(self, role: str) -> int:
        """The process of actor ``role`` (found by its listening port)."""
        from actors import proctree

        port = self.peers[role].addressDetails.connectArgs[0][1]
        (pid,) = proctree.listeners_on_port(port)
        return pid

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.store.close()
        stop_actor_system(self.running)
        if self.telegram is not None:
            self.telegram.close()
        for fd in (self.in_r, self.in_w, self.out_r, self.out_w, self.done_r, self.done_w):
            with contextlib.suppress(OSError):
                os.close(fd)
