"""The fake APIs refuse what the real ones refuse, so a normalization bug fails a test."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.fake_anthropic import check_messages_request
from tests.fakes.fake_openai import check_chat_request

TOOLS_A = [{"name": "clock", "input_schema": {"type": "object"}}]
USE = {"type": "tool_use", "id": "t1", "name": "clock", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "12:00"}


def anthropic_body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": messages, "tools": TOOLS_A, **extra}


def test_anthropic_accepts_a_well_formed_round_trip() -> None:
    body = anthropic_body(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [USE]},
            {"role": "user", "content": [RESULT, {"type": "text", "text": "and?"}]},
        ]
    )
    assert check_messages_request(body) is None


@pytest.mark.parametrize(
    ("messages", "extra", "problem"),
    [
        ([{"role": "assistant", "content": "hi"}], {}, "first message must use the user role"),
        (
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
            {},
            "roles must alternate",
        ),
        ([{"role": "system", "content": "s"}], {}, "top-level system parameter"),
        ([{"role": "user", "content": ""}], {}, "must be non-empty"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], {}, "non-empty"),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [USE]},
                {"role": "user", "content": "no result"},
            ],
            {},
            "without `tool_result` blocks immediately after: t1",
        ),
        (
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [USE]}],
            {},
            "without `tool_result`",
        ),
        ([{"role": "user", "content": [RESULT]}], {}, "unexpected `tool_use_id`"),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [USE]},
                {"role": "user", "content": [{"type": "text", "text": "x"}, RESULT]},
            ],
            {},
            "must come before any other content",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [USE]},
                {"role": "user", "content": [RESULT]},
            ],
            {"tools": []},
            "must define tools",
        ),
        (
            [{"role": "user", "content": "hi"}],
            {"tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]},
            "tools.0.name",
        ),
        (
            [{"role": "user", "content": "hi"}],
            {"tools": [{"name": "t", "input_schema": {"properties": {}}}]},
            "input_schema.type",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "x y", "name": "a", "input": {}}],
                }
            ],
            {},
            "only allowed in assistant messages",
        ),
    ],
)
def test_anthropic_refuses_what_the_real_api_refuses(
    messages: list[dict[str, Any]], extra: dict[str, Any], problem: str
) -> None:
    result = check_messages_request(anthropic_body(messages, **extra))
    assert result is not None and problem in result


CALL = {"id": "c1", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
TOOLS_O = [{"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}]


def openai_body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": messages, "tools": TOOLS_O, **extra}


def test_openai_accepts_a_well_formed_round_trip() -> None:
    body = openai_body(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
            {"role": "user", "content": "thanks"},
        ]
    )
    assert check_chat_request(body) is None


@pytest.mark.parametrize(
    ("messages", "extra", "problem"),
    [
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "tool", "tool_call_id": "c9", "content": "x"},
            ],
            {},
            "must be a response to a preceeding message with 'tool_calls'",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "user", "content": "skip it"},
            ],
            {},
            "did not have response messages: c1",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "clock", "arguments": {}}}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "x"},
            ],
            {},
            "function.arguments: expected a string",
        ),
        (
            [{"role": "user", "content": "hi"}],
            {"tools": None, "tool_choice": "auto"},
            "tool_choice",
        ),
        ([{"role": "robot", "content": "hi"}], {}, "role: Invalid value"),
        ([], {}, "minimum length 1"),
    ],
)
def test_openai_refuses_what_the_real_api_refuses(
    messages: list[dict[str, Any]], extra: dict[str, Any], problem: str
) -> None:
    result = check_chat_request(openai_body(messages, **extra))
    assert result is not None and problem in result
