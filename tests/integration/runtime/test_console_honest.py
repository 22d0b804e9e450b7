"""The console is as honest as Telegram (issue 20): at ``[y/N]`` only y/yes/n/no decide, and
any other line is asked again, never taken as a no and never lost to the model; approvals an
earlier session left parked are shown again and can be decided; an expired one is closed; an
unknown /command is answered locally."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import Service

pytestmark = pytest.mark.slow

NOTE = {"name": "write_file", "args": {"path": "note.txt", "content": "hi"}}
ASKS = {"when": "note", "tool_calls": [NOTE]}
SAVED = {"when": "note", "text": "Note saved."}
TIME = [
    {"when": "time", "tool_calls": [{"name": "get_time", "args": {}}]},
    {"when": "time", "text": "It is clock o'clock."},
]


@pytest.fixture
def service(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Service]:
    marker = request.node.get_closest_marker("script")
    env = marker.kwargs if marker else {}
    svc = Service(tmp_path / "home", [ASKS, SAVED, *TIME], **env)
    try:
        yield svc
    finally:
        svc.stop()


def said_to_the_model(service: Service) -> list[str]:
    return [m.content for m in service.store.conversation.recent(0) if m.role == "user"]


@pytest.mark.parametrize("line", ["what time is it?", "ok", ""])
def test_a_line_that_is_not_yes_or_no_is_asked_again_and_sent_nowhere(
    service: Service, line: str
) -> None:
    service.say("save a note")
    service.expect("[y/N]")
    service.say(line)
    chunk = service.expect("[y/N]")
    assert "Please answer y or n" in chunk and "write_file" in chunk
    assert "Denied" not in chunk + service.quiet_for(0.5)
    assert [p.kind for p in service.store.parked.pending()] == ["approval"]  # still undecided
    assert said_to_the_model(service) == ["save a note"]  # the line reached no model
    service.say("yes")
    service.expect("Approved")
    service.expect("Note saved.")
    assert (service.settings.workspace / "note.txt").read_text() == "hi"


def test_the_question_is_asked_once_then_what_would_run(service: Service) -> None:
    service.say("save a note")
    chunk = service.expect("[y/N]")
    assert chunk.count("I'd like to run") == 1
    assert chunk.index("I'd like to run") < chunk.index("↳ write_file")


def test_parked_approvals_are_shown_again_at_start_and_can_be_decided(tmp_path: Path) -> None:
    home = tmp_path / "home"
    svc = Service(home, [ASKS, SAVED])
    try:
        svc.say("save a note")
        svc.expect("[y/N]")
    finally:
        svc.stop()  # the owner walked away from the prompt
    svc = Service(home, [SAVED])
    try:
        chunk = svc.expect("[y/N]")
        assert "Still waiting for your answer" in chunk
        assert "I'd like to run write_file" in chunk and "↳ write_file" in chunk
        assert "note.txt" in chunk
        svc.say("y")
        svc.expect("Approved")
        svc.expect("Note saved.")
        assert (svc.settings.workspace / "note.txt").read_text() == "hi"
        assert svc.store.parked.pending() == []
    finally:
        svc.stop()


def test_a_reopened_approval_can_be_denied_and_nothing_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    svc = Service(home, [ASKS, SAVED])
    try:
        svc.say("save a note")
        svc.expect("[y/N]")
    finally:
        svc.stop()
    svc = Service(home, [SAVED])
    try:
        svc.expect("Still waiting for your answer")
        svc.expect("[y/N]")
        svc.say("n")
        svc.expect("Denied")
        assert not (svc.settings.workspace / "note.txt").exists()
        assert ("denied", "write_file") in [(e.action, e.subject) for e in svc.store.audit.log()]
    finally:
        svc.stop()


@pytest.mark.script(SHELLDON_LIMITS_APPROVAL_TTL_S="2")
def test_an_expired_approval_closes_its_prompt_and_says_nothing_ran(service: Service) -> None:
    service.say("save a note")
    service.expect("[y/N]")
    chunk = service.expect("without a tap, so nothing ran", timeout=15)
    assert "write_file" in chunk
    assert service.store.parked.pending() == []
    # The prompt is gone: the next line is chat again, not an answer to a dead prompt.
    service.say("what time is it?")
    service.expect("It is clock o'clock.")
    assert not (service.settings.workspace / "note.txt").exists()


def test_an_unknown_command_is_answered_locally_never_sent_to_the_model(service: Service) -> None:
    service.say("/frobnicate the widgets")
    chunk = service.expect("/frobnicate")
    assert "I don't know" in chunk and "/help" in service.expect("/restore")
    time.sleep(0.5)
    assert said_to_the_model(service) == []
    service.say("what time is it?")  # chat still reaches the model
    service.expect("It is clock o'clock.")
