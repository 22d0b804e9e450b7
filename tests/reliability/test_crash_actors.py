"""Crash in the middle, on the production base: each actor's handler raises while a turn runs
(a Crash drill, as a bug would). The actor stops, the supervisor starts a fresh one whose state
comes from sqlite, the turn in flight ends with its reply or an honest apology (exactly one),
the next message is answered, and an approval parked before the crash is still decidable and
runs once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.runtime.harness import Service

from .rig import OWNER, keyboards, texts, wait_until

pytestmark = pytest.mark.slow

SCRIPT: list[dict[str, Any]] = [
    {
        "when": "note",
        "tool_calls": [{"name": "write_file", "args": {"path": "n.txt", "content": "x"}}],
    },
    {"when": "note", "text": "Saved."},
    {
        "when": "slow",
        "tool_calls": [{"name": "python_eval", "args": {"code": "sum(range(8 * 10**7))"}}],
    },
    {"when": "slow", "text": "Slow done."},
    {"when": "after", "text": "Still here."},
]
ROLES = (
    "broker",
    "turn",
    "strikes",
    "gate",
    "arbiter",
    "transport",
)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = Service(
        tmp_path / "home",
        SCRIPT,
        telegram=True,
        SHELLDON_TELEGRAM_ALLOWED_USERS=str(OWNER),
        SHELLDON_LIMITS_EVAL_TIMEOUT_S="8",
        SHELLDON_LIMITS_TURN_TIMEOUT_S="5",
        SHELLDON_LIMITS_BAIL_MARGIN_S="0.5",
        SHELLDON_LIMITS_KILL_GRACE_S="0.5",
    )
    try:
        yield svc
    finally:
        svc.stop()


def turn_started(svc: Service, text: str) -> bool:
    """Whether the arbiter has started the turn for ``text`` (it records the message then)."""
    return any(m.content == text for m in svc.store.conversation.recent(OWNER))


def finals_after(svc: Service, index: int) -> list[str]:
    """Replies the owner got from ``index`` on that end a turn: the answer or an apology."""
    assert svc.telegram is not None
    return [t for t in texts(svc.telegram)[index:] if t == "Slow done." or t.startswith("Sorry")]


@pytest.mark.parametrize("role", ROLES)
def test_actor_crashed_mid_turn_is_restarted_and_the_turn_ends_once(
    service: Service, role: str
) -> None:
    tg = service.telegram
    assert tg is not None
    tg.wait(lambda: tg.fake.commands)
    tg.do(tg.fake.queue_message, OWNER, "save a note")
    wait_until(lambda: keyboards(tg), what="the approval keyboard")
    (ask,) = keyboards(tg)
    (parked,) = service.store.parked.pending()

    mark = len(texts(tg))
    tg.do(tg.fake.queue_message, OWNER, "slow please")
    wait_until(lambda: turn_started(service, "slow please"), what="the slow turn to start")
    time.sleep(0.3)  # the worker is inside python_eval now
    service.crash(role)

    wait_until(lambda: service.status().restarts >= 1, 10, f"{role} to be restarted")
    wait_until(lambda: finals_after(service, mark), 10, "the slow turn's one final answer")
    time.sleep(0.5)
    assert len(finals_after(service, mark)) == 1, texts(tg)[mark:]

    tg.do(tg.fake.queue_message, OWNER, "after the crash")
    wait_until(lambda: "Still here." in texts(tg), 15, "the next turn's answer")

    assert service.store.parked.parked_approval(parked.turn_id)
    tg.do(tg.fake.tap, OWNER, ask, 0)
    note = service.settings.workspace / "n.txt"
    wait_until(note.exists, 15, "the parked call to run after the tap")
    assert note.read_text() == "x"
    actions = [e.action for e in service.store.audit.log()]
    assert actions.count("approved") == 1
    if role != "broker":
        # A restarted broker replays the scripted brain from its first step, so there the
        # model asks for the same write again; with every other role the story just ends.
        wait_until(lambda: "Saved." in texts(tg), 15, "the resumed turn's answer")
        assert service.store.parked.pending() == []
