"""Approval cards that stay true (issue 20), as the owner sees them over the fake Bot API: a
decided card keeps what was asked and gains its outcome, an expired one says so and loses its
buttons, a tap during a turn is queued (also across a restart), the question is asked once, and
a card that cannot be edited any more gets its outcome as a new message."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelldon.rules.replies import APPROVED, DENIED, EXPIRED, GONE, QUEUED_APPROVED
from tests.fakes.fake_telegram import Sent

from .harness import Service, ThreadedFakeTelegram

pytestmark = pytest.mark.slow

OWNER = 1001
NOTE_CALL = {"name": "write_file", "args": {"path": "note.txt", "content": "<b>hi</b>"}}
NOTE_SAVED = {"when": "note", "text": "Note saved."}
SLOW = [
    {
        "when": "slow",
        # Runs until python_eval's timeout (SLOW_S): a turn that holds the slot that long.
        "tool_calls": [{"name": "python_eval", "args": {"code": "sum(range(10**10))"}}],
    },
    {"when": "slow", "text": "Slow sum done."},
]
SCRIPT = [{"when": "note", "text": "Sure, I'll save it.", "tool_calls": [NOTE_CALL]}, NOTE_SAVED]
SLOW_S = "5"


def start(home: Path, script: list[dict[str, Any]], **env: str) -> Service:
    return Service(home, script, telegram=True, SHELLDON_TELEGRAM_ALLOWED_USERS=str(OWNER), **env)


@pytest.fixture
def service(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Service]:
    marker = request.node.get_closest_marker("script")
    env = marker.kwargs if marker else {}
    script = SCRIPT + SLOW
    if env.get("SHELLDON_BRAIN_SCRIPT") == "again.json":
        # The resumed turn asks for a second RISKY call, parked under the same turn id.
        script = [SCRIPT[0], {"when": "note", "tool_calls": [EVIL_CALL]}, NOTE_SAVED]
        env = {}
    env = {"SHELLDON_LIMITS_EVAL_TIMEOUT_S": SLOW_S, **env}
    svc = start(tmp_path / "home", script, **env)
    try:
        yield svc
    finally:
        svc.stop()


def fake(service: Service) -> ThreadedFakeTelegram:
    tg = service.telegram
    assert tg is not None
    tg.wait(lambda: tg.fake.commands, timeout=15)
    return tg


def texts(tg: ThreadedFakeTelegram) -> list[str]:
    """What the owner's chat shows now (edited messages in their current state)."""
    return [m.visible for m in list(tg.fake.sent) if m.chat_id == OWNER]


def ask_for_a_note(tg: ThreadedFakeTelegram) -> Sent:
    tg.do(tg.fake.queue_message, OWNER, "save a note please")
    tg.wait(lambda: any(m.buttons() for m in tg.fake.sent))
    return next(m for m in tg.fake.sent if m.buttons())


def card_now(tg: ThreadedFakeTelegram, card: Sent) -> Sent:
    return tg.fake.message(OWNER, card.message_id)


def test_a_decided_card_keeps_what_was_asked_and_adds_the_outcome(service: Service) -> None:
    tg = fake(service)
    card = ask_for_a_note(tg)
    tg.do(tg.fake.tap, OWNER, card, 0)  # ✅ Approve
    tg.wait(lambda: "Note saved." in texts(tg))
    decided = card_now(tg, card)
    assert not decided.buttons()
    # What was asked is still there, exactly, with the outcome below it.
    assert "write_file" in decided.visible and "note.txt" in decided.visible
    assert "<b>hi</b>" in decided.visible
    assert decided.visible.rstrip().endswith(APPROVED)
    # The model's lead is said once; the question once, on the card.
    shown = texts(tg)
    assert shown.count("Sure, I'll save it.") == 1
    assert sum("I'd like to run" in t for t in shown) == 1
    assert "I'd like to run" in decided.visible
    assert (service.settings.workspace / "note.txt").read_text() == "<b>hi</b>"


def test_a_stale_second_tap_changes_nothing_and_the_card_keeps_its_outcome(
    service: Service,
) -> None:
    tg = fake(service)
    card = ask_for_a_note(tg)
    approve, deny = (b["callback_data"] for b in card.buttons())
    tg.do(tg.fake.tap, OWNER, card, 0)
    tg.wait(lambda: "Note saved." in texts(tg))
    tg.do(tg.fake.queue_callback, OWNER, deny, card.message_id, OWNER)  # a late double tap
    tg.wait(lambda: GONE in texts(tg))
    assert card_now(tg, card).visible.rstrip().endswith(APPROVED)
    assert DENIED not in "".join(texts(tg))
    assert [e.action for e in service.store.audit.log()].count("approved") == 1
    assert approve  # the tapped button was a real one of ours


@pytest.mark.script(SHELLDON_LIMITS_APPROVAL_TTL_S="2")
def test_an_expired_card_says_nothing_ran_loses_its_buttons_and_the_owner_is_told(
    service: Service,
) -> None:
    tg = fake(service)
    card = ask_for_a_note(tg)
    tg.wait(lambda: not card_now(tg, card).buttons(), timeout=15)
    expired = card_now(tg, card)
    assert "write_file" in expired.visible and expired.visible.rstrip().endswith(EXPIRED)
    # An edit makes no sound: the owner also gets a message of its own.
    tg.wait(lambda: any(t.startswith("⌛ Your approval to run write_file") for t in texts(tg)))
    (notice,) = [t for t in texts(tg) if t.startswith("⌛ Your approval")]
    assert "nothing ran" in notice and "note.txt" in notice
    assert service.store.parked.pending() == []
    assert not (service.settings.workspace / "note.txt").exists()
    assert ("expired", "approval") in [
        (e.action, e.detail.get("kind")) for e in service.store.audit.log()
    ]


def wait_for_turn_start(service: Service, text: str) -> None:
    deadline = time.monotonic() + 15
    while not any(m.content == text for m in service.store.conversation.recent(OWNER)):
        assert time.monotonic() < deadline, f"the turn on {text!r} never started"
        time.sleep(0.02)


# The approval's time runs out while the tap waits for the slow turn: accepted is accepted.
@pytest.mark.script(SHELLDON_LIMITS_APPROVAL_TTL_S="4", SHELLDON_LIMITS_EVAL_TIMEOUT_S="8")
def test_a_tap_during_a_turn_is_queued_and_applied_when_the_turn_ends(service: Service) -> None:
    tg = fake(service)
    card = ask_for_a_note(tg)
    tg.do(tg.fake.queue_message, OWNER, "slow please")
    wait_for_turn_start(service, "slow please")
    tg.do(tg.fake.tap, OWNER, card, 0)
    # Accepted at once: the card says it is queued, and nobody is asked to tap again.
    tg.wait(lambda: card_now(tg, card).visible.rstrip().endswith(QUEUED_APPROVED))
    assert not card_now(tg, card).buttons()
    assert "Slow sum done." not in texts(tg)
    assert not (service.settings.workspace / "note.txt").exists()
    tg.wait(lambda: "Note saved." in texts(tg), timeout=30)
    shown = texts(tg)
    assert shown.index("Slow sum done.") < shown.index("Note saved.")
    assert card_now(tg, card).visible.rstrip().endswith(APPROVED)
    assert not any("tap again" in t for t in shown)
    assert (service.settings.workspace / "note.txt").read_text() == "<b>hi</b>"
    assert [e.action for e in service.store.audit.log()].count("approved") == 1


def test_a_queued_tap_survives_a_restart_and_runs_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    svc = start(home, SCRIPT + SLOW, SHELLDON_LIMITS_EVAL_TIMEOUT_S="20")
    try:
        tg = fake(svc)
        card = ask_for_a_note(tg)
        tg.do(tg.fake.queue_message, OWNER, "slow please")
        wait_for_turn_start(svc, "slow please")
        tg.do(tg.fake.tap, OWNER, card, 0)
        tg.wait(lambda: card_now(tg, card).visible.rstrip().endswith(QUEUED_APPROVED))
    finally:
        svc.stop()  # the slow turn is cut short; the queued tap is still in the inbox
    assert not (home / "workspace" / "note.txt").exists()
    svc = start(home, [NOTE_SAVED, *SLOW], SHELLDON_LIMITS_EVAL_TIMEOUT_S="1")
    try:
        tg = fake(svc)
        tg.wait(lambda: "Note saved." in texts(tg), timeout=30)
        # This Bot API never saw the old card, so it cannot be edited: the outcome comes as a
        # message of its own.
        assert APPROVED in texts(tg)
        assert (svc.settings.workspace / "note.txt").read_text() == "<b>hi</b>"
        time.sleep(1.0)
        assert [e.action for e in svc.store.audit.log()].count("approved") == 1
    finally:
        svc.stop()


def test_a_card_too_old_to_edit_gets_its_outcome_as_a_new_message(service: Service) -> None:
    tg = fake(service)
    card = ask_for_a_note(tg)
    tg.do(tg.fake.age, OWNER, card.message_id)  # 48 hours later, as far as Telegram goes
    tg.do(tg.fake.tap, OWNER, card, 1)  # ❌ Deny
    tg.wait(lambda: DENIED in texts(tg))
    assert ("editMessageText", "Bad Request: message can't be edited") in tg.fake.rejected
    assert not (service.settings.workspace / "note.txt").exists()


def test_a_deleted_card_gets_its_outcome_as_a_new_message(service: Service) -> None:
    tg = fake(service)
    card = ask_for_a_note(tg)
    tg.do(tg.fake.delete, OWNER, card.message_id)
    tg.do(tg.fake.tap, OWNER, card, 0)
    tg.wait(lambda: "Note saved." in texts(tg))
    shown = texts(tg)
    assert shown.index(APPROVED) < shown.index("Note saved.")  # the outcome comes first


EVIL_CALL = {"name": "write_file", "args": {"path": "evil.txt", "content": "pwned"}}


@pytest.mark.script(SHELLDON_BRAIN_SCRIPT="again.json")
def test_an_old_cards_buttons_cannot_approve_the_next_call_its_turn_asks_for(
    service: Service,
) -> None:
    # A resumed turn may park again under the same turn id. If the first card could not be
    # edited (48 hours, or Telegram refused), its buttons are still there and its callback
    # data names the same turn: a tap on it must not approve the newer, unseen call.
    tg = fake(service)
    first = ask_for_a_note(tg)
    tg.do(tg.fake.age, OWNER, first.message_id)
    tg.do(tg.fake.tap, OWNER, first, 0)
    tg.wait(lambda: sum(bool(m.buttons()) for m in tg.fake.sent) == 2)  # the second card
    second = [m for m in tg.fake.sent if m.buttons()][-1]
    assert "evil.txt" in second.visible
    tg.do(tg.fake.tap, OWNER, first, 0)  # the old card's Approve, again
    tg.wait(lambda: any(a["text"] and "out of date" in a["text"] for a in tg.fake.answers))
    time.sleep(1.0)
    assert [p.kind for p in service.store.parked.pending()] == ["approval"]  # evil.txt still waits
    assert not (service.settings.workspace / "evil.txt").exists()
    tg.do(tg.fake.tap, OWNER, second, 1)  # the owner reads the new card and says no
    tg.wait(lambda: card_now(tg, second).visible.rstrip().endswith(DENIED))
    assert not (service.settings.workspace / "evil.txt").exists()
