"""The running service, on the production base: turns, approvals, promotions, ceilings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shelldon.contracts import Decision

from .harness import Service

pytestmark = pytest.mark.slow

FREE_TURN = [
    {"when": "time", "tool_calls": [{"name": "get_time", "args": {}}]},
    {"when": "time", "text": "It is clock o'clock."},
]
RISKY = [
    {
        "when": "note",
        "tool_calls": [{"name": "write_file", "args": {"path": "note.txt", "content": "hi"}}],
    },
    {"when": "note", "text": "Note saved."},
]
SLOW_THEN_FAST = [
    {
        "when": "slow",
        "tool_calls": [{"name": "python_eval", "args": {"code": "sum(range(4 * 10**7))"}}],
    },
    {"when": "slow", "text": "Done with the slow one."},
]


@pytest.fixture
def service(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Service]:
    marker = request.node.get_closest_marker("script")
    script = marker.args[0] if marker else FREE_TURN + RISKY
    env = marker.kwargs if marker else {}
    svc = Service(tmp_path / "home", script, **env)
    try:
        yield svc
    finally:
        svc.stop()


def test_a_free_turn_replies(service: Service) -> None:
    service.say("what time is it?")
    service.expect("It is clock o'clock.")


def test_a_conversation_far_over_the_request_cap_still_gets_turns(service: Service) -> None:
    # 40 stored messages of 40 000 four-byte characters (~6 MiB): only the window the prompt
    # uses travels to the worker, so the request stays small enough to hand over.
    for i in range(40):
        role = "user" if i % 2 == 0 else "assistant"
        service.store.conversation.append(0, role, "\U0001f422" * 40_000, time.time())
    service.say("what time is it?")
    service.expect("It is clock o'clock.")


def test_risky_call_parks_and_resumes_on_approve(service: Service) -> None:
    service.say("save a note")
    service.expect("approve?")
    service.expect("[y/N]")
    assert not (service.settings.workspace / "note.txt").exists()
    assert [p.kind for p in service.store.parked.pending()] == ["approval"]
    service.say("y")
    service.expect("Approved")
    service.expect("Note saved.")
    assert (service.settings.workspace / "note.txt").read_text() == "hi"
    audit = [(e.action, e.subject) for e in service.store.audit.log()]
    assert ("requested", "write_file") in audit and ("approved", "write_file") in audit
    assert service.store.parked.pending() == []


def test_risky_call_denied_never_runs(service: Service) -> None:
    service.say("save a note")
    service.expect("[y/N]")
    service.say("n")
    service.expect("Denied")
    service.expect("Note saved.")  # the scripted model answers anyway; the tool never ran
    assert not (service.settings.workspace / "note.txt").exists()
    assert ("denied", "write_file") in [(e.action, e.subject) for e in service.store.audit.log()]


def test_unknown_or_expired_decision_never_executes(service: Service) -> None:
    service.inject(Decision(0, 0, "t-never-parked", True))
    service.expect("expired")
    service.say("save a note")
    service.expect("[y/N]")
    (parked,) = service.store.parked.pending()
    # Expire it behind the arbiter's back, then tap.
    service.store.parked.expire_pending(time.time() + 10_000)
    service.inject(Decision(0, 0, parked.turn_id, True))
    service.expect("expired")
    assert not (service.settings.workspace / "note.txt").exists()


def test_malformed_decision_is_a_deny(service: Service) -> None:
    service.say("save a note")
    service.expect("[y/N]")
    (parked,) = service.store.parked.pending()
    service.inject(Decision(0, 0, parked.turn_id, None))
    service.expect("Denied")
    assert not (service.settings.workspace / "note.txt").exists()


def test_decision_from_a_stranger_is_dropped(service: Service) -> None:
    service.say("save a note")
    service.expect("[y/N]")
    (parked,) = service.store.parked.pending()
    service.inject(Decision(0, 666, parked.turn_id, True))
    assert "Approved" not in service.quiet_for(1.0)
    assert service.store.parked.parked_approval(parked.turn_id)


def test_a_message_from_a_stranger_in_the_inbox_starts_no_turn(service: Service) -> None:
    # The transport gates strangers first; the arbiter gates what reaches the inbox anyway.
    service.inject(_chat("what time is it?", user_id=666))
    assert "clock" not in service.quiet_for(1.0)
    assert service.store.conversation.recent(0) == []
    assert service.store.inbox.waiting() == []  # taken and dropped, not left to come back


@pytest.mark.script(FREE_TURN + RISKY + SLOW_THEN_FAST, SHELLDON_LIMITS_EVAL_TIMEOUT_S="5")
def test_tap_while_a_worker_is_in_flight_is_queued_and_applied_after(service: Service) -> None:
    service.say("save a note")
    service.expect("[y/N]")
    (parked,) = service.store.parked.pending()
    service.inject(_chat("slow please"))
    time.sleep(0.1)  # the slow turn's worker is running now
    service.inject(Decision(0, 0, parked.turn_id, True))
    service.expect("as soon as I finish")
    assert not (service.settings.workspace / "note.txt").exists()
    chunk = service.expect("Done with the slow one.")
    assert "tap again" not in chunk
    service.expect("Approved — running it now")
    service.expect("Note saved.")
    assert (service.settings.workspace / "note.txt").read_text() == "hi"


def _chat(text: str, user_id: int = 0):  # type: ignore[no-untyped-def]
    from shelldon.contracts import InboundMessage

    return InboundMessage(0, user_id, text)


def test_owner_commands_answer_without_a_turn(service: Service) -> None:
    service.say("/help")
    service.expect("/restore NAME")
    service.say("/budget")
    service.expect("of 48")
    service.say("/pending")
    service.expect("Nothing is waiting")
    service.say("/tools")
    service.expect("Self-coded, live: none yet")


def test_chat_messages_past_the_queue_bound_get_busy(tmp_path: Path) -> None:
    script = [
        {
            "when": "slow",
            "tool_calls": [{"name": "python_eval", "args": {"code": "sum(range(3 * 10**6))"}}],
        },
        {"when": "slow", "text": "slow done"},
    ]
    svc = Service(tmp_path / "h", script, SHELLDON_LIMITS_MAX_QUEUE="1")
    try:
        for _ in range(4):
            svc.inject(_chat("slow"))
        chunk = svc.expect("slow done") + svc.quiet_for(2.0)
        assert "dropped this one" in chunk
    finally:
        svc.stop()


def test_a_restart_finds_every_parked_approval(tmp_path: Path) -> None:
    home = tmp_path / "home"
    svc = Service(home, FREE_TURN + RISKY)
    try:
        svc.say("save a note")
        svc.expect("[y/N]")
        (parked,) = svc.store.parked.pending()
    finally:
        svc.stop()
    svc = Service(home, RISKY[1:])  # the resumed turn needs only the model's final answer
    try:
        assert [p.turn_id for p in svc.store.parked.pending()] == [parked.turn_id]
        svc.inject(Decision(0, 0, parked.turn_id, True))
        svc.expect("Approved")
        svc.expect("Note saved.")
        assert (svc.settings.workspace / "note.txt").read_text() == "hi"
    finally:
        svc.stop()


@pytest.mark.script(FREE_TURN, SHELLDON_BRAIN_PROVIDER="anthropic")
def test_a_missing_api_key_is_named_as_such_never_as_refused_credentials(
    service: Service,
) -> None:
    # `shelldon run` refuses to start without the key; an embedder that boots the actors
    # anyway still gets the honest reason, and nothing went out unauthenticated.
    service.say("what time is it?")
    said = service.expect("no API key configured")
    assert "refused my credentials" not in said
