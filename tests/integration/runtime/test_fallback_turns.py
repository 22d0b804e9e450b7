"""Issue 32, part 2, as the owner meets it over the fake Bot API: the running service (real
actors, a forked worker, the anthropic SDK and aiohttp) against a main Anthropic API and a
fallback OpenAI-compatible one, both fakes on loopback."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.canned_server import Canned
from tests.fakes.fake_anthropic import FakeAnthropic, error_body
from tests.fakes.fake_openai import FakeOpenAI

from .harness import Service, ThreadedFakeTelegram

pytestmark = pytest.mark.slow

OWNER = 1001
NOTE = "↪ Answered by the fallback, openai gpt-spare: anthropic was overloaded."


@pytest.fixture
def fakes() -> Iterator[tuple[FakeAnthropic, FakeOpenAI]]:
    with FakeAnthropic() as main, FakeOpenAI(api_key="sk-spare-key-0123456789") as spare:
        yield main, spare


def start(home: Path, main: FakeAnthropic, spare: FakeOpenAI, **env: str) -> Service:
    (home / "vault").mkdir(parents=True)
    (home / "vault" / "anthropic_api_key").write_text(main.api_key + "\n")
    (home / "vault" / "openai_api_key").write_text(str(spare.api_key) + "\n")
    svc = Service(
        home,
        [],
        telegram=True,
        SHELLDON_TELEGRAM_ALLOWED_USERS=str(OWNER),
        SHELLDON_BRAIN_PROVIDER="anthropic",
        SHELLDON_BRAIN_MODEL="claude-main",
        SHELLDON_BRAIN_BASE_URL=main.base_url,
        SHELLDON_BRAIN_FALLBACK_PROVIDER="openai",
        SHELLDON_BRAIN_FALLBACK_MODEL="gpt-spare",
        SHELLDON_BRAIN_FALLBACK_BASE_URL=spare.base_url,
        **env,
    )
    assert svc.telegram is not None
    svc.telegram.wait(lambda: svc.telegram is not None and svc.telegram.fake.commands)
    return svc


def ask(svc: Service, text: str, expect: str, timeout: float = 15.0) -> str:
    """Send ``text`` as the owner; the visible text of the first new message with ``expect``."""
    tg = svc.telegram
    assert isinstance(tg, ThreadedFakeTelegram)
    before = len(tg.fake.sent)
    tg.do(tg.fake.queue_message, OWNER, text)
    tg.wait(lambda: any(expect in m.visible for m in tg.fake.sent[before:]), timeout)
    return next(m.visible for m in tg.fake.sent[before:] if expect in m.visible)


def overloaded() -> Canned:
    # A retry-after longer than the turn: the main gives up at once, as after its retries.
    body = error_body("overloaded_error", "Overloaded")
    return Canned(529, body, headers={"retry-after": "120"})


def test_an_overloaded_main_is_answered_by_the_fallback_noted_once_and_counted_apart(
    tmp_path: Path, fakes: tuple[FakeAnthropic, FakeOpenAI]
) -> None:
    main, spare = fakes
    main.reply_text("Hello from the main.")
    main.push(overloaded())
    spare.reply_tool_calls(("get_time", {}))
    spare.reply_text("It is clock o'clock.")
    main.reply_text("The main is back.")
    svc = start(tmp_path / "home", main, spare)
    try:
        assert ask(svc, "hello", "Hello from") == "Hello from the main."
        said = ask(svc, "what time is it?", "clock o'clock")
        # Two calls of the turn went to the fallback; the owner reads the note once.
        assert said == f"It is clock o'clock.\n\n{NOTE}"
        assert len(main.requests) == 2 and len(spare.requests) == 2
        assert ask(svc, "and now?", "back") == "The main is back."
        usage = ask(svc, "/usage", "Today")
        assert usage.startswith("Today: 4 calls")
        assert re.search(r"• anthropic claude-main: 2 calls, [\d,]+ in, [\d,]+ out", usage)
        assert re.search(r"• openai gpt-spare: 2 calls, [\d,]+ in, [\d,]+ out", usage)
        # The conversation keeps the model's words, not the pet's note about who said them.
        kept = [m.content for m in svc.store.conversation.recent(OWNER)]
        assert "It is clock o'clock." in kept and not any("fallback" in k for k in kept)
    finally:
        svc.stop()


def test_a_bad_request_gets_the_apology_and_never_reaches_the_fallback(
    tmp_path: Path, fakes: tuple[FakeAnthropic, FakeOpenAI]
) -> None:
    main, spare = fakes
    main.reply_error(
        400, "invalid_request_error", "messages: text content blocks must be non-empty"
    )
    svc = start(tmp_path / "home", main, spare)
    try:
        said = ask(svc, "hello", "Sorry")
        assert said == "Sorry — the model rejected my request; try rephrasing."
        assert spare.requests == []
    finally:
        svc.stop()


def test_a_main_that_hangs_past_the_turns_deadline_leaves_the_fallback_unasked(
    tmp_path: Path, fakes: tuple[FakeAnthropic, FakeOpenAI]
) -> None:
    main, spare = fakes
    main.push(Canned(200, FakeAnthropic.message([{"type": "text", "text": "late"}]), delay_s=9))
    svc = start(tmp_path / "home", main, spare, SHELLDON_LIMITS_TURN_TIMEOUT_S="3")
    try:
        said = ask(svc, "hello", "Sorry", timeout=12)
        assert "took too long" in said
        time.sleep(1.0)
        assert len(main.requests) == 1
        assert spare.requests == []  # neither within the turn nor after its deadline
    finally:
        svc.stop()
