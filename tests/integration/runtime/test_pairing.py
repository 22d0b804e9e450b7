"""Pairing the first owner, end to end: the real service (`shelldon run`, a subprocess) with no
owner, the fake Bot API and the fake LLM on loopback, and the real `shelldon pair CODE` run as
the owner runs it. Attack cases from the issue: a repeat message, a group, a message holding
the code, a second stranger's code after the pairing, strangers after it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelldon.store import Store
from tests.fakes.fake_openai import FakeOpenAI
from tests.fakes.fake_telegram import TEST_TOKEN

from .harness import ThreadedFakeTelegram

pytestmark = pytest.mark.slow

ADA, EVE, GROUP = 4242, 666, -100123
CONFIG = """\
# my pet: pairing fills in the owner
[telegram]
api_base = "{api_base}"
allowed_users = []   # nobody yet
poll_timeout_s = 1

[brain]
provider = "openai"   # the fake, on loopback
base_url = "{base_url}"
"""
CODE = re.compile(r"sudo shelldon pair ([A-Z2-9]{4}-[A-Z2-9]{4})")


class Rig:
    def __init__(self, tmp_path: Path) -> None:
        self.tg = ThreadedFakeTelegram()
        self.brain = FakeOpenAI(api_key=None).start()
        self.home = tmp_path / "home"
        (self.home / "vault").mkdir(parents=True)
        (self.home / "vault" / "telegram_token").write_text(TEST_TOKEN + "\n")
        self.config = self.home / "config.toml"
        self.config_text = CONFIG.format(api_base=self.tg.api_base, base_url=self.brain.base_url)
        self.config.write_text(self.config_text)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLDON_")}
        self.env["SHELLDON_HOME"] = str(self.home)
        self.log = (tmp_path / "run.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shelldon", "run"],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def say(
        self, user: int, text: str, chat: int | None = None, chat_type: str = "private"
    ) -> None:
        sender = {"id": user, "is_bot": False, "first_name": "Ada" if user == ADA else "Eve"}
        if user == ADA:
            sender["username"] = "ada"
        message: dict[str, Any] = {
            "message_id": int(time.monotonic() * 1000) % 10**9,
            "date": int(time.time()),
            "from": sender,
            "chat": {"id": chat or user, "type": chat_type},
            "text": text,
        }
        self.tg.do(self.tg.fake.queue_update, {"message": message})

    def texts(self, chat: int) -> list[str]:
        return [m.visible for m in self.tg.fake.sent if m.chat_id == chat]

    def settle(self) -> None:
        """Let the service take every queued update (a few of its 1 s polls)."""
        self.tg.wait(lambda: not self.tg.fake.pending, timeout=15)
        time.sleep(1.5)

    def pair(self, code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "shelldon", "pair", code],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()
        self.tg.close()
        self.brain.stop()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    try:
        r.tg.wait(lambda: r.tg.fake.commands, timeout=30)
        yield r
    finally:
        r.close()


def test_the_first_owner_pairs_with_a_code_and_no_restart(rig: Rig) -> None:
    pid = rig.proc.pid
    # With no owner, a private message earns a code; nothing else answers, nothing else runs.
    rig.say(ADA, "hello?")
    rig.tg.wait(lambda: any(CODE.search(t) for t in rig.texts(ADA)))
    match = CODE.search(rig.texts(ADA)[0])
    assert match is not None
    code = match.group(1)
    rig.say(ADA, "hello again")  # within the minute: no second code, no reminder
    rig.say(ADA, f"sudo shelldon pair {code}")  # a code typed in Telegram pairs nobody
    rig.say(EVE, "me too", chat=GROUP, chat_type="group")  # a group gets nothing
    rig.say(EVE, "and me")  # another stranger gets a code of her own
    rig.settle()
    assert len(rig.texts(ADA)) == 1
    assert rig.texts(GROUP) == []
    eve_code = CODE.search(rig.texts(EVE)[0])
    assert eve_code is not None and eve_code.group(1) != code
    assert rig.config.read_text() == rig.config_text
    assert rig.brain.requests == []
    with Store(rig.home / "shelldon.db") as store:
        assert store.inbox.waiting() == []
        issued = [e.subject for e in store.audit.log() if e.action == "pairing_code_issued"]
        assert sorted(issued) == sorted([str(ADA), str(EVE)])
        db_text = repr(
            store.execute("SELECT * FROM pairing_codes").fetchall()
        )  # only digests are kept
        assert code.replace("-", "") not in db_text

    # The owner runs the command on the device.
    paired = rig.pair(code.lower())
    assert paired.returncode == 0, paired.stderr
    assert paired.stdout.startswith(
        f"added Ada (@ada, id {ADA}) to allowed_users in {rig.config}\n"
    )
    assert rig.config.read_text() == rig.config_text.replace(
        "allowed_users = []", f"allowed_users = [{ADA}]"
    )
    again = rig.pair(code)
    assert again.returncode == 1 and "no such pairing code" in again.stderr
    # Eve's code went with the pairing: the pet has one first owner.
    late = rig.pair(eve_code.group(1))
    assert late.returncode == 1 and f"[{ADA}]" in rig.config.read_text()

    # The running service picks the owner up and says so; the owner's next message is a turn.
    rig.tg.wait(lambda: any("You're paired" in t for t in rig.texts(ADA)))
    rig.brain.reply_text("Hello, owner!")
    rig.say(ADA, "hi")
    rig.tg.wait(lambda: any("Hello, owner!" in t for t in rig.texts(ADA)), timeout=30)
    assert len(rig.brain.requests) == 1
    # Strangers are dropped as before, and no more codes are given out.
    eve_before = len(rig.texts(EVE))
    rig.say(EVE, "and now?")
    rig.settle()
    assert len(rig.texts(EVE)) == eve_before and len(rig.brain.requests) == 1
    assert rig.proc.poll() is None and rig.proc.pid == pid
    with Store(rig.home / "shelldon.db") as store:
        audit = [(e.actor, e.action, e.subject) for e in store.audit.log()]
    assert ("owner", "paired", str(ADA)) in audit
