"""Scheduled turns: persisted, started on time (also after a restart), within the budget."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from shelldon.contracts import InboundMessage

from .harness import Service

pytestmark = pytest.mark.slow


def schedule_reply(in_s: float, prompt: str) -> str:
    return (
        f"I'll remind you.\n```ops\n"
        f'{{"op": "schedule", "in_s": {in_s}, "prompt": "{prompt}"}}\n```'
    )


def test_a_scheduled_turn_starts_on_time_and_is_budgeted(tmp_path: Path) -> None:
    script = [
        {"when": "remind", "text": schedule_reply(1, "water the plants")},
        {"when": "water", "text": "Time to water the plants!"},
    ]
    svc = Service(tmp_path / "home", script)
    try:
        svc.say("remind me in a second")
        chunk = svc.expect("I'll remind you.")
        assert "```ops" not in chunk
        started = time.monotonic()
        svc.expect("Time to water the plants!", timeout=10)
        assert time.monotonic() - started >= 0.5
        svc.say("/budget")
        svc.expect("1 of 48")
    finally:
        svc.stop()


def test_a_schedule_survives_a_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = [
        {"when": "remind", "text": schedule_reply(3, "feed the cat")},
        {"when": "cat", "text": "Feed the cat now!"},
    ]
    svc = Service(home, script)
    try:
        svc.say("remind me later")
        svc.expect("I'll remind you.")
    finally:
        svc.stop()
    svc = Service(home, script)
    try:
        svc.expect("Feed the cat now!", timeout=10)
    finally:
        svc.stop()


def test_scheduled_turns_past_the_budget_are_refused_and_the_owner_told_once(
    tmp_path: Path,
) -> None:
    ops = "\n".join(f'{{"op": "schedule", "in_s": 0.5, "prompt": "ping {i}"}}' for i in range(3))
    script = [{"when": "many", "text": f"Scheduled.\n```ops\n{ops}\n```"}] + [
        {"when": "ping", "text": "pong"} for _ in range(3)
    ]
    svc = Service(tmp_path / "home", script, SHELLDON_LIMITS_DAILY_TURN_BUDGET="1")
    try:
        svc.inject(InboundMessage(0, 0, "many please"))
        svc.expect("Scheduled.")
        chunk = svc.expect("pong", timeout=10) + svc.quiet_for(2.5)
        assert chunk.count("pong") == 1
        assert chunk.count("budget for turns I start myself is spent") == 1
        refused = [e for e in svc.store.audit.log() if e.action == "schedule_refused"]
        assert len(refused) == 2
    finally:
        svc.stop()
