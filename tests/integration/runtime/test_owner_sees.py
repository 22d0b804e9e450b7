"""Issue 20, tried as the owner would: replies that read well, memory and schedule the owner can
see and change, and usage the owner can read — over the fake Bot API and at the console."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import Service, ThreadedFakeTelegram

pytestmark = pytest.mark.slow

OWNER = 1001


def ops(*lines: dict[str, object]) -> str:
    return "```ops\n" + "\n".join(json.dumps(line) for line in lines) + "\n```"


SCRIPT = [
    {
        "when": "format",
        "text": "**Bold** move, *quietly*, with `rm -i` — see [the docs](https://example.com/a_b)"
        "\n- one\n- two\n```python\nprint('<ok>')\n```",
    },
    {
        "when": "hostile",
        "text": "<b>raw</b> [tap](javascript:alert(1)) [mybank.com](https://evil.example/x) "
        "**never closed `also open",
    },
    {
        "when": "cat",
        "text": "What a name!\n" + ops({"op": "remember", "fact": "the cat is *Miso* <3"}),
    },
    {
        "when": "remind",
        "text": "Will do.\n" + ops({"op": "schedule", "in_s": 3600, "prompt": "water the plants"}),
    },
    {"when": "hello", "text": "Hello!"},
]


@pytest.fixture
def telegram(tmp_path: Path) -> Iterator[tuple[Service, ThreadedFakeTelegram]]:
    svc = Service(
        tmp_path / "home",
        SCRIPT,
        telegram=True,
        SHELLDON_TELEGRAM_ALLOWED_USERS=str(OWNER),
        SHELLDON_BRAIN_PRICE_IN_PER_MTOK="3",
        SHELLDON_BRAIN_PRICE_OUT_PER_MTOK="15",
    )
    try:
        assert svc.telegram is not None
        svc.telegram.wait(lambda: svc.telegram is not None and svc.telegram.fake.commands)
        yield svc, svc.telegram
    finally:
        svc.stop()


def ask(tg: ThreadedFakeTelegram, text: str, expect: str) -> str:
    """Send ``text`` as the owner; return the visible text of the first new message that holds
    ``expect``."""
    before = len(tg.fake.sent)
    tg.do(tg.fake.queue_message, OWNER, text)
    tg.wait(lambda: any(expect in m.visible for m in tg.fake.sent[before:]))
    return next(m.visible for m in tg.fake.sent[before:] if expect in m.visible)


def sent_html(tg: ThreadedFakeTelegram, expect: str) -> str:
    return next(m.text for m in tg.fake.sent if expect in m.visible and m.parse_mode == "HTML")


def test_the_models_markdown_reads_as_formatting_in_telegram(telegram) -> None:  # type: ignore[no-untyped-def]
    _svc, tg = telegram
    shown = ask(tg, "format please", "Bold move")
    assert shown.startswith("Bold move, quietly, with rm -i — see the docs")
    assert "• one\n• two" in shown and "print('<ok>')" in shown
    html = sent_html(tg, "Bold move")
    assert "<b>Bold</b>" in html and "<i>quietly</i>" in html and "<code>rm -i</code>" in html
    assert '<a href="https://example.com/a_b">the docs</a>' in html
    assert '<pre><code class="language-python">' in html
    assert tg.fake.rejected == []


def test_hostile_markdown_is_shown_never_obeyed(telegram) -> None:  # type: ignore[no-untyped-def]
    _svc, tg = telegram
    shown = ask(tg, "hostile please", "raw")
    assert shown.startswith("<b>raw</b> [tap](javascript:alert(1)) mybank.com (")
    assert "**never closed `also open" in shown
    html = sent_html(tg, "raw")
    assert "javascript" not in re.findall(r'href="([^"]*)"', html)[0]
    assert re.findall(r"<(\w+)", html) == ["a"]  # the real link, shown with its real address
    assert tg.fake.rejected == []  # Telegram took it as HTML: no plain-text fallback was needed


def test_a_stored_fact_is_told_listed_and_forgotten(telegram) -> None:  # type: ignore[no-untyped-def]
    svc, tg = telegram
    told = ask(tg, "my cat is called Miso", "What a name!")
    assert told == "What a name!\n\n📝 I'll remember: the cat is *Miso* <3"
    listed = ask(tg, "/memory", "What I remember")
    (number,) = re.findall(r"#(\d+) the cat is \*Miso\* <3", listed)
    assert ask(tg, f"/forget {number}", "Forgotten") == f"Forgotten #{number}: the cat is *Miso* <3"
    assert "don't remember anything" in ask(tg, "/memory", "remember")
    assert svc.store.conversation.facts() == []
    (audited,) = [e for e in svc.store.audit.log() if e.action == "forgot"]
    assert audited.subject == f"fact #{number}" and "Miso" not in str(audited)


def test_new_starts_a_fresh_conversation(telegram) -> None:  # type: ignore[no-untyped-def]
    svc, tg = telegram
    ask(tg, "hello there", "Hello!")
    assert len(svc.store.conversation.recent(OWNER)) == 2
    assert "(2 messages)" in ask(tg, "/new", "Fresh start")
    assert svc.store.conversation.recent(OWNER) == []
    (audited,) = [e for e in svc.store.audit.log() if e.action == "new_conversation"]
    assert audited.detail == {"messages": 2}


def test_scheduled_turns_are_listed_and_cancelled(telegram) -> None:  # type: ignore[no-untyped-def]
    svc, tg = telegram
    ask(tg, "remind me to water the plants", "Will do.")
    listed = ask(tg, "/schedule", "Scheduled (1)")
    (number,) = re.findall(r"#(\d+) .* \(in 59m\): water the plants", listed)
    assert ask(tg, f"/cancel {number}", "Cancelled").startswith(f"Cancelled #{number}")
    assert ask(tg, "/schedule", "scheduled") == "Nothing is scheduled."
    assert svc.store.schedule.next_due() is None


def test_usage_counts_the_model_calls_the_owner_caused(telegram) -> None:  # type: ignore[no-untyped-def]
    svc, tg = telegram
    assert ask(tg, "/usage", "Today").startswith("Today: no model calls.")
    ask(tg, "hello", "Hello!")
    ask(tg, "my cat is called Miso", "What a name!")
    usage = ask(tg, "/usage", "Today")
    model = svc.settings.brain.model
    assert re.search(rf"• scripted {re.escape(model)}: 2 calls, [\d,]+ in, [\d,]+ out, \$", usage)
    assert usage.startswith("Today: 2 calls")
    assert "This month (" in usage and "Set [brain]" not in usage


def test_a_photo_gets_a_text_only_answer_instead_of_silence(telegram) -> None:  # type: ignore[no-untyped-def]
    svc, tg = telegram
    before = len(tg.fake.sent)
    tg.do(tg.fake.queue_media, OWNER, "voice", {"file_id": "v1", "duration": 2})
    tg.wait(lambda: len(tg.fake.sent) > before)
    assert tg.fake.sent[before].visible.startswith("I can only read text for now")
    assert "voice note" in tg.fake.sent[before].visible
    assert svc.store.conversation.recent(OWNER) == []


def test_memory_schedule_and_usage_at_the_console(tmp_path: Path) -> None:
    svc = Service(tmp_path / "home", SCRIPT)
    try:
        svc.say("my cat is called Miso")
        svc.expect("📝 I'll remember: the cat is *Miso* <3")
        svc.say("/memory")
        svc.expect("#1 the cat is *Miso* <3")
        svc.say("/forget 1")
        svc.expect("Forgotten #1")
        svc.say("remind me")
        svc.expect("Will do.")
        svc.say("/schedule")
        svc.expect("water the plants")
        svc.say("/cancel 1")
        svc.expect("Cancelled #1")
        svc.say("/usage")
        svc.expect("Today: 2 calls")
        svc.say("/new")
        svc.expect("Fresh start")
        assert svc.store.conversation.recent(0) == []
    finally:
        svc.stop()
