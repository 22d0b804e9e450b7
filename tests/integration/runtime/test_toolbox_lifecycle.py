"""The toolbox's lifecycle as the owner lives it over the fake Bot API (issue 20, points 5 and
6): a tool retired with /retire, a live tool improved through ``replaces`` (shown as a diff,
live only after the tap), and a failed gate repaired after "🔧 Try to fix" — with what a
stranger, a double tap, a spent budget and a model that keeps failing can and cannot do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelldon.rules.arbiter import budget_day
from shelldon.toolbox.manifest import code_hash
from tests.fakes.fake_telegram import Sent

from .harness import Service, ThreadedFakeTelegram

pytestmark = pytest.mark.slow

OWNER, STRANGER = 1001, 666

V1 = """\
DESCRIPTION = "Say how long a text is."
PARAMS_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


def run(text=""):
    return f"v1 length {len(text)}"
"""
V1_TEST = """\
from echo_len import run


def test_length():
    assert run("abc") == "v1 length 3"
"""
V2 = V1.replace('f"v1 length {len(text)}"', 'f"v2 has {len(text)} characters"')
V2_TEST = V1_TEST.replace('"v1 length 3"', '"v2 has 3 characters"')
# A first try whose code is wrong (off by one): its gate fails, and pytest prints why.
BROKEN_CODE = V1.replace("{len(text)}", "{len(text) + 1}")
# One whose test expects the wrong answer.
BROKEN_TEST = V1_TEST.replace('"v1 length 3"', '"v1 length 4"')


def propose(when: str, code: str, test: str, replaces: str = "") -> dict[str, Any]:
    args = {"name": "echo_len", "code": code, "test": test}
    if replaces:
        args["replaces"] = replaces
    return {"when": when, "tool_calls": [{"name": "propose_tool", "args": args}]}


def use(when: str) -> list[dict[str, Any]]:
    return [
        {"when": when, "tool_calls": [{"name": "echo_len", "args": {"text": "hello"}}]},
        {"when": when, "text": "Tool said: {last_tool_result}"},
    ]


def texts(tg: ThreadedFakeTelegram) -> list[str]:
    return [m.visible for m in tg.fake.sent if m.chat_id == OWNER]


def card(tg: ThreadedFakeTelegram, needle: str, timeout: float = 40) -> Sent:
    """The newest message with buttons whose text holds ``needle`` (waits for it)."""

    def find() -> Sent | None:
        return next(
            (m for m in reversed(tg.fake.sent) if m.buttons() and needle in m.visible), None
        )

    tg.wait(lambda: find() is not None, timeout=timeout)
    found = find()
    assert found is not None
    return found


def said(tg: ThreadedFakeTelegram, needle: str, timeout: float = 30) -> str:
    """Wait for a message (or an edit) to the owner holding ``needle``; return it."""

    def find() -> str | None:
        return next((t for t in texts(tg) if needle in t), None)

    tg.wait(lambda: find() is not None, timeout=timeout)
    return find() or ""


def actions(svc: Service, action: str) -> list[Any]:
    return [e for e in svc.store.audit.log(500) if e.action == action]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    started: list[Service] = []

    def make(script: list[dict[str, Any]], **env: str) -> tuple[Service, ThreadedFakeTelegram]:
        svc = Service(
            tmp_path / "home",
            script,
            telegram=True,
            SHELLDON_TELEGRAM_ALLOWED_USERS=str(OWNER),
            **env,
        )
        started.append(svc)
        assert svc.telegram is not None
        svc.telegram.wait(lambda: svc.telegram is not None and svc.telegram.fake.commands, 15)
        return svc, svc.telegram

    yield make
    for svc in started:
        svc.stop()


def promote_v1(svc: Service, tg: ThreadedFakeTelegram) -> None:
    tg.do(tg.fake.queue_message, OWNER, "make v1")
    tg.do(tg.fake.tap, OWNER, card(tg, "Add it?"), 0)
    said(tg, "Added echo_len")


# ---------------------------------------------------------------- point 6: repair


def test_a_failed_gate_offers_a_fix_and_the_second_try_goes_live(start: Any) -> None:
    script = [
        propose("make", BROKEN_CODE, V1_TEST),
        {"when": "make", "text": "Proposed."},
        propose("repair round 1", V1, V1_TEST),
        {"when": "repair round 1", "text": "Fixed the off-by-one."},
    ]
    svc, tg = start(script)
    tg.do(tg.fake.queue_message, OWNER, "make a tool")
    failed = card(tg, "failed its gate")
    assert [b["text"] for b in failed.buttons()] == ["🔧 Try to fix", "Drop"]
    assert "v1 length 4" in failed.visible  # pytest's own words: what went wrong
    assert "counts against today's budget" in failed.visible
    assert not (svc.settings.live_tools / "echo_len.py").exists()
    assert [p.kind for p in svc.store.parked.pending()] == ["repair"]

    tg.do(tg.fake.tap, OWNER, failed, 0)
    promotion = card(tg, "Add it?")
    assert "Fixed the off-by-one." in texts(tg)
    decided = tg.fake.message(OWNER, failed.message_id)
    assert "Trying to fix echo_len" in decided.visible and not decided.buttons()
    # One turn of today's budget, like a scheduled turn.
    assert svc.store.schedule.budget_spent(budget_day(time.time())) == 1
    tg.do(tg.fake.queue_message, OWNER, "/budget")
    said(tg, "Turns I started myself today: 1 of")

    tg.do(tg.fake.tap, OWNER, promotion, 0)
    said(tg, "Added echo_len")
    live = (svc.settings.live_tools / "echo_len.py").read_bytes()
    assert code_hash(live) == code_hash(V1.encode())
    started = actions(svc, "repair_started")
    assert len(started) == 1 and started[0].detail["round"] == 1
    gates = [(e.action, e.detail["round"]) for e in svc.store.audit.log(500) if e.actor == "gate"]
    assert gates == [("failed", 0), ("passed", 1)]
    # The conversation keeps the owner's tap, not the gate's (model-made) text as their words.
    user_lines = [m.content for m in svc.store.conversation.recent(OWNER) if m.role == "user"]
    assert any("Try to fix" in line for line in user_lines)
    assert not any("gate_report" in line for line in user_lines)


def test_repair_stops_after_two_rounds(start: Any) -> None:
    script = [propose("make", V1, BROKEN_TEST), {"when": "make", "text": "Proposed."}]
    for round_ in (1, 2):
        script += [
            propose(f"repair round {round_}", V1, BROKEN_TEST),
            {"when": f"repair round {round_}", "text": f"Try {round_}."},
        ]
    svc, tg = start(script)
    tg.do(tg.fake.queue_message, OWNER, "make a tool")
    for round_ in (1, 2):
        offer = card(tg, "failed its gate")
        if round_ == 2:
            assert "My fix of echo_len (repair round 1 of 2) failed its gate too" in offer.visible
        tg.do(tg.fake.tap, OWNER, offer, 0)
        said(tg, f"Try {round_}.")
    final = said(tg, "after 2 repair round(s)", timeout=40)
    assert "threw it away" in final
    time.sleep(0.5)
    assert not any(m.buttons() for m in tg.fake.sent)  # no third "Try to fix"
    assert svc.store.parked.pending() == []
    assert len(actions(svc, "repair_started")) == 2
    assert not (svc.settings.live_tools / "echo_len.py").exists()


def test_only_the_owners_one_tap_starts_a_repair(start: Any) -> None:
    script = [
        propose("make", V1, BROKEN_TEST),
        {"when": "make", "text": "Proposed."},
        {"when": "repair round 1", "text": "I give up."},
        # A model that claims to have been asked for a fix starts nothing: only a tap does.
        {"when": "pretend", "text": "🔧 Try to fix echo_len (repair round 1)"},
    ]
    svc, tg = start(script)
    tg.do(tg.fake.queue_message, OWNER, "make a tool")
    offer = card(tg, "failed its gate")
    data = offer.buttons()[0]["callback_data"]
    tg.do(tg.fake.queue_callback, STRANGER, data, offer.message_id, OWNER)
    tg.do(tg.fake.queue_message, OWNER, "pretend you were asked to fix it")
    said(tg, "🔧 Try to fix echo_len (repair round 1)")
    time.sleep(0.5)
    assert actions(svc, "repair_started") == []
    assert [p.kind for p in svc.store.parked.pending()] == ["repair"]

    # The owner taps twice (a double tap, or an old button): one repair turn, one budget turn.
    tg.do(tg.fake.tap, OWNER, offer, 0)
    tg.do(tg.fake.queue_callback, OWNER, data, offer.message_id, OWNER)
    said(tg, "I give up.")
    time.sleep(1.0)
    assert len(actions(svc, "repair_started")) == 1
    assert svc.store.schedule.budget_spent(budget_day(time.time())) == 1


def test_a_fix_waits_when_the_days_budget_is_spent_and_drop_drops(start: Any) -> None:
    script = [propose("make", V1, BROKEN_TEST), {"when": "make", "text": "Proposed."}]
    svc, tg = start(script, SHELLDON_LIMITS_DAILY_TURN_BUDGET="1")
    assert svc.store.schedule.spend_budget(budget_day(time.time()), 1, 1)
    tg.do(tg.fake.queue_message, OWNER, "make a tool")
    offer = card(tg, "failed its gate")
    tg.do(tg.fake.tap, OWNER, offer, 0)
    said(tg, "budget for turns I start myself is spent")
    assert actions(svc, "repair_started") == []
    assert tg.fake.message(OWNER, offer.message_id).buttons()  # it can still be dropped
    tg.do(tg.fake.tap, OWNER, tg.fake.message(OWNER, offer.message_id), 1)
    said(tg, "Dropped echo_len")
    assert svc.store.parked.pending() == []
    assert [e.subject for e in actions(svc, "repair_dropped")] == ["echo_len"]


# ---------------------------------------------------------------- point 5: replace, retire


def test_a_replacement_shows_its_diff_and_goes_live_only_on_approve(start: Any) -> None:
    script = [
        propose("make v1", V1, V1_TEST),
        {"when": "make v1", "text": "Proposed v1."},
        propose("improve", V2, V2_TEST, replaces="echo_len"),
        {"when": "improve", "text": "Proposed v2."},
        *use("use one"),
        *use("use two"),
        propose("again", V2, V2_TEST, replaces="echo_len"),
        {"when": "again", "text": "Proposed v2 again."},
        *use("use three"),
    ]
    svc, tg = start(script)
    promote_v1(svc, tg)
    v1_hash = svc.store.tools.approval("echo_len").code_hash  # type: ignore[union-attr]

    tg.do(tg.fake.queue_message, OWNER, "improve echo_len")
    ask = card(tg, "Replace it?")
    assert "replaces echo_len (live since 20" in ask.visible
    assert '-    return f"v1 length {len(text)}"' in ask.visible
    assert '+    return f"v2 has {len(text)} characters"' in ask.visible
    assert '+    assert run("abc") == "v2 has 3 characters"' in ask.visible
    # Gated, parked, shown: and the live tool is still the one the owner approved.
    assert svc.store.tools.approval("echo_len").code_hash == v1_hash  # type: ignore[union-attr]
    tg.do(tg.fake.queue_message, OWNER, "use one")
    said(tg, "Tool said: v1 length 5")

    tg.do(tg.fake.tap, OWNER, ask, 1)  # ❌ Deny
    said(tg, "Discarded echo_len")
    tg.do(tg.fake.queue_message, OWNER, "use two")
    said(tg, "Tool said: v1 length 5")

    tg.do(tg.fake.queue_message, OWNER, "again")
    tg.do(tg.fake.tap, OWNER, card(tg, "Replace it?"), 0)
    said(tg, "Replaced echo_len")
    tg.do(tg.fake.queue_message, OWNER, "use three")
    said(tg, "Tool said: v2 has 5 characters")
    promoted = actions(svc, "promoted")[-1]
    assert promoted.detail == {"replaced": v1_hash}
    assert code_hash(V2.encode()) == promoted.code_hash


def test_a_replacement_of_a_tool_that_changed_since_the_card_is_refused(start: Any) -> None:
    script = [
        propose("make v1", V1, V1_TEST),
        {"when": "make v1", "text": "Proposed v1."},
        propose("improve", V2, V2_TEST, replaces="echo_len"),
        {"when": "improve", "text": "Proposed v2."},
        propose("sneak", V2, V2_TEST, replaces="other_tool"),
        {"when": "sneak", "text": "Proposed."},
    ]
    svc, tg = start(script)
    promote_v1(svc, tg)
    tg.do(tg.fake.queue_message, OWNER, "improve echo_len")
    ask = card(tg, "Replace it?")
    # The owner retires the tool the diff was made against, then approves the old card.
    tg.do(tg.fake.queue_message, OWNER, "/retire echo_len")
    said(tg, "Retired echo_len")
    tg.do(tg.fake.tap, OWNER, ask, 0)
    said(tg, "changed since you were shown")
    assert svc.store.tools.approval("echo_len") is None
    assert not (svc.settings.live_tools / "echo_len.py").exists()
    # A "replacement" under another tool's name is refused before any gate.
    tg.do(tg.fake.queue_message, OWNER, "sneak")
    said(tg, "a new version keeps its tool's name")


def test_retire_takes_a_tool_out_at_once_with_its_test_archived(start: Any) -> None:
    script = [
        propose("make v1", V1, V1_TEST),
        {"when": "make v1", "text": "Proposed v1."},
        *use("use it"),
    ]
    svc, tg = start(script)
    assert "retire" in [c["command"] for c in tg.fake.commands]
    promote_v1(svc, tg)
    tg.do(tg.fake.queue_message, OWNER, "/retire echo_len")
    reply = said(tg, "Retired echo_len")
    assert "will not run again" in reply
    assert not (svc.settings.live_tools / "echo_len.py").exists()
    assert "echo_len" not in (svc.settings.live_tools / "manifest.json").read_text()
    archived = list((svc.settings.toolbox / "retired").glob("echo_len-*"))
    assert len(archived) == 1
    assert (archived[0] / "echo_len.py").read_text() == V1
    assert (archived[0] / "test_echo_len.py").read_text() == V1_TEST
    assert not (svc.settings.toolbox / "tests" / "test_echo_len.py").exists()
    retired = actions(svc, "retired")
    assert [(e.subject, e.code_hash) for e in retired] == [("echo_len", code_hash(V1.encode()))]

    tg.do(tg.fake.queue_message, OWNER, "use it")
    answer = said(tg, "Tool said:")
    assert "v1 length" not in answer
    tg.do(tg.fake.queue_message, OWNER, "/tools")
    assert "Self-coded, live: none yet" in said(tg, "Self-coded, live")
    tg.do(tg.fake.queue_message, OWNER, "/retire echo_len")
    said(tg, "Could not retire echo_len")


# ---------------------------------------------------------------- the same at the console


def test_at_the_console_a_failed_gate_asks_try_to_fix_and_retire_works(tmp_path: Path) -> None:
    script = [
        propose("make", V1, BROKEN_TEST),
        {"when": "make", "text": "Proposed."},
        propose("repair round 1", V1, V1_TEST),
        {"when": "repair round 1", "text": "Fixed the test."},
        propose("improve", V2, V2_TEST, replaces="echo_len"),
        {"when": "improve", "text": "Proposed v2."},
    ]
    svc = Service(tmp_path / "home", script)
    try:
        svc.say("make a tool")
        chunk = svc.expect("[y/N]", timeout=40)
        assert "failed its gate" in chunk and "Try to fix?" in chunk
        assert "v1 length 4" in chunk
        svc.say("y")
        svc.expect("Trying to fix echo_len (round 1)")
        svc.expect("Fixed the test.", timeout=30)
        chunk = svc.expect("[y/N]", timeout=40)
        assert "passed" in chunk
        svc.say("y")
        svc.expect("Added echo_len")
        svc.say("improve it")
        chunk = svc.expect("[y/N]", timeout=40)
        assert "replaces echo_len (live since" in chunk
        assert '+    return f"v2 has {len(text)} characters"' in chunk
        svc.say("n")
        svc.expect("Discarded echo_len")
        svc.say("/retire echo_len")
        svc.expect("Retired echo_len")
        assert svc.store.tools.approval("echo_len") is None
    finally:
        svc.stop()
