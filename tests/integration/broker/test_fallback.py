"""The fallback provider through the real clients (the anthropic SDK, aiohttp) against two fake
APIs on loopback: it answers when the main is down, overloaded, out of quota or refusing its key,
and is never asked for a bad request, a refusal, or after the turn's deadline."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from shelldon.broker.anthropic_provider import AnthropicProvider
from shelldon.broker.fallback import Answered, Failover
from shelldon.broker.openai_provider import OpenAIProvider
from shelldon.broker.provider import Provider, ProviderError
from shelldon.contracts import Job, Message, Role, ToolCall, ToolDefinition
from tests.fakes.canned_server import Canned
from tests.fakes.fake_anthropic import FakeAnthropic, error_body
from tests.fakes.fake_openai import FakeOpenAI
from tests.integration.broker.conftest import FAST_BACKOFF

ATTEMPTS = FAST_BACKOFF.max_attempts


@pytest.fixture
def spare() -> Iterator[FakeOpenAI]:
    """The fallback: an OpenAI-compatible API that answers."""
    with FakeOpenAI(api_key="sk-spare-key-0123456789") as fake:
        yield fake


def anthropic(fake: FakeAnthropic | None, *, base_url: str = "") -> AnthropicProvider:
    return AnthropicProvider(
        api_key=fake.api_key if fake else "sk-ant-main",
        model="claude-main",
        max_tokens=64,
        base_url=base_url or (fake.base_url if fake else ""),
        backoff=FAST_BACKOFF,
    )


def openai(fake: FakeOpenAI, model: str = "gpt-spare") -> OpenAIProvider:
    return OpenAIProvider(
        api_key=fake.api_key,
        model=model,
        max_tokens=64,
        base_url=fake.base_url,
        backoff=FAST_BACKOFF,
    )


def failover(main: Provider, main_name: str, fallback: Provider) -> Failover:
    model = getattr(main, "model", "")
    spare_name = (getattr(fallback, "name", ""), getattr(fallback, "model", ""))
    return Failover(main, (main_name, model), lambda: fallback, spare_name)


def job(turn: str = "t1", budget_s: float = 5.0) -> Job:
    return Job(turn, (Message(Role.USER, "hello"),), (), time.monotonic() + budget_s)


def answer(brain: Failover, *jobs: Job) -> list[Answered]:
    async def go() -> list[Answered]:
        try:
            return [await brain.answer(j) for j in jobs]
        finally:
            await brain.aclose()

    return asyncio.run(go())


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_overloaded_main_after_its_retries_is_answered_by_the_fallback(
    fake_anthropic: FakeAnthropic, spare: FakeOpenAI
) -> None:
    for _ in range(ATTEMPTS):
        fake_anthropic.reply_error(529, "overloaded_error", "Overloaded")
    spare.reply_text("spare here")
    (said,) = answer(failover(anthropic(fake_anthropic), "anthropic", openai(spare)), job())
    assert said.completion.text == "spare here"
    assert (said.provider, said.model) == ("openai", "gpt-spare")
    assert said.note == ("↪ Answered by the fallback, openai gpt-spare: anthropic was overloaded.")
    assert len(fake_anthropic.requests) == ATTEMPTS  # its retries came first
    assert len(spare.requests) == 1


def test_a_503_main_is_answered_by_an_anthropic_fallback(
    fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    for _ in range(ATTEMPTS):
        fake_openai.reply_error(503, "Service Unavailable")
    fake_anthropic.reply_text("claude stands in")
    brain = failover(openai(fake_openai, "gpt-main"), "openai", anthropic(fake_anthropic))
    (said,) = answer(brain, job())
    assert (said.completion.text, said.provider) == ("claude stands in", "anthropic")
    assert "openai was overloaded" in said.note


def test_an_unreachable_main_is_answered_by_the_fallback(spare: FakeOpenAI) -> None:
    spare.reply_text("still here")
    main = anthropic(None, base_url=f"http://127.0.0.1:{closed_port()}")
    (said,) = answer(failover(main, "anthropic", openai(spare)), job())
    assert said.completion.text == "still here"
    assert "anthropic could not be reached" in said.note


def test_a_main_out_of_quota_goes_to_the_fallback_at_once(
    fake_openai: FakeOpenAI, spare: FakeOpenAI
) -> None:
    fake_openai.reply_error(429, "You exceeded your current quota", code="insufficient_quota")
    spare.reply_text("on the spare account")
    (said,) = answer(failover(openai(fake_openai, "gpt-main"), "openai", openai(spare)), job())
    assert said.completion.text == "on the spare account"
    assert "openai is out of credit or quota" in said.note
    assert len(fake_openai.requests) == 1  # a quota is not retried


def test_an_anthropic_account_out_of_credit_goes_to_the_fallback(
    fake_anthropic: FakeAnthropic, spare: FakeOpenAI
) -> None:
    # Anthropic says this with a 400 invalid_request_error: billing, not the request.
    message = (
        "Your credit balance is too low to access the Anthropic API. "
        "Please go to Plans & Billing to upgrade or purchase credits."
    )
    fake_anthropic.reply_error(400, "invalid_request_error", message)
    spare.reply_text("paid by the spare")
    (said,) = answer(failover(anthropic(fake_anthropic), "anthropic", openai(spare)), job())
    assert said.completion.text == "paid by the spare"
    assert "out of credit" in said.note


def test_a_refused_main_key_is_answered_by_the_fallback_and_says_so(spare: FakeOpenAI) -> None:
    with FakeAnthropic(api_key="sk-ant-the-real-one") as fake:
        spare.reply_text("spare answers")
        main = AnthropicProvider(
            api_key="sk-ant-revoked",
            model="claude-main",
            max_tokens=64,
            base_url=fake.base_url,
            backoff=FAST_BACKOFF,
        )
        (said,) = answer(failover(main, "anthropic", openai(spare)), job())
    assert said.completion.text == "spare answers"
    assert "anthropic refused its API key" in said.note and "shelldon doctor" in said.note


@pytest.mark.parametrize(
    ("status", "kind", "message"),
    [
        (400, "invalid_request_error", "messages: roles must alternate"),
        (404, "not_found_error", "model: claude-nope"),
        (413, "request_too_large", "Request exceeds the maximum allowed number of bytes."),
    ],
)
def test_a_fault_of_the_request_itself_never_reaches_the_fallback(
    fake_anthropic: FakeAnthropic, spare: FakeOpenAI, status: int, kind: str, message: str
) -> None:
    fake_anthropic.reply_error(status, kind, message)
    brain = failover(anthropic(fake_anthropic), "anthropic", openai(spare))
    with pytest.raises(ProviderError) as caught:
        answer(brain, job())
    assert caught.value.kind == "bad_request"
    assert spare.requests == []


def test_a_refusal_is_the_answer_and_the_fallback_is_not_asked(
    fake_anthropic: FakeAnthropic, spare: FakeOpenAI
) -> None:
    fake_anthropic.reply_text("I can't help with that.", stop_reason="refusal")
    (said,) = answer(failover(anthropic(fake_anthropic), "anthropic", openai(spare)), job())
    assert (said.completion.text, said.provider, said.note) == (
        "I can't help with that.",
        "anthropic",
        "",
    )
    assert spare.requests == []


def test_the_rest_of_the_turn_goes_straight_to_the_fallback_and_the_next_turn_to_the_main(
    fake_anthropic: FakeAnthropic, spare: FakeOpenAI
) -> None:
    for _ in range(ATTEMPTS):
        fake_anthropic.reply_error(529, "overloaded_error", "Overloaded")
    spare.reply_text("one")
    spare.reply_text("two")
    fake_anthropic.reply_text("main is back")
    first = job("t1")
    said = answer(
        failover(anthropic(fake_anthropic), "anthropic", openai(spare)), first, first, job("t2")
    )
    assert [(a.completion.text, a.provider) for a in said] == [
        ("one", "openai"),
        ("two", "openai"),
        ("main is back", "anthropic"),
    ]
    assert len(fake_anthropic.requests) == ATTEMPTS + 1  # no retries paid again mid-turn


def test_a_main_that_hangs_until_the_deadline_leaves_the_fallback_unasked(
    fake_anthropic: FakeAnthropic, spare: FakeOpenAI
) -> None:
    fake_anthropic.push(Canned(200, FakeAnthropic.message([]), delay_s=5.0))
    brain = failover(anthropic(fake_anthropic), "anthropic", openai(spare))
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        answer(brain, job(budget_s=1.0))
    assert caught.value.kind == "timeout"
    assert time.monotonic() - started < 1.5
    time.sleep(0.3)
    assert spare.requests == []  # nothing was sent to it, during the turn or after


def test_the_fallback_gets_only_what_is_left_of_the_turn(
    fake_anthropic: FakeAnthropic, spare: FakeOpenAI
) -> None:
    fake_anthropic.push(
        Canned(529, error_body("overloaded_error", "Overloaded"), headers={"retry-after": "60"})
    )
    spare.reply_text("too slow", delay_s=3.0)
    brain = failover(anthropic(fake_anthropic), "anthropic", openai(spare))
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        answer(brain, job(budget_s=1.0))
    assert time.monotonic() - started < 1.5
    assert caught.value.kind == "timeout"
    assert "after the main provider failed" in caught.value.message
    assert len(fake_anthropic.requests) == 1 and len(spare.requests) == 1


def test_a_switch_mid_turn_hands_the_fallback_the_mains_tool_calls_in_its_own_format(
    fake_anthropic: FakeAnthropic, spare: FakeOpenAI
) -> None:
    clock = ToolDefinition("get_time", "The time.", {})
    (call_id,) = fake_anthropic.reply_tool_calls(("get_time", {}))
    for _ in range(ATTEMPTS):
        fake_anthropic.reply_error(529, "overloaded_error", "Overloaded")
    spare.reply_text("It is noon.")
    deadline = time.monotonic() + 5
    asked = Job("t1", (Message(Role.USER, "time?"),), (clock,), deadline)
    brain = failover(anthropic(fake_anthropic), "anthropic", openai(spare))

    async def go() -> list[Answered]:
        try:
            first = await brain.answer(asked)
            calls = first.completion.tool_calls
            assert calls == (ToolCall(call_id, "get_time", {}),)
            transcript = (
                *asked.messages,
                Message(Role.ASSISTANT, "", calls),
                Message(Role.TOOL, "12:00", tool_call_id=call_id),
            )
            return [first, await brain.answer(Job("t1", transcript, (clock,), deadline))]
        finally:
            await brain.aclose()

    first, second = asyncio.run(go())
    assert (first.provider, second.provider) == ("anthropic", "openai")
    assert second.completion.text == "It is noon." and spare.rejections == []
    sent = spare.last_json()["messages"]
    assert sent[1]["tool_calls"][0]["id"] == call_id and sent[2]["tool_call_id"] == call_id
