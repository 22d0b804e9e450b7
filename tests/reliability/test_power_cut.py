"""Crash in the middle, whole service: SIGKILL every process of ``shelldon run`` at once (a
power cut) with an approval parked, with a promotion parked, between getUpdates and the durable
handoff, and with messages queued; start it again on the same home. Parked things stay
decidable, no update is lost or answered twice, nothing is left running, no tool runs twice."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelldon.store import Store
from tests.integration.runtime.harness import ThreadedFakeTelegram

from .rig import OWNER, ShelldonRun, keyboards, texts, wait_until

pytestmark = pytest.mark.slow

ECHO_CODE = """\
DESCRIPTION = "Say how long a text is."
PARAMS_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def run(text):
    return str(len(text))
"""
ECHO_TEST = """\
from echo_len import run


def test_length():
    assert run("abc") == "3"
"""
SLOW_TEST = """\
import time

from echo_len import run


def test_length():
    time.sleep(20)
    assert run("abc") == "3"
"""
SCRIPT: list[dict[str, Any]] = [
    {
        "when": "note",
        "tool_calls": [{"name": "run_shell", "args": {"command": "echo ran >> ran.log"}}],
    },
    {"when": "note", "text": "Noted."},
    {
        "when": "make",
        "tool_calls": [
            {
                "name": "propose_tool",
                "args": {"name": "echo_len", "code": ECHO_CODE, "test": ECHO_TEST},
            }
        ],
    },
    {"when": "make", "text": "Proposed."},
    {
        "when": "slowgate",
        "tool_calls": [
            {
                "name": "propose_tool",
                "args": {"name": "echo_len", "code": ECHO_CODE, "test": SLOW_TEST},
            }
        ],
    },
    {"when": "slowgate", "text": "Proposed slowly."},
    {
        "when": "dawdle",
        "tool_calls": [{"name": "python_eval", "args": {"code": "sum(range(6 * 10**7))"}}],
    },
    {"when": "dawdle", "text": "Dawdled."},
    *[{"when": f"msg{i}", "text": f"answer {i}"} for i in range(6)],
]


@pytest.fixture
def tg() -> Iterator[ThreadedFakeTelegram]:
    fake = ThreadedFakeTelegram()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def run(tmp_path: Path, tg: ThreadedFakeTelegram) -> Iterator[ShelldonRun]:
    service = ShelldonRun(tmp_path / "home", tg, SCRIPT, SHELLDON_LIMITS_EVAL_TIMEOUT_S="10")
    try:
        yield service
    finally:
        service.stop()


def restart(run: ShelldonRun, script: list[dict[str, Any]] | None = None) -> None:
    """Power cut, then start again. ``script`` replaces the scripted brain's story: a fresh
    broker replays its script from the first step, which a real model would not do."""
    run.power_cut()
    assert run.survivors() == []
    if script is not None:
        (run.home / "script.json").write_text(json.dumps(script))
    run.start()


def test_approval_parked_before_a_power_cut_is_decidable_after_and_runs_once(
    run: ShelldonRun, tg: ThreadedFakeTelegram
) -> None:
    run.start()
    tg.do(tg.fake.queue_message, OWNER, "note this")
    wait_until(lambda: keyboards(tg), what="the approval keyboard")
    (ask,) = keyboards(tg)
    approve = ask.buttons()[0]["callback_data"]
    restart(run, [{"when": "note", "text": "Noted."}])
    tg.do(tg.fake.tap, OWNER, ask, 0)
    wait_until(lambda: "Noted." in texts(tg), 20, "the approved call's answer")
    time.sleep(0.5)
    ran = run.home / "workspace" / "ran.log"
    assert ran.read_text() == "ran\n"
    with Store(run.home / "shelldon.db") as store:
        assert store.parked.pending() == []
        assert [e.action for e in store.audit.log()].count("approved") == 1
    # The stale button decides nothing the second time.
    tg.do(tg.fake.queue_callback, OWNER, approve, ask.message_id, OWNER)
    wait_until(lambda: len(tg.fake.answers) >= 2, what="the second tap's answer")
    time.sleep(0.5)
    assert ran.read_text() == "ran\n"


def test_promotion_parked_before_a_power_cut_is_decidable_after(
    run: ShelldonRun, tg: ThreadedFakeTelegram
) -> None:
    run.start()
    tg.do(tg.fake.queue_message, OWNER, "make a tool")
    wait_until(lambda: keyboards(tg), 30, "the promotion keyboard")
    (ask,) = keyboards(tg)
    toolbox = run.home / "toolbox"
    restart(run)
    # The gated bytes are parked in the store with the promotion; staging holds nothing.
    assert list((toolbox / "staging").iterdir()) == []
    tg.do(tg.fake.tap, OWNER, ask, 0)
    wait_until((toolbox / "live" / "echo_len.py").exists, 20, "the promotion")
    wait_until(lambda: any("echo_len" in t and "Added" in t for t in texts(tg)), 10, "'Added'")
    assert list((toolbox / "staging").iterdir()) == []
    with Store(run.home / "shelldon.db") as store:
        assert store.parked.pending() == []


def test_power_cut_during_a_gate_leaves_no_staged_file(
    run: ShelldonRun, tg: ThreadedFakeTelegram
) -> None:
    run.start()
    staging = run.home / "toolbox" / "staging"
    tg.do(tg.fake.queue_message, OWNER, "slowgate please")
    wait_until(lambda: "Proposed slowly." in texts(tg), 15, "the proposal")
    wait_until(lambda: any(staging.glob("*/.gate-*")), 10, "the gate to start")
    restart(run)
    time.sleep(1.0)
    assert list(staging.iterdir()) == []


def test_update_fetched_but_not_handed_off_is_redelivered_once(
    run: ShelldonRun, tg: ThreadedFakeTelegram
) -> None:
    run.start()
    # Hold the database's write lock: the poller gets the update but cannot hand it off.
    blocker = sqlite3.connect(run.home / "shelldon.db", isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        uid = tg.do(tg.fake.queue_message, OWNER, "msg0 hello")
        time.sleep(1.0)  # the long poll in flight returned it; the handoff waits on the lock
        run.power_cut()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert any(u.get("update_id") == uid for u in tg.fake.pending), "confirmed before handoff"
    run.start()
    wait_until(lambda: "answer 0" in texts(tg), 20, "the redelivered update's answer")
    time.sleep(1.0)
    assert texts(tg).count("answer 0") == 1


def test_messages_queued_at_a_power_cut_are_each_answered_at_most_once(
    run: ShelldonRun, tg: ThreadedFakeTelegram
) -> None:
    run.start()
    tg.do(tg.fake.queue_message, OWNER, "dawdle a bit")
    for i in range(1, 4):
        tg.do(tg.fake.queue_message, OWNER, f"msg{i}")
    with Store(run.home / "shelldon.db") as store:
        wait_until(
            lambda: len(store.inbox.waiting()) >= 3, 10, "the queued messages to be handed off"
        )
    run.power_cut()
    run.start()
    wanted = [f"answer {i}" for i in range(1, 4)]
    wait_until(lambda: all(w in texts(tg) for w in wanted), 30, "every queued message answered")
    time.sleep(1.0)
    shown = texts(tg)
    assert [shown.count(w) for w in wanted] == [1, 1, 1]
    assert shown.index("answer 1") < shown.index("answer 2") < shown.index("answer 3")
    assert shown.count("Dawdled.") <= 1


def test_message_in_flight_at_a_power_cut_is_answered_after_restart(
    run: ShelldonRun, tg: ThreadedFakeTelegram
) -> None:
    run.start()
    tg.do(tg.fake.queue_message, OWNER, "dawdle a bit")
    with Store(run.home / "shelldon.db") as store:
        wait_until(lambda: store.conversation.recent(OWNER), 10, "the turn to start")
    run.power_cut()
    run.start()
    wait_until(
        lambda: any(t == "Dawdled." or t.startswith("Sorry") for t in texts(tg)),
        8,
        "an answer or an apology for the message in flight",
    )
