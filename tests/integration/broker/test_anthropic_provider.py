"""The Anthropic adapter, driven through the real SDK against a fake Messages API on loopback."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import pytest
import structlog

from shelldon.broker.anthropic_provider import AnthropicProvider
from shelldon.broker.provider import ProviderError
from shelldon.broker.transcript import UNANSWERED
from shelldon.contracts import Completion, Message, Role, ToolCall, ToolDefinition
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.integration.broker.conftest import FAST_BACKOFF

TOOLS = (
    ToolDefinition(
        "list_dir",
        "List a workspace directory.",
        {"properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolDefinition("clock", "The current time.", {}),
)
SYSTEM = Message(Role.SYSTEM, "You are shelldon.")


def provider_for(fake: FakeAnthropic, *, api_key: str | None = None) -> AnthropicProvider:
    return AnthropicProvider(
        api_key=api_key or fake.api_key,
        model="claude-test",
        max_tokens=256,
        base_url=fake.base_url,
        backoff=FAST_BACKOFF,
    )


def ask(
    provider: AnthropicProvider,
    messages: Sequence[Message],
    tools: Sequence[ToolDefinition] = TOOLS,
    budget_s: float = 5.0,
) -> Completion:
    async def go() -> Completion:
        try:
            return await provider.complete_with_tools(
                messages, tools, deadline=time.monotonic() + budget_s
            )
        finally:
            await provider.aclose()

    return asyncio.run(go())


def hello() -> list[Message]:
    return [SYSTEM, Message(Role.USER, "hello")]


def test_plain_text_reply_comes_back_with_usage(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_text("Hi there!")
    completion = ask(provider_for(fake_anthropic), hello())
    assert completion.text == "Hi there!"
    assert completion.tool_calls == ()
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (12, 7)
    assert not completion.truncated
    sent = fake_anthropic.last_json()
    assert sent["system"] == "You are shelldon."
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert sent["model"] == "claude-test" and sent["max_tokens"] == 256


def test_tool_definitions_are_sent_with_object_input_schemas(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.reply_text("ok")
    ask(provider_for(fake_anthropic), hello())
    tools = fake_anthropic.last_json()["tools"]
    assert [t["name"] for t in tools] == ["list_dir", "clock"]
    assert tools[0]["input_schema"]["type"] == "object"
    assert tools[0]["input_schema"]["required"] == ["path"]
    assert tools[1]["input_schema"] == {"type": "object", "properties": {}}


def test_one_tool_call_becomes_a_tool_call(fake_anthropic: FakeAnthropic) -> None:
    (call_id,) = fake_anthropic.reply_tool_calls(("list_dir", {"path": "."}), text="Looking.")
    completion = ask(provider_for(fake_anthropic), hello())
    assert completion.tool_calls == (ToolCall(call_id, "list_dir", {"path": "."}),)
    assert completion.text == "Looking."


def test_parallel_tool_calls_keep_their_order(fake_anthropic: FakeAnthropic) -> None:
    ids = fake_anthropic.reply_tool_calls(
        ("clock", {}), ("list_dir", {"path": "a"}), ("list_dir", {"path": "b"})
    )
    completion = ask(provider_for(fake_anthropic), hello())
    assert [c.id for c in completion.tool_calls] == ids
    assert [c.args.get("path") for c in completion.tool_calls] == [None, "a", "b"]


def test_unknown_tool_name_passes_through_for_the_worker_to_answer(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.reply_tool_calls(("summon_dragon", {"size": "xl"}))
    completion = ask(provider_for(fake_anthropic), hello())
    assert completion.tool_calls[0].name == "summon_dragon"
    assert completion.tool_calls[0].args == {"size": "xl"}


def test_full_round_trip_sends_all_results_in_one_user_message(
    fake_anthropic: FakeAnthropic,
) -> None:
    ids = fake_anthropic.reply_tool_calls(("clock", {}), ("list_dir", {"path": "nope"}))
    fake_anthropic.reply_text("It is noon and the directory does not exist.")
    provider = provider_for(fake_anthropic)
    first = ask(provider, hello())
    transcript = [
        *hello(),
        Message(Role.ASSISTANT, first.text, first.tool_calls),
        Message(Role.TOOL, "12:00", tool_call_id=ids[0]),
        Message(Role.TOOL, "no such directory: nope", tool_call_id=ids[1], is_error=True),
    ]
    second = ask(provider, transcript)
    assert second.text.startswith("It is noon")
    assert fake_anthropic.rejections == []
    sent = fake_anthropic.last_json()["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["type"] for b in sent[1]["content"]] == ["tool_use", "tool_use"]
    results = sent[2]["content"]
    assert [(b["tool_use_id"], b["content"], b["is_error"]) for b in results] == [
        (ids[0], "12:00", False),
        (ids[1], "no such directory: nope", True),
    ]


def test_a_tool_call_left_unanswered_is_answered_before_sending(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.reply_text("ok")
    transcript = [
        *hello(),
        Message(Role.ASSISTANT, "", (ToolCall("toolu_a", "clock", {}),)),
        Message(Role.USER, "never mind"),
    ]
    ask(provider_for(fake_anthropic), transcript)
    assert fake_anthropic.rejections == []
    last = fake_anthropic.last_json()["messages"][-1]
    assert last["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_a",
        "content": UNANSWERED,
        "is_error": True,
    }
    assert last["content"][1] == {"type": "text", "text": "never mind"}


def test_the_fake_refuses_a_tool_use_without_its_result(fake_anthropic: FakeAnthropic) -> None:
    # Proves the fake bites: the same transcript sent raw, without normalization, is refused.
    import anthropic

    async def go() -> None:
        client = anthropic.AsyncAnthropic(
            api_key=fake_anthropic.api_key, base_url=fake_anthropic.base_url, max_retries=0
        )
        try:
            await client.messages.create(
                model="m",
                max_tokens=10,
                tools=[{"name": "clock", "input_schema": {"type": "object"}}],
                messages=[
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "clock", "input": {}}],
                    },
                    {"role": "user", "content": "never mind"},
                ],
            )
        finally:
            await client.close()

    with pytest.raises(anthropic.BadRequestError, match="without `tool_result`"):
        asyncio.run(go())


def test_max_tokens_stop_is_a_truncated_completion(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_text("This answer was cut", stop_reason="max_tokens")
    completion = ask(provider_for(fake_anthropic), hello())
    assert completion.truncated
    assert completion.text == "This answer was cut"


def test_rate_limit_waits_for_retry_after_then_succeeds(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_error(429, "rate_limit_error", headers={"retry-after": "0.3"})
    fake_anthropic.reply_text("patience pays")
    started = time.monotonic()
    completion = ask(provider_for(fake_anthropic), hello())
    assert completion.text == "patience pays"
    assert time.monotonic() - started >= 0.3
    assert len(fake_anthropic.requests) == 2


def test_retry_after_longer_than_the_budget_fails_fast(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_error(429, "rate_limit_error", headers={"retry-after": "30"})
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_anthropic), hello(), budget_s=3.0)
    assert time.monotonic() - started < 2.0  # no sleep: the wait is longer than the budget
    assert caught.value.kind == "rate_limited"
    assert caught.value.retry_after == 30.0
    assert "30.0s" in caught.value.message
    assert len(fake_anthropic.requests) == 1


def test_overloaded_529_is_retried(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_error(529, "overloaded_error", "Overloaded")
    fake_anthropic.reply_text("back")
    assert ask(provider_for(fake_anthropic), hello()).text == "back"
    assert len(fake_anthropic.requests) == 2


def test_server_error_500_is_retried_until_attempts_run_out(
    fake_anthropic: FakeAnthropic,
) -> None:
    for _ in range(FAST_BACKOFF.max_attempts):
        fake_anthropic.reply_error(500, "api_error", "Internal server error")
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_anthropic), hello())
    assert caught.value.kind == "server"
    assert "HTTP 500" in caught.value.message
    assert len(fake_anthropic.requests) == FAST_BACKOFF.max_attempts


def test_bad_request_is_not_retried(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_error(400, "invalid_request_error", "prompt is too long")
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_anthropic), hello())
    assert caught.value.kind == "bad_request"
    assert "prompt is too long" in caught.value.message
    assert len(fake_anthropic.requests) == 1


def test_slow_server_past_the_deadline_times_out_on_time(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_text("too late", delay_s=5.0)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_anthropic), hello(), budget_s=0.5)
    elapsed = time.monotonic() - started
    assert caught.value.kind == "timeout"
    assert elapsed < 2.0  # bounded by the 0.5 s budget, not the server's 5 s


def test_a_reply_that_is_not_json_is_malformed(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_raw(200, b"<html><body>captive portal</body></html>")
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_anthropic), hello())
    assert caught.value.kind == "malformed"
    assert "captive portal" in caught.value.message
    assert len(fake_anthropic.requests) == 1


def test_broken_json_claiming_to_be_json_is_malformed(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_raw(200, b'{"content": [', content_type="application/json")
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_anthropic), hello())
    assert caught.value.kind == "malformed"


def test_refused_key_is_an_auth_error_and_never_leaks(
    fake_anthropic: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-ant-api03-THIS-KEY-MUST-NOT-LEAK-42"
    provider = provider_for(fake_anthropic, api_key=secret)
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as events, pytest.raises(ProviderError) as caught:
        ask(provider, hello())
    error = caught.value
    assert error.kind == "auth"
    assert len(fake_anthropic.requests) == 1
    for text in (str(error), repr(error), error.message, repr(provider), str(events), caplog.text):
        assert secret not in text


def test_a_server_echoing_the_key_cannot_put_it_in_the_error(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.reply_error(400, "invalid_request_error", f"weird {fake_anthropic.api_key}")
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_anthropic), hello())
    assert fake_anthropic.api_key not in str(caught.value)
    assert "[redacted]" in caught.value.message


def test_a_call_without_tools_sends_no_tools(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_text("just text")
    assert ask(provider_for(fake_anthropic), hello(), tools=()).text == "just text"
    assert "tools" not in fake_anthropic.last_json()


def test_plain_completion_of_a_tool_transcript_is_sent_as_text(
    fake_anthropic: FakeAnthropic,
) -> None:
    # The real API refuses tool blocks when no tools are defined.
    fake_anthropic.reply_text("summary")
    transcript = [
        *hello(),
        Message(Role.ASSISTANT, "", (ToolCall("toolu_1", "clock", {}),)),
        Message(Role.TOOL, "12:00", tool_call_id="toolu_1"),
    ]
    assert ask(provider_for(fake_anthropic), transcript, tools=()).text == "summary"
    assert fake_anthropic.rejections == []
    sent = fake_anthropic.last_json()["messages"]
    assert "clock({}) as toolu_1" in sent[1]["content"][0]["text"]
    assert "12:00" in sent[2]["content"][0]["text"]


def test_json_that_is_not_a_message_is_malformed(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.reply_raw(200, b'{"hello": "world"}', content_type="application/json")
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_anthropic), hello())
    assert caught.value.kind == "malformed"


def test_overloaded_every_time_ends_as_overloaded(fake_anthropic: FakeAnthropic) -> None:
    for _ in range(FAST_BACKOFF.max_attempts):
        fake_anthropic.reply_error(529, "overloaded_error", "Overloaded")
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_anthropic), hello())
    assert caught.value.kind == "overloaded"
    assert caught.value.retryable
