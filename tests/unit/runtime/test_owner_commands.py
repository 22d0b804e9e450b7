"""What the owner reads in /memory, /forget, /new, /schedule, /cancel and /usage, and what each
one changes in the store (and the audit log)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from shelldon.config import BrainSettings, FallbackSettings
from shelldon.owner_commands import (
    HELP,
    cancel_scheduled,
    forget_fact,
    memory_text,
    new_conversation,
    schedule_text,
    usage_cost,
    usage_text,
)
from shelldon.rules.commands import OWNER_COMMANDS, command_of
from shelldon.store import Store, UsageRow

NOW = dt.datetime(2026, 12, 3, 9, 30, tzinfo=dt.UTC).timestamp()
CHAT = 1001


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "shelldon.db") as s:
        yield s


def test_every_new_command_is_a_command_and_in_help() -> None:
    for name in ("memory", "forget", "new", "schedule", "cancel", "usage"):
        assert name in dict(OWNER_COMMANDS) and f"/{name} — " in HELP
    assert command_of("/forget 3") == ("forget", "3")


def test_memory_lists_facts_with_numbers_that_stay_put(store: Store) -> None:
    assert "don't remember anything" in memory_text(store)
    for fact in ("the cat is Miso", "tea, no sugar", "birthday in May"):
        store.conversation.remember(fact, NOW)
    assert forget_fact(store, "2", NOW) == "Forgotten #2: tea, no sugar"
    assert memory_text(store).split("\n")[1:] == ["#1 the cat is Miso", "#3 birthday in May"]
    assert store.conversation.facts() == ["the cat is Miso", "birthday in May"]


def test_forget_is_audited_by_number_and_never_keeps_what_it_said(store: Store) -> None:
    store.conversation.remember("my PIN is 1234", NOW)
    forget_fact(store, "#1", NOW)
    (entry,) = [e for e in store.audit.log() if e.action == "forgot"]
    assert (entry.actor, entry.subject) == ("owner", "fact #1")
    assert "1234" not in str(entry)


@pytest.mark.parametrize("arg", ["", "two", "-1", "1; DROP TABLE facts", "²", "9" * 40])
def test_forget_without_a_number_deletes_nothing(store: Store, arg: str) -> None:
    store.conversation.remember("keep me", NOW)
    assert forget_fact(store, arg, NOW).startswith("Usage: /forget N")
    assert store.conversation.facts() == ["keep me"]


def test_forget_of_a_number_that_is_not_there_says_so(store: Store) -> None:
    assert "no fact #7" in forget_fact(store, "7", NOW)
    assert [e for e in store.audit.log() if e.action == "forgot"] == []


def test_new_drops_this_chats_history_and_audits_only_the_count(store: Store) -> None:
    store.conversation.append(CHAT, "user", "my secret plan", NOW)
    store.conversation.append(CHAT, "assistant", "noted", NOW)
    store.conversation.append(0, "user", "console chat", NOW)
    store.conversation.remember("the cat is Miso", NOW)
    assert "(2 messages)" in new_conversation(store, CHAT, NOW)
    assert store.conversation.recent(CHAT) == []
    assert [m.content for m in store.conversation.recent(0)] == ["console chat"]
    assert store.conversation.facts() == ["the cat is Miso"]
    (entry,) = [e for e in store.audit.log() if e.action == "new_conversation"]
    assert entry.detail == {"messages": 2} and "secret" not in str(entry)
    assert "fresh start already" in new_conversation(store, CHAT, NOW)


def test_schedule_lists_what_waits_and_cancel_removes_one(store: Store) -> None:
    assert schedule_text(store, NOW) == "Nothing is scheduled."
    first = store.schedule.add(CHAT, NOW + 3600, "water the plants", NOW)
    second = store.schedule.add(CHAT, NOW + 600, "stretch", NOW)
    lines = schedule_text(store, NOW).split("\n")
    assert lines[1:] == [
        f"#{second} 2026-12-03 09:40 UTC (in 10m): stretch",
        f"#{first} 2026-12-03 10:30 UTC (in 60m): water the plants",
    ]
    assert cancel_scheduled(store, str(first), NOW).startswith(f"Cancelled #{first}")
    assert [s.prompt for s in store.schedule.upcoming()] == ["stretch"]
    assert store.schedule.due(NOW + 7200) == [s for s in store.schedule.upcoming()]
    (entry,) = [e for e in store.audit.log() if e.action == "cancelled"]
    assert entry.subject == f"schedule #{first}"


def test_cancel_cannot_touch_a_turn_that_started(store: Store) -> None:
    sid = store.schedule.add(CHAT, NOW - 5, "already running", NOW - 60)
    assert store.schedule.start(sid, NOW)
    assert "no scheduled turn" in cancel_scheduled(store, str(sid), NOW)
    assert cancel_scheduled(store, "soon", NOW).startswith("Usage: /cancel N")


def test_usage_counts_today_and_this_month_per_provider(store: Store) -> None:
    yesterday = NOW - 86400
    last_month = dt.datetime(2026, 11, 30, 23, 59, tzinfo=dt.UTC).timestamp()
    store.usage.record("anthropic", "claude-sonnet-4-5", 1000, 200, NOW)
    store.usage.record("anthropic", "claude-sonnet-4-5", 3000, 800, NOW - 60)
    store.usage.record("openai", "gpt-4o-mini", 500, 50, yesterday)
    store.usage.record("anthropic", "claude-sonnet-4-5", 9, 9, last_month)
    text = usage_text(store, BrainSettings(provider="anthropic"), NOW)
    assert text.split("\n") == [
        "Today: 2 calls, 4,000 tokens in, 1,000 out",
        "• anthropic claude-sonnet-4-5: 2 calls, 4,000 in, 1,000 out, no price set",
        "This month (December 2026): 3 calls, 4,500 tokens in, 1,050 out",
        "• anthropic claude-sonnet-4-5: 2 calls, 4,000 in, 1,000 out, no price set",
        "• openai gpt-4o-mini: 1 call, 500 in, 50 out, no price set",
        "Set [brain] price_in_per_mtok and price_out_per_mtok (US$ per million tokens) "
        "to see what it costs.",
    ]


def test_usage_shows_the_cost_where_brain_names_a_price(store: Store) -> None:
    brain = BrainSettings(
        provider="anthropic", model="claude-sonnet-4-5", price_in_per_mtok=3, price_out_per_mtok=15
    )
    store.usage.record("anthropic", "claude-sonnet-4-5", 1_000_000, 100_000, NOW)
    store.usage.record("openai", "gpt-4o-mini", 500, 50, NOW)
    text = usage_text(store, brain, NOW)
    assert "Today: 2 calls, 1,000,500 tokens in, 100,050 out, $4.50" in text
    assert "• anthropic claude-sonnet-4-5: 1 call, 1,000,000 in, 100,000 out, $4.50" in text
    assert "• openai gpt-4o-mini: 1 call, 500 in, 50 out, no price set" in text
    assert "Set [brain]" not in text
    assert usage_cost(UsageRow("anthropic", "claude-sonnet-4-5", 1, 1000, 0), brain) == 0.003


def test_usage_prices_the_fallbacks_calls_under_its_own_provider(store: Store) -> None:
    spare = FallbackSettings(
        "openai", "gpt-4o-mini", price_in_per_mtok=0.15, price_out_per_mtok=0.6
    )
    brain = BrainSettings(provider="anthropic", model="claude-sonnet-4-5", fallback=spare)
    store.usage.record("anthropic", "claude-sonnet-4-5", 1000, 100, NOW)
    store.usage.record("openai", "gpt-4o-mini", 1_000_000, 1_000_000, NOW)
    text = usage_text(store, brain, NOW)
    assert "• openai gpt-4o-mini: 1 call, 1,000,000 in, 1,000,000 out, $0.75" in text
    assert "• anthropic claude-sonnet-4-5: 1 call, 1,000 in, 100 out, no price set" in text


def test_usage_with_no_calls_says_so(store: Store) -> None:
    text = usage_text(store, BrainSettings(), NOW)
    assert text.startswith("Today: no model calls.\nThis month (December 2026): no model calls.")
