"""The OpenAI-compatible adapter, driven through the real aiohttp client against a fake Chat
Completions API on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Sequence

import pytest
import structlog

from shelldon.broker.openai_provider import ERROR_PREFIX, OpenAIProvider
from shelldon.broker.provider import ProviderError
from shelldon.contracts import Completion, Message, Role, ToolCall, ToolDefinition
from tests.fakes.fake_openai import FakeOpenAI
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


def provider_for(fake: FakeOpenAI, *, api_key: str | None = "same") -> OpenAIProvider:
    return OpenAIProvider(
        api_key=fake.api_key if api_key == "same" else api_key,
        model="gpt-test",
        max_tokens=256,
        base_url=fake.base_url,
        backoff=FAST_BACKOFF,
    )


def ask(
    provider: OpenAIProvider,
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


def test_plain_text_reply_comes_back_with_usage(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_text("Hi there!")
    completion = ask(provider_for(fake_openai), hello())
    assert completion.text == "Hi there!"
    assert completion.tool_calls == ()
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (11, 6)
    sent = fake_openai.last_json()
    assert sent["messages"] == [
        {"role": "system", "content": "You are shelldon."},
        {"role": "user", "content": "hello"},
    ]
    assert sent["max_tokens"] == 256
    assert sent["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in sent["tools"]] == ["list_dir", "clock"]
    assert sent["tools"][1]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert fake_openai.requests[-1].headers["Authorization"] == f"Bearer {fake_openai.api_key}"


def test_without_tools_no_tool_fields_are_sent(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_text("plain")
    assert ask(provider_for(fake_openai), hello(), tools=()).text == "plain"
    sent = fake_openai.last_json()
    assert "tools" not in sent and "tool_choice" not in sent


def test_one_tool_call_becomes_a_tool_call(fake_openai: FakeOpenAI) -> None:
    (call_id,) = fake_openai.reply_tool_calls(("list_dir", {"path": "."}))
    completion = ask(provider_for(fake_openai), hello())
    assert completion.tool_calls == (ToolCall(call_id, "list_dir", {"path": "."}),)
    assert completion.text == ""


def test_parallel_tool_calls_keep_their_order(fake_openai: FakeOpenAI) -> None:
    ids = fake_openai.reply_tool_calls(
        ("clock", {}), ("list_dir", {"path": "a"}), ("list_dir", {"path": "b"})
    )
    completion = ask(provider_for(fake_openai), hello())
    assert [c.id for c in completion.tool_calls] == ids
    assert [c.args.get("path") for c in completion.tool_calls] == [None, "a", "b"]


def test_unknown_tool_name_passes_through_for_the_worker_to_answer(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.reply_tool_calls(("summon_dragon", {"size": "xl"}))
    completion = ask(provider_for(fake_openai), hello())
    assert completion.tool_calls[0].name == "summon_dragon"


def test_malformed_arguments_become_flagged_calls_not_exceptions(fake_openai: FakeOpenAI) -> None:
    ids = fake_openai.reply_tool_calls(
        ("list_dir", '{"path": "a"'), ("list_dir", "[1, 2]"), ("clock", "{}")
    )
    completion = ask(provider_for(fake_openai), hello())
    broken, not_object, fine = completion.tool_calls
    assert broken.args == {} and broken.args_error.startswith("arguments were not valid JSON")
    assert not_object.args == {} and "must be a JSON object" in not_object.args_error
    assert fine == ToolCall(ids[2], "clock", {})


def test_full_round_trip_sends_each_result_as_a_tool_message(fake_openai: FakeOpenAI) -> None:
    ids = fake_openai.reply_tool_calls(("clock", {}), ("list_dir", {"path": "nope"}))
    fake_openai.reply_text("It is noon and the directory does not exist.")
    provider = provider_for(fake_openai)
    first = ask(provider, hello())
    transcript = [
        *hello(),
        Message(Role.ASSISTANT, first.text, first.tool_calls),
        Message(Role.TOOL, "12:00", tool_call_id=ids[0]),
        Message(Role.TOOL, "no such directory: nope", tool_call_id=ids[1], is_error=True),
    ]
    second = ask(provider, transcript)
    assert second.text.startswith("It is noon")
    assert fake_openai.rejections == []
    sent = fake_openai.last_json()["messages"]
    assistant = sent[2]
    assert assistant["content"] is None
    assert [json.loads(c["function"]["arguments"]) for c in assistant["tool_calls"]] == [
        {},
        {"path": "nope"},
    ]
    assert sent[3:] == [
        {"role": "tool", "tool_call_id": ids[0], "content": "12:00"},
        {
            "role": "tool",
            "tool_call_id": ids[1],
            "content": ERROR_PREFIX + "no such directory: nope",
        },
    ]


def test_calls_without_ids_get_ids_that_pair_with_their_results(fake_openai: FakeOpenAI) -> None:
    # llama.cpp and Ollama may leave ids out; the next request must still pair up.
    fake_openai.reply_tool_calls(("clock", {}), ("clock", {}), with_ids=False)
    fake_openai.reply_text("done")
    provider = provider_for(fake_openai)
    first = ask(provider, hello())
    a, b = first.tool_calls
    assert a.id and b.id and a.id != b.id
    transcript = [
        *hello(),
        Message(Role.ASSISTANT, "", first.tool_calls),
        Message(Role.TOOL, "1", tool_call_id=a.id),
        Message(Role.TOOL, "2", tool_call_id=b.id),
    ]
    assert ask(provider, transcript).text == "done"
    assert fake_openai.rejections == []


def test_the_fake_refuses_a_tool_message_answering_no_call(fake_openai: FakeOpenAI) -> None:
    # Proves the fake bites: an orphan tool message sent raw is refused like OpenAI does.
    import aiohttp

    async def go() -> tuple[int, str]:
        async with aiohttp.ClientSession() as session:
            body = {
                "model": "m",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "tool", "tool_call_id": "call_x", "content": "orphan"},
                ],
            }
            headers = {"Authorization": f"Bearer {fake_openai.api_key}"}
            async with session.post(
                f"{fake_openai.base_url}/chat/completions", json=body, headers=headers
            ) as response:
                return response.status, await response.text()

    status, text = asyncio.run(go())
    assert status == 400
    assert "must be a response to a preceeding message with 'tool_calls'" in text


def test_finish_reason_length_is_a_truncated_completion(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_text("cut", finish_reason="length")
    assert ask(provider_for(fake_openai), hello()).truncated


def test_rate_limit_waits_for_retry_after_then_succeeds(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_error(429, "Rate limit reached", headers={"retry-after-ms": "300"})
    fake_openai.reply_text("patience pays")
    started = time.monotonic()
    assert ask(provider_for(fake_openai), hello()).text == "patience pays"
    assert time.monotonic() - started >= 0.3
    assert len(fake_openai.requests) == 2


def test_retry_after_longer_than_the_budget_fails_fast(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_error(429, "Rate limit reached", headers={"retry-after": "20"})
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_openai), hello(), budget_s=3.0)
    assert time.monotonic() - started < 2.0  # no sleep: the wait is longer than the budget
    assert caught.value.kind == "rate_limited"
    assert len(fake_openai.requests) == 1


def test_out_of_credit_429_is_quota_and_not_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_error(429, "You exceeded your current quota", code="insufficient_quota")
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_openai), hello())
    assert caught.value.kind == "quota"
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize("status", [503, 529])
def test_overloaded_is_retried(fake_openai: FakeOpenAI, status: int) -> None:
    fake_openai.reply_error(status, "The engine is currently overloaded")
    fake_openai.reply_text("back")
    assert ask(provider_for(fake_openai), hello()).text == "back"
    assert len(fake_openai.requests) == 2


def test_server_error_500_is_retried_until_attempts_run_out(fake_openai: FakeOpenAI) -> None:
    for _ in range(FAST_BACKOFF.max_attempts):
        fake_openai.reply_error(500, "The server had an error")
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_openai), hello())
    assert caught.value.kind == "server"
    assert "The server had an error" in caught.value.message
    assert len(fake_openai.requests) == FAST_BACKOFF.max_attempts


def test_slow_server_past_the_deadline_times_out_on_time(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_text("too late", delay_s=5.0)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_openai), hello(), budget_s=0.5)
    assert caught.value.kind == "timeout"
    assert time.monotonic() - started < 2.0  # the 0.5 s budget, not the server's 5 s


def test_a_reply_that_is_not_json_is_malformed(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_raw(200, b"<html>502 Bad Gateway</html>")
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_openai), hello())
    assert caught.value.kind == "malformed"
    assert len(fake_openai.requests) == 1


def test_json_without_choices_is_malformed(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_json({"object": "chat.completion", "choices": []})
    with pytest.raises(ProviderError) as caught:
        ask(provider_for(fake_openai), hello())
    assert caught.value.kind == "malformed"


def test_unreachable_server_is_retried_then_reported(fake_openai: FakeOpenAI) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    provider = OpenAIProvider(
        api_key="k",
        model="m",
        max_tokens=5,
        base_url=f"http://127.0.0.1:{dead_port}/v1",
        backoff=FAST_BACKOFF,
    )
    with pytest.raises(ProviderError) as caught:
        ask(provider, hello())
    assert caught.value.kind == "unreachable"
    assert f"127.0.0.1:{dead_port}" in caught.value.message


def test_refused_key_is_an_auth_error_and_never_leaks(
    fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-proj-THIS-KEY-MUST-NOT-LEAK-42"
    provider = provider_for(fake_openai, api_key=secret)
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as events, pytest.raises(ProviderError) as caught:
        ask(provider, hello())
    error = caught.value
    assert error.kind == "auth"
    assert "openai_api_key" in error.message
    for text in (str(error), repr(error), error.message, repr(provider), str(events), caplog.text):
        assert secret not in text


def test_keyless_local_server_gets_no_authorization_header() -> None:
    with FakeOpenAI(api_key=None) as fake:
        fake.reply_text("llama says hi")
        completion = ask(provider_for(fake, api_key=None), hello())
        assert completion.text == "llama says hi"
        assert "Authorization" not in fake.requests[-1].headers


def test_one_session_serves_every_call(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_text("one")
    fake_openai.reply_text("two")
    provider = provider_for(fake_openai)

    async def go() -> bool:
        try:
            await provider.complete_with_tools(hello(), TOOLS, deadline=time.monotonic() + 5)
            first = provider._session
            await provider.complete_with_tools(hello(), TOOLS, deadline=time.monotonic() + 5)
            return first is provider._session and first is not None
        finally:
            await provider.aclose()

    assert asyncio.run(go())
    assert provider._session is None
