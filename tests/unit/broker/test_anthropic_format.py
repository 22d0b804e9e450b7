"""Anthropic normalization and error translation, as plain functions (no network)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anthropic
import httpx2
import pytest

from shelldon.broker.anthropic_provider import (
    ERROR_KINDS,
    HISTORY_GAP,
    error_kind,
    from_anthropic,
    to_anthropic,
    translate_error,
)
from shelldon.broker.provider import KINDS, ProviderError
from shelldon.contracts import Message, Role, ToolCall, ToolDefinition

# Inspiration: httpx's test that every httpcore exception is mapped in its transport.


def exported_exceptions() -> list[type[BaseException]]:
    return [
        obj
        for name in dir(anthropic)
        if isinstance(obj := getattr(anthropic, name), type) and issubclass(obj, BaseException)
    ]


def test_every_exception_the_sdk_exports_is_mapped() -> None:
    mapped = {cls for cls, _ in ERROR_KINDS}
    missing = sorted(cls.__name__ for cls in exported_exceptions() if cls not in mapped)
    assert missing == []


def test_no_mapping_is_shadowed_by_a_more_general_one_before_it() -> None:
    for i, (general, _) in enumerate(ERROR_KINDS):
        for specific, _ in ERROR_KINDS[i + 1 :]:
            assert not issubclass(specific, general), f"{specific} is hidden by {general}"


def test_every_mapped_kind_is_a_provider_error_kind() -> None:
    assert {kind for _, kind in ERROR_KINDS} - {"by_status"} <= KINDS


def test_system_prompts_go_to_the_system_parameter() -> None:
    system, turns, _ = to_anthropic(
        [Message(Role.SYSTEM, "persona"), Message(Role.SYSTEM, "facts"), Message(Role.USER, "hi")],
        [],
    )
    assert system == "persona\n\nfacts"
    assert turns == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_consecutive_tool_results_and_user_text_become_one_user_message() -> None:
    calls = (ToolCall("t1", "a", {"x": 1}), ToolCall("t2", "b", {}))
    _, turns, _ = to_anthropic(
        [
            Message(Role.USER, "go"),
            Message(Role.ASSISTANT, "sure ", calls),
            Message(Role.TOOL, "one", tool_call_id="t1"),
            Message(Role.TOOL, "", tool_call_id="t2", is_error=True),
            Message(Role.USER, "and?"),
        ],
        [ToolDefinition("a", "", {}), ToolDefinition("b", "", {})],
    )
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"] == [
        {"type": "text", "text": "sure"},
        {"type": "tool_use", "id": "t1", "name": "a", "input": {"x": 1}},
        {"type": "tool_use", "id": "t2", "name": "b", "input": {}},
    ]
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "one", "is_error": False},
        {"type": "tool_result", "tool_use_id": "t2", "content": "(no output)", "is_error": True},
        {"type": "text", "text": "and?"},
    ]


def test_history_starting_with_the_assistant_gets_a_user_turn_first() -> None:
    _, turns, _ = to_anthropic([Message(Role.ASSISTANT, "earlier"), Message(Role.USER, "hi")], [])
    assert turns[0] == {"role": "user", "content": [{"type": "text", "text": HISTORY_GAP}]}
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]


def test_empty_texts_are_not_sent_as_empty_blocks() -> None:
    _, turns, _ = to_anthropic([Message(Role.USER, "hi"), Message(Role.USER, "  ")], [])
    assert turns == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_tool_definitions_get_object_input_schemas() -> None:
    _, _, tools = to_anthropic(
        [Message(Role.USER, "hi")],
        [ToolDefinition("t", "d", {"properties": {"a": {"type": "string"}}})],
    )
    assert tools == [
        {
            "name": "t",
            "description": "d",
            "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}},
        }
    ]


def block(**fields: object) -> SimpleNamespace:
    return SimpleNamespace(**fields)


def test_a_response_with_text_and_tool_use_keeps_order_and_usage() -> None:
    response = SimpleNamespace(
        content=[
            block(type="text", text="a"),
            block(type="thinking", thinking="hidden"),
            block(type="tool_use", id="t1", name="x", input={"k": 1}),
            block(type="text", text="b"),
            block(type="tool_use", id="t2", name="y", input="not an object"),
        ],
        stop_reason="tool_use",
        usage=SimpleNamespace(input_tokens=5, output_tokens=3),
    )
    completion = from_anthropic(response)
    assert completion.text == "ab"
    assert completion.tool_calls[0] == ToolCall("t1", "x", {"k": 1})
    assert completion.tool_calls[1].args == {}
    assert "not a JSON object" in completion.tool_calls[1].args_error
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (5, 3)
    assert not completion.truncated


def test_a_body_that_is_not_a_message_is_malformed() -> None:
    with pytest.raises(ProviderError) as caught:
        from_anthropic("<html>proxy error</html>")
    assert caught.value.kind == "malformed"


def sdk_error(
    cls: type[BaseException], status: int = 500, headers: dict[str, str] | None = None
) -> Any:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    if issubclass(cls, anthropic.APIStatusError):
        response = httpx2.Response(status, headers=headers or {}, request=request)
        return cls("refused", response=response, body={"error": {"message": "refused"}})
    if issubclass(cls, anthropic.APIResponseValidationError):
        return cls(httpx2.Response(200, request=request), None)
    if issubclass(cls, anthropic.APITimeoutError):
        return cls(request)
    if issubclass(cls, anthropic.APIConnectionError):
        return cls(request=request)
    if issubclass(cls, anthropic.APIError):
        return cls("odd", request, body=None)
    return cls("no credentials")


@pytest.mark.parametrize("cls", exported_exceptions(), ids=lambda c: c.__name__)
def test_every_sdk_exception_translates_to_a_provider_error(cls: type[BaseException]) -> None:
    error = translate_error(sdk_error(cls), secret="sk-never")
    assert error.kind in KINDS
    assert error.message


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        (anthropic.RateLimitError, "rate_limited"),
        (anthropic.OverloadedError, "overloaded"),
        (anthropic.InternalServerError, "server"),
        (anthropic.AuthenticationError, "auth"),
        (anthropic.BadRequestError, "bad_request"),
        (anthropic.ContractSpendLimitReachedError, "quota"),
        (anthropic.APITimeoutError, "timeout"),
        (anthropic.APIConnectionError, "unreachable"),
        (anthropic.APIResponseValidationError, "malformed"),
    ],
)
def test_sdk_exceptions_map_to_the_kinds_the_retry_loop_needs(
    cls: type[BaseException], kind: str
) -> None:
    assert translate_error(sdk_error(cls, 429, {"retry-after": "7"})).kind == kind


def test_retry_after_is_read_from_the_error_response() -> None:
    error = translate_error(sdk_error(anthropic.RateLimitError, 429, {"retry-after": "7"}))
    assert error.retry_after == 7.0


def test_an_unlisted_status_is_judged_by_its_code() -> None:
    assert error_kind(sdk_error(anthropic.APIStatusError, 418)) == "bad_request"
    assert error_kind(sdk_error(anthropic.APIStatusError, 599)) == "server"


def test_every_mapped_name_exists_in_the_installed_sdk() -> None:
    # A typo in the table would otherwise be skipped silently like a class an old SDK lacks.
    from shelldon.broker.anthropic_provider import _ERROR_KIND_NAMES

    assert [n for n, _ in _ERROR_KIND_NAMES if not hasattr(anthropic, n)] == []
