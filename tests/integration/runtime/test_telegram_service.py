"""The service with the Telegram transport, against the fake Bot API: what the owner sees."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import Service, ThreadedFakeTelegram

pytestmark = pytest.mark.slow

OWNER, STRANGER = 1001, 666
SCRIPT = [
    {
        "when": "note",
        "tool_calls": [
            {"name": "write_file", "args": {"path": "note.txt", "content": "<b>hi</b> & bye"}}
        ],
    },
    {"when": "note", "text": "Note saved."},
    {"when": "html", "text": "Here is <script>alert(1)</script> & more"},
    {"when": "long", "text": "\n".join(f"line {i} " + "x" * 60 for i in range(200))},
    {
        "when": "slow",
        "tool_calls": [{"name": "python_eval", "args": {"code": "sum(range(3 * 10**8))"}}],
    },
    {"when": "slow", "text": "Slow sum done."},
]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = Service(
        tmp_path / "home", SCRIPT, telegram=True, SHELLDON_TELEGRAM_ALLOWED_USERS=str(OWNER)
    )
    try:
        yield svc
    finally:
        svc.stop()


def texts(tg: ThreadedFakeTelegram, chat: int) -> list[str]:
    return [m.visible for m in tg.fake.sent if m.chat_id == chat]


def test_full_approval_round_trip(service: Service) -> None:
    tg = service.telegram
    assert tg is not None
    tg.wait(lambda: tg.fake.commands, timeout=15)
    names = [c["command"] for c in tg.fake.commands]
    assert names == [
        "start",
        "help",
        "tools",
        "pending",
        "budget",
        "restore",
        "memory",
        "forget",
        "new",
        "schedule",
        "cancel",
        "usage",
        "retire",
    ]
    tg.do(tg.fake.queue_message, OWNER, "save a note please")
    tg.wait(lambda: any(m.buttons() for m in tg.fake.sent))
    ask = next(m for m in tg.fake.sent if m.buttons())
    assert "write_file" in ask.visible and "note.txt" in ask.visible
    assert "<b>hi</b> & bye" in ask.visible  # exactly what will be written, shown literally
    assert not (service.settings.workspace / "note.txt").exists()
    tg.do(tg.fake.tap, OWNER, ask, 0)  # ✅ Approve
    tg.wait(lambda: "Note saved." in texts(tg, OWNER))
    assert (service.settings.workspace / "note.txt").read_text() == "<b>hi</b> & bye"
    decided = tg.fake.message(OWNER, ask.message_id)
    assert "Approved" in decided.visible and not decided.buttons()
    assert tg.fake.answers  # the tap's spinner was cleared
    # A second tap on the (stale) button decides nothing.
    sent_before = len(tg.fake.sent)
    stale = tg.fake.queue_callback
    tg.do(
        stale,
        OWNER,
        ask.reply_markup["inline_keyboard"][0][0]["callback_data"]  # type: ignore[index]
        if ask.reply_markup
        else "",
        ask.message_id,
        OWNER,
    )
    tg.wait(lambda: len(tg.fake.answers) >= 2)
    time.sleep(0.5)
    assert "Note saved." not in texts(tg, OWNER)[sent_before:]
    assert [e.action for e in service.store.audit.log()].count("approved") == 1


def test_a_stranger_reaches_nothing(service: Service) -> None:
    tg = service.telegram
    assert tg is not None
    tg.wait(lambda: tg.fake.commands, timeout=15)
    tg.do(tg.fake.queue_message, STRANGER, "save a note please")
    tg.do(tg.fake.queue_callback, STRANGER, "a:t123:0000000000000000", 5, STRANGER)
    tg.wait(lambda: tg.fake.answers)
    time.sleep(1.0)
    assert texts(tg, STRANGER) == []
    assert service.store.conversation.recent(STRANGER) == []
    assert service.store.inbox.waiting() == []


def test_hostile_html_and_long_replies_arrive_intact(service: Service) -> None:
    tg = service.telegram
    assert tg is not None
    tg.wait(lambda: tg.fake.commands, timeout=15)
    tg.do(tg.fake.queue_message, OWNER, "html please")
    tg.wait(lambda: any("alert(1)" in t for t in texts(tg, OWNER)))
    assert "Here is <script>alert(1)</script> & more" in texts(tg, OWNER)
    tg.do(tg.fake.queue_message, OWNER, "long please")
    tg.wait(lambda: any("line 199" in t for t in texts(tg, OWNER)))
    chunks = [t for t in texts(tg, OWNER) if t.startswith("line ") or "line 1" in t]
    assert len(chunks) >= 3 and all(len(c) <= 4096 for c in chunks)
    assert tg.fake.rejected == []


# Well shaped, so it gets past the start-up check (test_start_refusals.py covers a malformed
# one): Telegram's own 401 is what stops it.
@pytest.mark.parametrize(("token", "status"), [("999999:AAwrongwrongwrongwrongwrongwrong-abc", 78)])
def test_a_bad_token_stops_shelldon_run_with_one_clear_line(
    tmp_path: Path, token: str, status: int
) -> None:
    tg = ThreadedFakeTelegram()
    try:
        home = tmp_path / "h"
        (home / "vault").mkdir(parents=True)
        (home / "vault" / "telegram_token").write_text(token)
        env = {
            **os.environ,
            "SHELLDON_HOME": str(home),
            "SHELLDON_TELEGRAM_API_BASE": tg.api_base,
            "SHELLDON_TELEGRAM_ALLOWED_USERS": str(OWNER),
        }
        proc = subprocess.run(
            [sys.executable, "-m", "shelldon", "run"],
            env=env,
            capture_output=True,
            text=True,
            timeout=40,
        )
        assert proc.returncode == status, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "Traceback" not in proc.stdout + proc.stderr
        assert token not in proc.stdout + proc.stderr
        fatal_lines = [line for line in proc.stdout.splitlines() if "telegram.fatal" in line]
        assert len(fatal_lines) == 1, proc.stdout[-3000:]
    finally:
        tg.close()


def test_a_long_turn_shows_typing_and_a_quick_one_does_not(service: Service) -> None:
    tg = service.telegram
    assert tg is not None
    tg.wait(lambda: tg.fake.commands, timeout=15)
    tg.do(tg.fake.queue_message, OWNER, "html please")
    tg.wait(lambda: any("alert(1)" in t for t in texts(tg, OWNER)))
    assert tg.fake.chat_actions == []
    tg.do(tg.fake.queue_message, OWNER, "slow please")
    tg.wait(lambda: "Slow sum done." in texts(tg, OWNER), timeout=20)
    assert {"chat_id": OWNER, "action": "typing"} in tg.fake.chat_actions
