"""The system tests' rig: the installed service under real systemd, driven through the project's
fake Bot API and fake LLM, both served on the VM's loopback by the test process.

Everything here is what an owner has on the device: ``systemctl``, ``journalctl``, the unit's
cgroup in ``/sys/fs/cgroup``, the files in ``/etc/shelldon`` and ``/var/lib/shelldon``, the
``shelldon`` command in ``/usr/local/bin``. Nothing reaches into the service's process.

The VM is emulated (TCG): code runs several times slower than on a dev machine, about a Pi
Zero 2W's speed, so every wait here is generous.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fakes.canned_server import ReceivedRequest
from tests.fakes.fake_openai import FakeOpenAI
from tests.fakes.fake_telegram import TEST_TOKEN, FakeTelegram, Sent

UNIT = "shelldon"
OWNER = 4242
CONFIG = Path("/etc/shelldon/config.toml")
CREDENTIALS = Path("/etc/shelldon/credentials")
HOME = Path("/var/lib/shelldon")
WORKSPACE = HOME / "workspace"
DATABASE = HOME / "shelldon.db"
WRAPPER = Path("/usr/local/bin/shelldon")
CGROUP = Path("/sys/fs/cgroup/system.slice/shelldon.service")

START_S = 180.0  # a start on the emulated VM: the actors, the zygote, the first poll
TURN_S = 90.0  # a turn, model calls and tools included, with room to spare
GATE_S = 150.0  # propose, gate (real pytest in the service), the promotion keyboard

CONFIG_TEMPLATE = """\
# Written by tests/system: the fake Bot API and the fake LLM on this machine's loopback.
[telegram]
api_base = "{api_base}"
allowed_users = [{owner}]

[brain]
provider = "openai"
model = "gpt-fake"
base_url = "{base_url}"
"""


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def sh(*argv: str, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command as the owner would type it; its output as text."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}"
        )
    return proc


def shell(script: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run a shell pipeline (the README's recipes) with bash; never raises on its status."""
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", script], capture_output=True, text=True, timeout=timeout
    )


def show(*props: str) -> dict[str, str]:
    """``systemctl show -p …`` of the unit, as a dict."""
    wanted = props or ("StatusText", "ActiveState", "SubState", "MainPID", "NRestarts", "Result")
    out = sh("systemctl", "show", "-p", ",".join(wanted), UNIT).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def is_ready(state: dict[str, str] | None = None) -> bool:
    """READY=1 arrived and the status text says it runs (Type=notify: active only after READY)."""
    s = state if state is not None else show()
    return s.get("ActiveState") == "active" and s.get("StatusText") == "running"


def journal(*args: str, unit_only: bool = False) -> list[str]:
    """The unit's journal as text lines (``-o cat``). ``unit_only``: the service's own output
    (``_SYSTEMD_UNIT=``), without systemd's lines about the unit."""
    match = ["_SYSTEMD_UNIT=shelldon.service"] if unit_only else ["-u", UNIT]
    out = sh("journalctl", *match, "-o", "cat", "--no-pager", *args, timeout=120).stdout
    return out.splitlines()


def events(lines: list[str], name: str | None = None) -> list[dict[str, Any]]:
    """The JSON log events among ``lines`` (named ``name`` if given)."""
    found = []
    for line in lines:
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict) and (name is None or obj.get("event") == name):
                found.append(obj)
    return found


def cgroup_pids(root: Path = CGROUP) -> dict[int, str]:
    """Every process anywhere in the unit's cgroup subtree: pid → cgroup path below the unit.
    Cgroups that vanish while it looks (a turn ending) are skipped, not an error."""
    found: dict[int, str] = {}
    for dirpath, _dirs, files in os.walk(root):  # os.walk skips what it cannot list
        if "cgroup.procs" not in files:
            continue
        try:
            raw = (Path(dirpath) / "cgroup.procs").read_text().split()
        except OSError:
            continue
        where = str(Path(dirpath).relative_to(root))
        found.update(dict.fromkeys(map(int, raw), where))
    return found


def describe_pids(pids: dict[int, str]) -> str:
    """pid, cgroup and command line of each process, for failure messages."""
    rows = []
    for pid, cg in sorted(pids.items()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
        except OSError:
            cmd = "(gone)"
        rows.append(f"{pid:>7} {cg:<24} {cmd}")
    return "\n".join(rows)


def memory_events(cgroup: Path) -> dict[str, int]:
    """``memory.events`` of a cgroup (hierarchical: its descendants' events included)."""
    try:
        text = (cgroup / "memory.events").read_text()
    except OSError:
        return {}
    return {k: int(v) for k, v in (line.split() for line in text.splitlines())}


def sqlite(query: str) -> list[str]:
    """A read-only query on the pet's database, as the README's recipes run it."""
    out = sh("sudo", "sqlite3", "-readonly", str(DATABASE), query).stdout
    return out.splitlines()


class Bot:
    """The fake Bot API on an event loop in a thread of its own, scriptable from the tests."""

    def __init__(self) -> None:
        self.fake = FakeTelegram()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fake-bot", daemon=True)
        self.thread.start()
        self.api_base: str = self._run(self.fake.start())

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def _do(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a scripting method on the fake's loop (so it wakes a waiting long poll)."""

        async def call() -> Any:
            return fn(*args)

        return self._run(call())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._run(self.fake.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    # -- what the owner does and sees ---------------------------------------------------------

    def mark(self) -> int:
        """A bookmark in the bot's sent messages: ``since=`` for the waits below."""
        return len(self.fake.sent)

    def say(self, text: str) -> int:
        """The owner sends ``text``; returns the bookmark just before it."""
        mark = self.mark()
        self._do(self.fake.queue_message, OWNER, text)
        return mark

    def sent(self, since: int = 0) -> list[Sent]:
        """Messages the bot sent to the owner since ``since`` (edited ones in their state now)."""
        return [m for m in list(self.fake.sent)[since:] if m.chat_id == OWNER]

    def texts(self, since: int = 0) -> list[str]:
        return [m.visible for m in self.sent(since)]

    def wait_text(self, needle: str, since: int = 0, timeout: float = TURN_S) -> str:
        """Wait for a message containing ``needle``; returns its text."""
        found = wait_until(
            lambda: next((t for t in self.texts(since) if needle in t), None),
            timeout,
            f"the bot to send {needle!r}; it sent: {self.texts(since)!r}",
        )
        return str(found)

    def wait_keyboard(self, since: int = 0, timeout: float = TURN_S) -> Sent:
        """Wait for a message with ✅/❌ buttons."""
        found = wait_until(
            lambda: next((m for m in self.sent(since) if m.buttons()), None),
            timeout,
            f"an approval keyboard; the bot sent: {self.texts(since)!r}",
        )
        assert isinstance(found, Sent)
        return found

    def tap(self, message: Sent, button: int) -> str:
        """The owner taps button ``button`` (0 = ✅ Approve, 1 = ❌ Deny); returns the query id."""
        data = message.buttons()[button]["callback_data"]
        return self.tap_data(data, message.message_id)

    def tap_data(self, data: str, message_id: int) -> str:
        """A tap with this callback data (a stale button the bot already edited away)."""
        query: str = self._do(self.fake.queue_callback, OWNER, data, message_id, OWNER)
        return query

    def answered(self, query_id: str) -> bool:
        """Whether the bot answered this tap (cleared its spinner)."""
        return any(a["callback_query_id"] == query_id for a in list(self.fake.answers))

    def polls(self) -> int:
        return len(self.fake.polls)


class Brain(FakeOpenAI):
    """The project's fake Chat Completions API, keyless (a loopback server needs no key)."""

    def __init__(self) -> None:
        super().__init__(api_key=None)

    def reset(self) -> None:
        """Drop canned answers a previous test left unused (a turn it killed never asked)."""
        with self._lock:
            self._queue.clear()

    def requests_since(self, mark: int) -> list[ReceivedRequest]:
        return list(self.requests)[mark:]

    @staticmethod
    def conversation(request: ReceivedRequest) -> list[dict[str, Any]]:
        body = request.json()
        messages = body.get("messages", [])
        return messages if isinstance(messages, list) else []


class Pet:
    """The installed service, configured for the fakes."""

    def __init__(self, bot: Bot, brain: Brain) -> None:
        self.bot, self.brain = bot, brain

    def configure(self) -> None:
        """Write the config and the bot token as the README's steps 6 and 7 do, then restart."""
        CONFIG.write_text(
            CONFIG_TEMPLATE.format(
                api_base=self.bot.api_base, owner=OWNER, base_url=self.brain.base_url
            )
        )
        store_credential("telegram_token", TEST_TOKEN)
        self.restart()

    def restart(self) -> dict[str, str]:
        """``systemctl restart`` (waits for READY under Type=notify); the state after."""
        # A start limit hit by the tests' own restarts is not what they test.
        sh("systemctl", "reset-failed", UNIT, check=False)
        proc = sh("systemctl", "restart", UNIT, timeout=START_S, check=False)
        if proc.returncode != 0:
            tail = "\n".join(journal("-n", "40"))
            raise AssertionError(
                f"systemctl restart {UNIT} exited {proc.returncode}: {proc.stderr.strip()}\n"
                f"{show()}\njournalctl -u {UNIT} -n 40:\n{tail}"
            )
        return self.wait_ready()

    def wait_ready(self, timeout: float = START_S, other_than: str = "") -> dict[str, str]:
        """Wait until the unit is active with status "running" (and a MainPID != other_than)."""

        def ready() -> dict[str, str] | None:
            state = show()
            if is_ready(state) and state.get("MainPID") not in ("0", other_than):
                return state
            return None

        state: dict[str, str] = wait_until(ready, timeout, f"READY (now {show()})", every=0.5)
        return state

    def fresh(self) -> dict[str, str]:
        """Start a test from a running, ready service with no leftover canned answers."""
        self.brain.reset()
        sh("systemctl", "reset-failed", UNIT, check=False)
        state = show()
        if not is_ready(state):
            state = self.restart()
        return state

    def turn(self, text: str, reply: str, timeout: float = TURN_S) -> str:
        """One plain turn: the fake LLM answers ``reply``, the owner must see it."""
        self.brain.reply_text(reply)
        mark = self.bot.say(text)
        return self.bot.wait_text(reply, since=mark, timeout=timeout)

    def promote_tool(self, name: str, code: str, test: str) -> tuple[str, Sent]:
        """The model proposes a tool with ``propose_tool``; the gate passes it; the owner taps
        ✅. Returns what the promotion message said, and that message now (decided)."""
        self.brain.reply_tool_calls(("propose_tool", {"name": name, "code": code, "test": test}))
        self.brain.reply_text(f"I wrote {name} for myself.")
        mark = self.bot.say(f"please write yourself a tool called {name}")
        self.bot.wait_text(f"I wrote {name} for myself.", since=mark)
        ask = self.bot.wait_keyboard(since=mark, timeout=GATE_S)
        asked = ask.visible
        assert name in asked and "passed its test" in asked, asked
        after = self.bot.mark()
        self.bot.tap(ask, 0)
        wait_until(
            lambda: (
                "Added" in self.bot.fake.message(OWNER, ask.message_id).visible
                or any(f"Added {name}" in t for t in self.bot.texts(after))
            ),
            TURN_S,
            f"the bot to confirm {name} was added",
        )
        return asked, self.bot.fake.message(OWNER, ask.message_id)


def store_credential(name: str, value: str) -> None:
    """``install.sh --credential NAME`` with the value on stdin, as the README says."""
    proc = subprocess.run(
        ["/opt/shelldon/src/deploy/install.sh", "--credential", name],
        input=value + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
