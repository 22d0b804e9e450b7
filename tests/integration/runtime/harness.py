"""A real shelldon service for tests: real actors, real forks, real sqlite, the console
transport over pipes (what `shelldon chat` uses), and the scripted brain.

The base is the configured one: the production in-process base by default (its driver loop
runs in a thread of the test process, workers come from a real zygote), or the isolated
multiprocTCPBase with ``SHELLDON_ACTORS_BASE=multiprocTCPBase`` (tests that kill actor
processes)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from actors.inproc import Driver
from actors.messages import Boot, InboxChanged, Ping, Status
from actors.service import trust_runtime_classes
from actors.system import RunningSystem, start_actor_system, stop_actor_system
from actors.turn import use_zygote
from shelldon.config import IN_PROCESS_BASE, ISOLATED_BASE, Settings, load_settings
from shelldon.contracts import encode
from shelldon.core.history import Store


def service_processes(main_pid: int, admin_port: int) -> set[int]:
    """Every process of a service started as a subprocess: the main process and its
    descendants (the zygote and workers of the in-process base), plus, on the isolated base,
    the Admin's session (its actor processes)."""
    from actors import proctree

    roots = {main_pid}
    for admin in proctree.listeners_on_port(admin_port):
        roots |= {admin} | proctree.session_members(os.getsid(admin))
    return proctree.with_descendants(roots)


def parent_of(pid: int) -> int:
    """The parent pid of ``pid`` (from /proc/<pid>/stat; raises OSError once it is gone)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@contextlib.contextmanager
def chat_service(
    home: Path, base: str, **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``shelldon chat`` as the owner starts it, in a session of its own, on ``base`` and a fresh
    admin port; yields (process, admin port) once it listens and SIGKILLs what is left after."""
    port = free_port()
    environ = {
        **os.environ,
        "SHELLDON_HOME": str(home),
        "SHELLDON_ACTORS_ADMIN_PORT": str(port),
        "SHELLDON_ACTORS_BASE": base,
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "shelldon", "chat"],
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
        yield proc, port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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
        self.base = self.settings.actors.base
        self.zygote: Any = None
        self.driver: Driver | None = None
        self.supervisor: Any = None
        if self.base == IN_PROCESS_BASE:
            from shelldon.worker.zygote import Zygote

            self.zygote = Zygote.start(self.settings)
            use_zygote(self.zygote)
        try:
            self.running: RunningSystem = start_actor_system(
                admin_port=self.settings.actors.admin_port, base=self.base
            )
        except BaseException:
            self._stop_zygote()
            raise
        if self.base == IN_PROCESS_BASE:
            self.driver = Driver(self.running.system)
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
            if self.driver is not None:
                # Only the driver's thread touches the actor system (and the actors' sqlite).
                self.driver.start_thread("test-actors")
            kind = "telegram" if telegram else "console"
            boot = Boot(self.settings, kind, (self.in_r, self.out_w, self.done_w))

            def start() -> Status:
                self.supervisor = asys.createActor(SupervisorActor)
                return self.ask(self.supervisor, boot, 15)  # type: ignore[no-any-return]

            status = self.driver.call(start, 20) if self.driver is not None else start()
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
        self.tell(self.peers["arbiter"], InboxChanged())

    def tell(self, address: Any, message: Any) -> None:
        """Send an actor a message from the test."""
        if self.driver is not None:
            self.driver.tell(address, message)
        else:
            self.running.system.tell(address, message)

    def ask(self, address: Any, message: Any, timeout: float = 10.0) -> Any:
        if self.driver is not None:
            return self.driver.ask(address, message, timeout)
        return self.running.system.ask(address, message, timeout)

    def status(self) -> Status:
        status = self.ask(self.supervisor, Ping(), 10)
        assert isinstance(status, Status)
        self.peers = status.peers
        return status

    def pids(self) -> set[int]:
        """Processes of the service besides this test process: actor processes (isolated
        base) or the zygote and its workers (in-process base)."""
        if self.zygote is not None:
            from actors import proctree

            return proctree.with_descendants({self.zygote.pid}) if self.zygote.alive() else set()
        return self.running.pids()

    def turn_workers(self) -> set[int]:
        """Workers of this service alive now, except the zygote's idle spare (which runs no
        turn until one is handed to it)."""
        parent = self.worker_parent()
        spare = self.zygote.spare_pid() if self.zygote is not None else None
        workers = set()
        for pid in self.pids():
            try:
                if parent_of(pid) == parent and pid != spare:
                    workers.add(pid)
            except OSError:
                continue
        return workers

    def worker_parent(self) -> int:
        """The pid that forks this service's workers (the zygote, or the TurnActor)."""
        return self.zygote.pid if self.zygote is not None else self.pid_of("turn")

    def pid_of(self, role: str) -> int:
        """The process of actor ``role`` (found by its listening port; isolated base only)."""
        from actors import proctree

        assert self.base == ISOLATED_BASE, "actors have processes of their own only there"
        port = self.peers[role].addressDetails.connectArgs[0][1]
        (pid,) = proctree.listeners_on_port(port)
        return pid

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.store.close()
        if self.driver is not None:
            driver = self.driver
            with contextlib.suppress(Exception):
                driver.call(lambda: driver.shutdown(self.supervisor), 10)
            driver.close()
        stop_actor_system(self.running)
        self._stop_zygote()
        if self.telegram is not None:
            self.telegram.close()
        for fd in (self.in_r, self.in_w, self.out_r, self.out_w, self.done_r, self.done_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _stop_zygote(self) -> None:
        if self.zygote is not None:
            use_zygote(None)
            self.zygote.stop()
