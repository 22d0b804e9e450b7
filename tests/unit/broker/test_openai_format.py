"""OpenAI-compatible normalization and status mapping, as plain functions (no network)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from shelldon.broker.openai_provider import (
    CLIENT_ERROR_KINDS,
    ERROR_PREFIX,
    from_openai,
    parse_arguments,
    status_kind,
    to_openai,
    token_field,
)
from shelldon.broker.provider import KINDS, ProviderError
from shelldon.contracts import Message, Role, ToolCall


def body(
    message: dict[str, object], finish_reason: str = "stop", **extra: object
) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}], **extra}


@pytest.mark.parametrize(
    ("raw", "args", "problem"),
    [
        ('{"a": 1}', {"a": 1}, ""),
        ({"a": 1}, {"a": 1}, ""),  # Ollama's object form
        ("", {}, ""),
        (None, {}, ""),
        ('{"a": 1', {}, "arguments were not valid JSON"),
        ("[1, 2]", {}, "arguments must be a JSON object, got list"),
        ('"text"', {}, "arguments must be a JSON object, got str"),
        ("null", {}, "arguments must be a JSON object, got NoneType"),
        (42, {}, "arguments must be a JSON object, got int"),
    ],
)
def test_arguments_parse_or_say_what_was_wrong(
    raw: object, args: dict[str, Any], problem: str
) -> None:
    parsed, error = parse_arguments(raw)
    assert parsed == args
    assert error.startswith(problem) if problem else error == ""


def test_tool_calls_parse_in_order_with_flagged_bad_arguments() -> None:
    completion = from_openai(
        body(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{"}},
                ],
            },
            "tool_calls",
            usage={"prompt_tokens": 9, "completion_tokens": 4},
        )
    )
    assert completion.tool_calls[0] == ToolCall("c1", "a", {})
    assert completion.tool_calls[1].name == "b" and completion.tool_calls[1].args_error
    assert completion.text == ""
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (9, 4)


def test_content_parts_and_missing_usage_are_understood() -> None:
    completion = from_openai(
        body({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"text": "b"}]})
    )
    assert completion.text == "ab"
    assert completion.usage.input_tokens == 0


def test_finish_reason_length_is_truncated() -> None:
    assert from_openai(body({"role": "assistant", "content": "x"}, "length")).truncated


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"choices": []},
        {"choices": [{"finish_reason": "stop"}]},
        body({"role": "assistant", "content": 5}),
        body({"role": "assistant", "tool_calls": "nope"}),
        body({"role": "assistant", "tool_calls": ["nope"]}),
    ],
)
def test_bodies_of_the_wrong_shape_are_malformed(bad: object) -> None:
    with pytest.raises(ProviderError) as caught:
        from_openai(bad)
    assert caught.value.kind == "malformed"


def test_transcript_becomes_tool_messages_with_error_prefix() -> None:
    wire, _ = to_openai(
        [
            Message(Role.SYSTEM, "s"),
            Message(Role.USER, "u"),
            Message(Role.ASSISTANT, "", (ToolCall("c1", "a", {"k": "v"}),)),
            Message(Role.TOOL, "boom", tool_call_id="c1", is_error=True),
            Message(Role.ASSISTANT, "final"),
        ],
        [],
    )
    assert wire[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "a", "arguments": '{"k": "v"}'}}
        ],
    }
    assert wire[3] == {"role": "tool", "tool_call_id": "c1", "content": ERROR_PREFIX + "boom"}
    assert wire[4] == {"role": "assistant", "content": "final"}


def test_a_call_with_bad_arguments_goes_back_with_empty_arguments() -> None:
    call = ToolCall("c1", "a", {}, "arguments were not valid JSON: ...")
    wire, _ = to_openai(
        [Message(Role.ASSISTANT, "", (call,)), Message(Role.TOOL, "x", tool_call_id="c1")], []
    )
    assert wire[0]["tool_calls"][0]["function"]["arguments"] == "{}"


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (429, "", "rate_limited"),
        (429, "insufficient_quota", "quota"),
        (401, "", "auth"),
        (403, "", "auth"),
        (402, "", "quota"),
        (408, "", "timeout"),
        (503, "", "overloaded"),
        (529, "", "overloaded"),
        (500, "", "server"),
        (502, "", "server"),
        (504, "", "timeout"),
        (501, "", "bad_request"),
        (400, "", "bad_request"),
        (404, "", "bad_request"),
    ],
)
def test_http_statuses_map_to_kinds(status: int, code: str, kind: str) -> None:
    assert status_kind(status, code) == kind


def test_openai_itself_gets_max_completion_tokens_others_max_tokens() -> None:
    assert token_field("https://api.openai.com/v1") == "max_completion_tokens"
    assert token_field("https://openrouter.ai/api/v1") == "max_tokens"
    assert token_field("http://127.0.0.1:8080/v1") == "max_tokens"


def test_every_aiohttp_client_error_is_mapped_and_none_is_shadowed() -> None:
    mapped = [cls for cls, _ in CLIENT_ERROR_KINDS]
    exported = [
        obj
        for name in aiohttp.__all__
        if isinstance(obj := getattr(aiohttp, name), type) and issubclass(obj, aiohttp.ClientError)
    ]
    assert sorted(c.__name__ for c in exported if c not in mapped) == []
    for i, general in enumerate(mapped):
        for specific in mapped[i + 1 :]:
            assert not issubclass(specific, general), f"{specific} is hidden by {general}"
    assert {kind for _, kind in CLIENT_ERROR_KINDS} <= KINDS
